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
  /** Where rejections, duplicates, key-fetch failures and startup warnings are logged (pino-compatible). Default: nowhere. */
  logger?: Logger
}

/** The request as the middleware sees it (Express's `Request` fits). */
export type WebhookRequest = IncomingMessage & { body?: unknown, _body?: boolean, webhookEvents?: WebhookEvent[] }

/** A connect-style middleware; fits `app.post(path, mailchannelsWebhook(...), handler)` in express 4 and 5. */
export type WebhookMiddleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void

const CONSUMED_MESSAGE = 'The request body was already consumed by a body parser (such as a global express.json()), so the exact bytes needed to verify the signature are gone. ' +
  'Mount mailchannelsWebhook() before any JSON parser for this route, or use express.raw({ type: "application/json", inflate: false }) on it.'

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

/** Reads the body with a limit and no decoding or decompression; stops buffering at the limit. */
function readBody (req: IncomingMessage, limit: number, cb: (err: VerificationError | null, body?: Buffer) => void): void {
  const chunks: Buffer[] = []
  let length = 0
  const cleanup = (): void => {
    req.removeListener('data', onData)
    req.removeListener('end', onEnd)
    req.removeListener('error', onError)
    req.removeListener('close', onClose)
  }
  function onData (chunk: Buffer | string): void {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    length += buf.length
    if (length > limit) {
      cleanup()
      req.pause()
      cb(tooLarge(limit))
      return
    }
    chunks.push(buf)
  }
  function onEnd (): void {
    cleanup()
    cb(null, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length))
  }
  function onError (): void {
    cleanup()
    cb(new VerificationError('invalid_payload', 'The request body could not be read.'))
  }
  function onClose (): void {
    // The client went away mid-body: nobody is left to answer.
    if (!req.complete) cleanup()
  }
  req.on('data', onData)
  req.on('end', onEnd)
  req.on('error', onError)
  req.on('close', onClose)
}

/**
 * The MailChannels webhook middleware for Express 4 and 5. Put it on the webhook route
 * with no body parser before it: it reads the exact raw bytes itself (with `bodyLimit`, and
 * never decompresses), or reuses the Buffer of a route-level `express.raw()`. After
 * verification the typed events are on `req.webhookEvents` (never `req.body`) and the next
 * handler runs; on any failure it answers `{ statusCode, code, error, message }` with
 * 400, 401, 403, 413, 415, 500 `configuration_error` (body already parsed as JSON) or 503 + Retry-After.
 * An exact resend is answered `200 { duplicate: true }` without calling `next`.
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
  if (r.anyCustomer) log.warn({}, "mailchannels-webhooks: customerHandles is 'any': deliveries signed for any MailChannels customer are accepted (threat-model T22)")

  function accept (req: WebhookRequest, res: ServerResponse, next: (err?: unknown) => void, delivery: VerifiedDelivery): void {
    const store = r.replay
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
    const h = req.headers
    const bad = checkTransport(h['content-type'], h['content-encoding'], h['content-length'], r.bodyLimit)
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
