// The Hono middleware (`mailchannels-webhooks/hono`). Types only from hono (an optional peer):
// nothing of hono is loaded at run time, so the middleware works with whichever copy the app uses.
import type { MiddlewareHandler } from 'hono'
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import { answerDelivery, errorMessage, type WebhookReceiverOptions } from '../receiver/index.js'
import { createFetchReceiver, readBodyAtMost, replyResponse } from '../web/fetch.js'

export type { WebhookEvent } from '../events/types.js'
export type { ReceiverContext, DeliveryErrorCode, DispatchedBody, QueuedBody } from '../receiver/dispatch.js'
export type { EnqueueEvents, EnqueueContext } from '../dispatch/types.js'

/**
 * The Hono environment the middleware sets: `c.get('webhookEvents')` is typed once the app (or
 * the route) declares it, e.g. `new Hono<MailChannelsWebhookEnv>()`.
 */
export interface MailChannelsWebhookEnv {
  Variables: {
    /** The verified, typed events of the delivery; set by `mailchannelsWebhook()` before the next handler runs. */
    webhookEvents: WebhookEvent[]
  }
}

/** Options of the Hono middleware: the Node receivers' options plus a logger. */
export interface MailChannelsWebhookOptions extends WebhookReceiverOptions {
  /**
   * Where rejections, duplicates, key-fetch failures and replay-store failures are logged (the
   * same lines as the other receivers). Any pino-compatible logger, called as `log.info(obj, msg)`.
   * @default no logging
   */
  logger?: Logger
}

/**
 * The MailChannels webhook middleware for Hono, on any runtime Hono runs on (Workers, Deno, Bun,
 * Node with `@hono/node-server`, Vercel). Put it on the webhook route:
 * `app.post('/webhooks/mailchannels', mailchannelsWebhook(options), (c) => { c.get('webhookEvents') ... })`.
 *
 * It reads the exact raw bytes of `c.req.raw` (at most `bodyLimit`; nothing may read the body
 * before it), verifies the delivery and claims it in the replay store, then sets
 * `webhookEvents` and runs the next handler. Failures are answered as the web handler answers
 * them (`{ statusCode, code, error, message }` with 400, 401, 403, 413, 415, 500, or 503 with
 * `Retry-After`); an exact resend is answered `200 { duplicate: true }` without running the
 * handler. Requests other than POST pass through untouched.
 *
 * The handler's answer settles the replay claim: a 2xx marks the delivery handled; any other
 * status, or a thrown error, releases it so MailChannels' retry is handled.
 *
 * With `handlers` (a `WebhookEventRouter`) or `enqueue`, the middleware answers the delivery
 * itself and the next handler does not run: `app.post(path, mailchannelsWebhook({ ..., handlers: router }))`.
 *
 * Options are validated here, once (a `TypeError` names the option; `customerHandles` is required).
 * The keys listed in `keyIds` are fetched when the first delivery arrives, not at creation.
 */
export function mailchannelsWebhook (options: MailChannelsWebhookOptions): MiddlewareHandler<MailChannelsWebhookEnv> {
  const { receiver, log, warm } = createFetchReceiver(options, [])
  const answer = receiver.options.answer

  return async function mailchannelsWebhookMiddleware (c, next) {
    const request = c.req.raw
    if (request.method !== 'POST') {
      await next()
      return
    }
    const warming = warm()
    if (warming !== undefined) await warming
    const outcome = await receiver.handle({ headers: request.headers, readBody: (limit) => readBodyAtMost(request, limit) }, log)
    if (outcome.kind !== 'accepted') return replyResponse(outcome.reply)
    c.set('webhookEvents', outcome.events)
    if (answer !== null) return replyResponse(await answerDelivery(answer, outcome, log))
    let status = 500
    try {
      await next()
      // Hono answers a thrown error through the app's onError: whatever that answered, the handler failed.
      status = c.error === undefined ? c.res.status : 500
      if (c.error !== undefined) log.error({ err: errorMessage(c.error), keyId: outcome.keyId }, 'mailchannels webhook: the handler failed')
    } finally {
      receiver.settle(outcome, status)
    }
  }
}
