import type { IncomingMessage, ServerResponse } from 'node:http'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import { answerDelivery, createStandaloneReceiver, tooLarge, type AcceptedOutcome, type ReceiveOutcome, type WebhookReceiverOptions } from '../receiver/index.js'
import { readStream } from '../receiver/node/read-stream.js'
import { writeReply } from '../receiver/node/reply.js'

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

/** The `readBody` port: the Buffer of a route-level express.raw() (exact bytes: Content-Encoding was refused), else the stream. */
function bodyOf (req: WebhookRequest, limit: number): Uint8Array | Promise<Uint8Array> {
  if (Buffer.isBuffer(req.body)) {
    if (req.body.length > limit) throw tooLarge(limit)
    return req.body
  }
  if (req._body === true || req.readableEnded) throw new VerificationError('configuration_error', CONSUMED_MESSAGE)
  return readStream(req, limit)
}

/**
 * The handler's outcome in Express is the status it answers with: the first `res.end()`
 * (behind `res.json`, `res.send`, a piped stream, Express' final error handler) settles the
 * claim with `res.statusCode`, whether or not the socket is still open.
 */
function settleOnEnd (res: ServerResponse, outcome: AcceptedOutcome, settle: (o: ReceiveOutcome, status: number) => void): void {
  const end = res.end
  res.end = function (this: ServerResponse, ...args: unknown[]) {
    res.end = end
    settle(outcome, res.statusCode)
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
 * With `handlers` (a `WebhookEventRouter`) or `enqueue`, the middleware answers the delivery
 * itself after verification (no handler after it: `app.post(path, mailchannelsWebhook({ ..., handlers: router }))`):
 * 200 `{ handled, skipped, unhandled }` or `{ queued }`, 500 `handler_error`, or 503 with
 * `Retry-After`; its answer settles the replay claim.
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
  const { receiver, log } = createStandaloneReceiver(options)
  const answer = receiver.options.answer
  let serverChecked = false

  function apply (req: WebhookRequest, res: ServerResponse, next: (err?: unknown) => void, outcome: ReceiveOutcome): void {
    if (outcome.kind !== 'accepted') {
      if (res.headersSent) res.destroy()
      else writeReply(res, outcome.reply)
      return
    }
    ;(req as { [kVerified]?: true })[kVerified] = true
    req.webhookEvents = outcome.events
    if (answer !== null) {
      // Answered here (handlers or enqueue); the claim is settled by this answer, even when the client has gone.
      answerDelivery(answer, outcome, log).then((reply) => {
        if (res.headersSent) res.destroy()
        else writeReply(res, reply)
      }).catch((err: unknown) => { log.error({ err }, 'mailchannels webhook: failed to answer the delivery') })
      return
    }
    // Even when the client has gone: the delivery is verified and claimed, so it is handled and its answer settles the claim.
    if (outcome.claim !== null) settleOnEnd(res, outcome, receiver.settle)
    next()
  }

  return function mailchannelsWebhookMiddleware (incoming, res, next) {
    const req = incoming as WebhookRequest
    // MailChannels delivers with POST only: anything else passes through untouched (GET /health
    // under app.use(mailchannelsWebhook(...))). A request another mailchannelsWebhook() already
    // verified (mounted app-wide and on the route) goes on as it is: its body is consumed and its claim made.
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
    const outcome = receiver.handle({ headers: req.headers, readBody: (limit) => bodyOf(req, limit) }, log)
    if (!(outcome instanceof Promise)) apply(req, res, next, outcome)
    else outcome.then((o) => { apply(req, res, next, o) }).catch((err: unknown) => { log.error({ err }, 'mailchannels webhook: failed after verification') })
  }
}
