// The Express middleware (`mailchannels-webhooks/express`): a translation of Express's request
// and response (connect-style, so a bare node:http server too) for the request pipeline
// (../receiver/pipeline.ts). Its types are in ./options.ts, the request's events in ./events.ts.
import type { IncomingMessage, ServerResponse } from 'node:http'
import { nodeBodyReader } from '../receiver/node/raw-body.js'
import { settleOnEnd, writeReply } from '../receiver/node/reply.js'
import { createWebhookPipeline, type WebhookPipeline, type WebhookPort } from '../receiver/index.js'
import { markUnverified, verifiedRequests } from './events.js'
import type { MailChannelsWebhooksOptions, WebhookMiddleware, WebhookRequest } from './options.js'

/** One request as the pipeline sees it. */
interface ExpressContext { req: WebhookRequest, res: ServerResponse, next: (err?: unknown) => void }

/** Express's request and response, translated for the pipeline. */
const PORT: Omit<WebhookPort<ExpressContext, void>, 'readBody'> = {
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
  // Where the exact bytes come from on Node (../receiver/node/raw-body.ts).
  const pipeline: WebhookPipeline<ExpressContext, void> = createWebhookPipeline(options, { ...PORT, readBody: nodeBodyReader(() => pipeline.log) })
  // One function per middleware, not a closure per request.
  const failed = (err: unknown): void => { pipeline.log.error({ err }, 'mailchannels webhook: failed after verification') }
  let serverChecked = false

  return function mailchannelsWebhooksMiddleware (incoming: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void {
    const req = incoming as WebhookRequest
    // MailChannels delivers with POST only: anything else passes through, and reading its
    // req.webhookEvents throws, saying why. A request another mailchannelsWebhooks() already
    // verified (mounted app-wide and on the route) goes on as it is: its body is consumed and its claim made.
    if (verifiedRequests.has(req)) return next()
    if (req.method !== 'POST') {
      markUnverified(req)
      return next()
    }
    if (!serverChecked) {
      serverChecked = true
      // The same startup warning as the Fastify plugin, at the first delivery (the server is not known before).
      const server = (req.socket as { server?: { requestTimeout?: number } } | undefined)?.server
      if (server?.requestTimeout === 0) pipeline.log.warn({}, 'mailchannels-webhooks: the HTTP server\'s requestTimeout is 0, so a client can trickle a request body forever; set server.requestTimeout = 30000 and server.headersTimeout = 60000')
    }
    const done = pipeline.handle({ req, res, next })
    if (done instanceof Promise) done.catch(failed)
  }
}
