import type { IncomingMessage, ServerResponse } from 'node:http'
import {
  asVerificationError,
  claimDelivery,
  DUPLICATE_BODY,
  failureReply,
  ClaimSettlement,
  logRejection,
  verifyBody,
} from '../adapter/flow.js'
import {
  keyStoreFactory,
  rejectUnknownOptions,
  resolveReceiverOptions,
  type ResolvedReceiver,
  type WebhookReceiverOptions,
} from '../adapter/options.js'
import { readBody } from '../adapter/body.js'
import { checkTransport, tooLarge } from '../adapter/transport.js'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import { noopLogger, type Logger } from '../logger.js'
import type { VerifiedDelivery } from '../verify/verify-webhook.js'

declare global {
  // Express's own augmentation point (works with express 4 and 5 types).
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** The verified, typed events of a MailChannels delivery; set by `mailchannelsWebhook()` only after verification succeeded. */
      webhookEvents?: WebhookEvent[]
    }
  }
}

/** Options of the Express middleware: the receiver options plus a logger. */
export interface MailChannelsWebhookOptions extends WebhookReceiverOptions {
  /**
   * Where rejections, duplicates, key-fetch failures, replay-store failures and startup
   * warnings are logged: the same lines as the Fastify plugin writes to `request.log`. Any
   * pino-compatible logger (`pino()`, or `req.log` style loggers), called as `log.info(obj, msg)`.
   * @default no logging
   */
  logger?: Logger
}

/** The request as the middleware sees it (Express's `Request` fits). */
export type WebhookRequest = IncomingMessage & { body?: unknown, _body?: boolean, webhookEvents?: WebhookEvent[] }

/** A connect-style middleware; fits `app.post(path, mailchannelsWebhook(...), handler)` in express 4 and 5. */
export type WebhookMiddleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void

const CONSUMED_MESSAGE = 'The request body was already consumed by a body parser (such as a global express.json()), so the exact bytes needed to verify the signature are gone. ' +
  'Mount mailchannelsWebhook() before any body parser for this route, or use express.raw({ type: "*/*", inflate: false }) on it.'

const kVerified = Symbol('mailchannels-webhooks.verified')

function send (res: ServerResponse, status: number, body: unknown, headers?: Record<string, string>): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  res.statusCode = status
  res.setHeader('content-type', 'application/json; charset=utf-8')
  if (headers !== undefined) for (const [k, v] of Object.entries(headers)) res.setHeader(k, v)
  res.end(JSON.stringify(body))
}

function fail (req: IncomingMessage, res: ServerResponse, err: unknown, log: Logger): void {
  const e = asVerificationError(err)
  if (!(err instanceof VerificationError)) log.error({ err: err instanceof Error ? err.message : String(err) }, 'mailchannels webhook: unexpected error while verifying')
  const f = failureReply(e)
  logRejection(log, e, f.status, req.headers)
  const headers: Record<string, string> = {}
  if (f.retryAfter !== undefined) headers['retry-after'] = String(f.retryAfter)
  // Don't keep reading a body we refused for its size.
  if (f.status === 413) headers.connection = 'close'
  send(res, f.status, f.body, headers)
}

/**
 * The handler's outcome in Express is the status it answers with: the first `res.end()`
 * (which `res.json`, `res.send`, `res.sendStatus`, a piped stream and Express' final error
 * handler all call) settles the claim with `res.statusCode`, whether or not the socket is
 * still open. An error passed to `next(err)` is answered by the app's error handler (Express'
 * default answers 500). A handler that never ends the response leaves the claim processing
 * until it expires.
 */
function settleOnEnd (res: ServerResponse, claim: ClaimSettlement): void {
  const end = res.end
  res.end = function (this: ServerResponse, ...args: unknown[]) {
    res.end = end
    claim.settle(res.statusCode)
    return (end as (...a: unknown[]) => ServerResponse).apply(this, args)
  } as ServerResponse['end']
}

/**
 * The MailChannels webhook middleware for Express 4 and 5 (or a bare `node:http` server). Put
 * it on the webhook route with no body parser before it: `app.post(path, mailchannelsWebhook(options), handler)`.
 * It reads the exact raw bytes itself, whatever the media type (with `bodyLimit`, and never
 * decompressing), or reuses the Buffer of a route-level `express.raw({ type: '*\/*', inflate: false })`.
 * After verification the typed events are on `req.webhookEvents` (never `req.body`) and the next
 * handler runs; on any failure it answers `{ statusCode, code, error, message }` with 400, 401,
 * 403, 413, 415, 500 `configuration_error` (body already consumed) or 503 + Retry-After.
 * An exact resend is answered `200 { duplicate: true }` without calling `next`.
 *
 * Only POST requests are verified; any other method goes to `next()` untouched, so
 * `app.use('/webhooks', mailchannelsWebhook(options))` verifies every POST under that path and
 * leaves the rest alone (mounted with `app.use` at the root, it verifies every POST of the app).
 *
 * The handler's own answer settles the replay claim: the first `res.end()` (behind `res.json`,
 * `res.send`, Express' error handler...) with a 2xx status completes it, any other status
 * releases it so the sender's retry is processed, whether or not the client is still connected.
 * On Express 4 an async handler that rejects never answers (pass errors to `next`).
 *
 * Throws a `TypeError` naming the option when an option is invalid; `customerHandles` is required.
 */
