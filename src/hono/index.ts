// The Hono middleware (`mailchannels-webhooks/hono`): a translation of Hono's context for the
// request pipeline (../receiver/pipeline.ts). Types only from hono (an optional peer): nothing of
// hono is loaded at run time, so the middleware works with whichever copy the app uses.
import type { Context, MiddlewareHandler, Next } from 'hono'
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import { createWebhookPipeline, type WebhookReceiverOptions } from '../receiver/index.js'
import { fetchPort } from '../receiver/web/port.js'

export type { WebhookEvent } from '../events/types.js'
export type { EventHandlerContext, DeliveryErrorCode, DispatchedBody, QueuedBody } from '../receiver/index.js'
export type { Enqueuer, EnqueueContext } from '../dispatch/types.js'

/**
 * The Hono environment the middleware sets: `c.get('webhookEvents')` is typed once the app (or
 * the route) declares it, e.g. `new Hono<MailChannelsWebhooksEnv>()`.
 */
export interface MailChannelsWebhooksEnv {
  Variables: {
    /** The verified, typed events of the delivery; set by `mailchannelsWebhooks()` before the next handler runs. */
    webhookEvents: WebhookEvent[]
  }
}

/** One request as the pipeline sees it. */
interface HonoContext { c: Context<MailChannelsWebhooksEnv>, next: Next }

/** Options of the Hono middleware: the receiver options shared by every adapter, plus a logger. */
export interface MailChannelsWebhooksOptions extends WebhookReceiverOptions {
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
 * `app.post('/webhooks/mailchannels', mailchannelsWebhooks(options), (c) => { c.get('webhookEvents') ... })`.
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
 * itself and the next handler does not run: `app.post(path, mailchannelsWebhooks({ ..., handlers: router }))`.
 *
 * Options are validated here, once (a `TypeError` names the option; `customerHandles` is required).
 * The keys listed in `keyIds` are fetched when the first delivery arrives, not at creation.
 */
export function mailchannelsWebhooks (options: MailChannelsWebhooksOptions): MiddlewareHandler<MailChannelsWebhooksEnv> {
  const { port, setup } = fetchPort<HonoContext, void>(({ c }) => c.req.raw, async ({ c, next }, outcome, settle) => {
    c.set('webhookEvents', outcome.events)
    await next()
    // Hono answers a thrown error through the app's onError: whatever that answered, the handler failed.
    if (c.error === undefined) settle(outcome, c.res.status)
    else settle(outcome, 500, c.error)
  })
  const pipeline = createWebhookPipeline(options, port, setup)

  return async function mailchannelsWebhooksMiddleware (c, next) {
    if (c.req.raw.method !== 'POST') {
      await next()
      return
    }
    return await pipeline.handle({ c, next })
  }
}
