import type { IncomingMessage, ServerResponse } from 'node:http'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import { createWebhookFlow, type AcceptedOutcome, type SettleHandler, type WebhookIO, type WebhookReceiverOptions } from '../receiver/index.js'
import { readNodeBody, type NodeBodyRequest } from '../receiver/node/raw-body.js'
import { writeReply } from '../receiver/node/reply.js'

declare const verifiedLocals: unique symbol

/**
 * A type-only mark on `res.locals` that `mailchannelsWebhooks()` puts on the handlers after it
 * on the same route (Express infers one locals type for a route's handlers); no such property
 * exists at run time. It is how `req.webhookEvents` is known to be set there.
 */
export interface WebhookLocals { readonly [verifiedLocals]: true }

declare global {
  // Express's own augmentation point (works with express 4 and 5 types).
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /**
       * The verified, typed events of a MailChannels delivery; set by `mailchannelsWebhooks()`
       * only after verification succeeded. A `WebhookEvent[]` in a handler that follows the
       * middleware on its route (`app.post(path, mailchannelsWebhooks(options), handler)`),
       * possibly undefined anywhere else. On a request the middleware let through unverified
       * (any method but POST, as with `app.all(path, mailchannelsWebhooks(options), handler)`)
       * reading it throws an `Error` saying why, so a handler never goes on without verified
       * events. `webhookEventsOf(req)` never throws.
       */
      webhookEvents: this extends { res?: { locals: WebhookLocals } } ? WebhookEvent[] : WebhookEvent[] | undefined
    }
  }
}

/** Options of the Express middleware: the receiver options plus a logger. */
export interface MailChannelsWebhooksOptions extends WebhookReceiverOptions {
  /**
   * Where rejections, duplicates, key-fetch failures, replay-store failures and startup
   * warnings are logged: the same lines as the Fastify plugin writes to `request.log`. Any
   * pino-compatible logger (`pino()`, or `req.log` style loggers), called as `log.info(obj, msg)`.
   * @default no logging
   */
  logger?: Logger
}

/** The request as the middleware sees it (Express's `Request` fits). */
export type WebhookRequest = NodeBodyRequest & { webhookEvents?: WebhookEvent[] }

/**
 * A connect-style middleware; fits `app.post(path, mailchannelsWebhooks(...), handler)` in
 * express 4 and 5, and a bare `node:http` server. Its second signature only marks the route's
 * `res.locals` type (`WebhookLocals`), so that `req.webhookEvents` is a `WebhookEvent[]` in the
 * handlers after it: Express types infer the route's locals from the last signature.
 */