export function mailchannelsWebhook (options: MailChannelsWebhookOptions): WebhookMiddleware {
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object')
  rejectUnknownOptions(options)
  const log = options.logger ?? noopLogger
  for (const m of ['debug', 'info', 'warn', 'error'] as const) {
    if (typeof log?.[m] !== 'function') throw new TypeError('logger must have debug, info, warn and error methods')
  }
  const r: ResolvedReceiver = resolveReceiverOptions(options, keyStoreFactory(log))
  if (r.anyCustomer) log.warn({}, "mailchannels-webhooks: customerHandles is 'any': deliveries signed for any MailChannels customer are accepted")
  let serverChecked = false

  function accept (req: WebhookRequest, res: ServerResponse, next: (err?: unknown) => void, delivery: VerifiedDelivery): void {
    const store = r.replay
    ;(req as { [kVerified]?: true })[kVerified] = true
    if (store === null) {
      req.webhookEvents = delivery.events
      next()
      return
    }
    claimDelivery(store, delivery, r.replayTtl).then((outcome) => {
      if (!outcome.claimed) {
        log.info({ keyId: delivery.keyId, state: outcome.state }, 'mailchannels webhook: duplicate delivery, not handled again')
        send(res, 200, DUPLICATE_BODY)
        return
      }
      settleOnEnd(res, new ClaimSettlement(store, outcome.id, r.replayTtl, log))
      // Even when the client has gone: the delivery is verified and claimed, so it is handled
      // (its answer settles the claim). Releasing instead would let a copy in.
      req.webhookEvents = delivery.events
      next()
    }, (err: unknown) => { fail(req, res, err, log) })
      .catch((err: unknown) => { log.error({ err: err instanceof Error ? err.message : String(err) }, 'mailchannels webhook: failed after the replay claim') })
  }

  function verify (req: WebhookRequest, res: ServerResponse, next: (err?: unknown) => void, body: Buffer): void {
    let result: VerifiedDelivery | Promise<VerifiedDelivery>
    try {
      result = verifyBody(r, body, req.headers, log)
    } catch (err) {
      fail(req, res, err, log)
      return
    }
    if (result instanceof Promise) {
      result.then((d) => { accept(req, res, next, d) }, (err: unknown) => { fail(req, res, err, log) })
        .catch((err: unknown) => { log.error({ err: err instanceof Error ? err.message : String(err) }, 'mailchannels webhook: failed after verification') })
    } else {
      accept(req, res, next, result)
    }
  }

  return function mailchannelsWebhookMiddleware (incoming, res, next) {
    const req = incoming as WebhookRequest
    // MailChannels delivers with POST only: anything else is not a delivery and passes through
    // untouched, so app.use(mailchannelsWebhook(...)) leaves GET /health and the like alone.
    // A request another mailchannelsWebhook() already verified (mounted app-wide and on the
    // route) goes on as it is: its body is consumed and its claim made.
    if (req.method !== 'POST' || (req as { [kVerified]?: true })[kVerified] === true) {
      next()
      return
    }
    if (!serverChecked) {
      serverChecked = true
      // The same startup warning as the Fastify plugin, at the first delivery (the server is not known before).
      const server = (req.socket as { server?: { requestTimeout?: number } } | undefined)?.server
      if (server?.requestTimeout === 0) {
        log.warn({}, 'mailchannels-webhooks: the HTTP server\'s requestTimeout is 0, so a client can trickle a request body forever; set server.requestTimeout = 30000 and server.headersTimeout = 60000')
      }
    }
    const h = req.headers
    const bad = checkTransport(h['content-type'], h['content-encoding'], h['content-length'], r.bodyLimit, r.contentTypes)
    if (bad !== null) {
      fail(req, res, bad, log)
      return
    }
    const existing = req.body
    if (Buffer.isBuffer(existing)) {
      // express.raw() ran first: its Buffer is the exact bytes (unless it inflated them: Content-Encoding was refused above).
      if (existing.length > r.bodyLimit) fail(req, res, tooLarge(r.bodyLimit), log)
      else verify(req, res, next, existing)
      return
    }
    if (req._body === true || req.readableEnded) {
      fail(req, res, new VerificationError('configuration_error', CONSUMED_MESSAGE), log)
      return
    }
    readBody(req, r.bodyLimit, (err, body) => {
      if (err !== null) fail(req, res, err, log)
      else verify(req, res, next, body!)
    })
  }
}