export interface WebhookMiddleware {
  (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void
  (req: IncomingMessage, res: ServerResponse & { locals: Record<string, any> & WebhookLocals }, next: (err?: unknown) => void): void
}

/**
 * Requests a mailchannelsWebhooks() already verified. A WeakSet (their events are on
 * `req.webhookEvents`; a WeakMap holding them too measured slower on 1,000-event deliveries), not a mark on
 * the request: Express gives every request and response a prototype of its own app
 * (`Object.setPrototypeOf`), after which V8 shares no hidden class between them, so each property
 * added to one builds a new hidden class (about 1 µs, and garbage). The middleware adds one
 * (`req.webhookEvents`) and writes `res.end` once.
 */
const verifiedRequests = new WeakSet<object>()

/**
 * The verified events of a request, or `undefined` when no `mailchannelsWebhooks()` verified it
 * (never throws, unlike reading `req.webhookEvents` on a request the middleware let through).
 */
export function webhookEventsOf (req: IncomingMessage): WebhookEvent[] | undefined {
  return verifiedRequests.has(req) ? (req as WebhookRequest).webhookEvents : undefined
}

/** Why `req.webhookEvents` is not set on a request the middleware let through. */
function notVerified (this: IncomingMessage): never {
  throw new Error(`req.webhookEvents is not set: mailchannelsWebhooks() verifies POST requests only and let this ${String(this.method)} request through unverified, ` +
    'so it carries no verified delivery. Declare the webhook route with app.post(path, mailchannelsWebhooks(options), handler) rather than app.all() or app.use(), ' +
    'or use webhookEventsOf(req) where the events may be absent.')
}

/** Assigning it anyway (the app's own value) replaces the throwing getter with a plain property. */
function assignEvents (this: IncomingMessage, value: unknown): void {
  Object.defineProperty(this, 'webhookEvents', { value, writable: true, enumerable: true, configurable: true })
}

/**
 * Marks a request let through unverified: reading `req.webhookEvents` throws, saying why. Not
 * enumerable, so loggers, `JSON.stringify` and `util.inspect` never call it.
 */
function markUnverified (req: IncomingMessage): void {
  Object.defineProperty(req, 'webhookEvents', { get: notVerified, set: assignEvents, enumerable: false, configurable: true })
}

/** One request as the flow sees it. */
interface ExpressContext { req: WebhookRequest, res: ServerResponse, next: (err?: unknown) => void }


/**
 * The handler's outcome in Express is the status it answers with: the first `res.end()`
 * (behind `res.json`, `res.send`, a piped stream, Express' final error handler) settles the
 * claim with `res.statusCode`, whether or not the socket is still open. The wrapper stays in
 * place after that first call (a flag, not a second write of `res.end`): see `verifiedRequests`.
 */
function settleOnEnd (res: ServerResponse, outcome: AcceptedOutcome, settle: SettleHandler): void {
  const end = res.end as (...a: unknown[]) => ServerResponse
  let settled = false
  res.end = function (this: ServerResponse) {
    if (!settled) {
      settled = true
      settle(outcome, res.statusCode)
    }
    // `arguments` as given (no rest array per request), so end() sees exactly its caller's arguments.
    // eslint-disable-next-line prefer-rest-params
    return end.apply(this, arguments as unknown as unknown[])
  } as ServerResponse['end']
}

/** Express's request and response, translated for the flow. */
const IO: Omit<WebhookIO<ExpressContext, void>, 'readBody'> = {
  headers: ({ req }) => req.headers,
  reply ({ res }, reply) {
    // Something else already answered (a timeout middleware, say): end the connection rather than answer twice.
    if (res.headersSent) res.destroy()
    else writeReply(res, reply)
  },
  run ({ req, res, next }, outcome, settle) {
    verifiedRequests.add(req)
    req.webhookEvents = outcome.events
    // Even when the client has gone: the delivery is verified and claimed, so it is handled and its answer settles the claim.
    if (outcome.claim !== null) settleOnEnd(res, outcome, settle)
    next()
  },
}

/**
 * The MailChannels webhook middleware for Express 4 and 5 (or a bare `node:http` server), on the
 * webhook route: `app.post(path, mailchannelsWebhooks(options), handler)`. It reads the exact raw
 * bytes itself, whatever the media type (with `bodyLimit`, and never decompressing); behind an
 * app's global body parsers it verifies the bytes they kept with
 * `app.use(express.json({ verify: captureRawBody }))` (or NestJS's `req.rawBody`, or a
 * route-level `express.raw()` Buffer). After verification the typed events are on
 * `req.webhookEvents` and the next handler runs; on any failure it answers
 * `{ statusCode, code, error, message }` with 400, 401, 403, 413, 415, 500 `configuration_error`
 * (a body parser read the body without keeping its bytes: the message names the fix) or 503 + Retry-After.
 * An exact resend is answered `200 { duplicate: true }` without calling `next`.
 *
 * With `handlers` (a `WebhookEventRouter`) or `enqueue`, the middleware answers the delivery
 * itself after verification (no handler after it: `app.post(path, mailchannelsWebhooks({ ..., handlers: router }))`):
 * 200 `{ handled, skipped, unhandled }` or `{ queued }`, 500 `handler_error`, or 503 with
 * `Retry-After`; its answer settles the replay claim.
 *
 * Only POST requests are verified; any other method goes to `next()` untouched, so
 * `app.use('/webhooks', mailchannelsWebhooks(options))` verifies every POST under that path and
 * leaves the rest alone (mounted with `app.use` at the root, it verifies every POST of the app).
 * Reading `req.webhookEvents` on such a request throws (`app.all(path, mailchannelsWebhooks(options), handler)`
 * on a GET): a handler never runs on as if a delivery had been verified.
 *
 * The handler's own answer settles the replay claim: the first `res.end()` (behind `res.json`,
 * `res.send`, Express' error handler...) with a 2xx status completes it, any other status
 * releases it so the sender's retry is processed, whether or not the client is still connected.
 * On Express 4 an async handler that rejects never answers (pass errors to `next`).
 *
 * Throws a `TypeError` naming the option when an option is invalid; `customerHandles` is required.
 */
export function mailchannelsWebhooks (options: MailChannelsWebhooksOptions): WebhookMiddleware {
  let told = false
  const flow = createWebhookFlow(options, {
    ...IO,
    // The readBody port: where the exact bytes come from on Node (../receiver/node/raw-body.ts).
    // A body a parser consumed is refused on every delivery; the line that fixes it is logged once.
    readBody ({ req }, limit) {
      try {
        return readNodeBody(req, limit)
      } catch (err) {
        if (!told && err instanceof VerificationError && err.type === 'configuration_error') {
          told = true
          flow.log.error({}, `mailchannels webhook: ${err.message}`)
        }
        throw err
      }
    },
  })
  // One function per middleware, not a closure per request.
  const failed = (err: unknown): void => { flow.log.error({ err }, 'mailchannels webhook: failed after verification') }
  let serverChecked = false

  return function mailchannelsWebhooksMiddleware (incoming: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void {
    const req = incoming as WebhookRequest
    // MailChannels delivers with POST only: anything else passes through untouched (GET /health
    // under app.use(mailchannelsWebhooks(...))). A request another mailchannelsWebhooks() already
    // verified (mounted app-wide and on the route) goes on as it is: its body is consumed and its claim made.
    if (verifiedRequests.has(req)) {
      next()
      return
    }
    if (req.method !== 'POST') {
      // Its handler may read req.webhookEvents (app.all): that throws, saying why, never undefined.
      markUnverified(req)
      next()
      return
    }
    if (!serverChecked) {
      serverChecked = true
      // The same startup warning as the Fastify plugin, at the first delivery (the server is not known before).
      const server = (req.socket as { server?: { requestTimeout?: number } } | undefined)?.server
      if (server?.requestTimeout === 0) {
        flow.log.warn({}, 'mailchannels-webhooks: the HTTP server\'s requestTimeout is 0, so a client can trickle a request body forever; set server.requestTimeout = 30000 and server.headersTimeout = 60000')
      }
    }
    const done = flow.handle({ req, res, next })
    if (done instanceof Promise) done.catch(failed)
  }
}
