// The options of the Fetch-API entry (`mailchannels-webhooks/web`), apart from the code that reads
// them (./index.ts).
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import type { WebhookReceiverOptions } from '../receiver/options.js'
import type { Clock, VerifyConfig } from '../verify/options.js'

/** Options of `verifyWebhookRequest`: everything `verifyWebhook` takes but the delivery, plus a body limit. */
export interface VerifyWebhookRequestOptions extends VerifyConfig {
  /**
   * Largest body read, in bytes. Reading stops as soon as more arrived (a `Content-Length` over
   * it is refused before reading): the result is then `payload_too_large`.
   * @default 1048576 (1 MiB)
   */
  bodyLimit?: number
  /**
   * The time to verify at, e.g. when a queued delivery was received.
   * @default the current time
   */
  now?: Clock
}

/** What `onEvents` may answer: a `Response` (its status settles the replay claim), or nothing for `204 No Content`. */
export type OnEventsResult = Response | undefined | void

/** Options every `createWebhookHandler` takes: the receiver options shared by every adapter, and a logger. */
export interface WebhookHandlerCommonOptions extends Omit<WebhookReceiverOptions, 'handlers' | 'enqueue' | 'enqueueTimeout'> {
  /**
   * Where rejections, duplicates, key-fetch failures, replay-store failures and `onEvents`
   * errors are logged (the same lines as the Express middleware and the Fastify plugin). Any
   * pino-compatible logger, called as `log.info(obj, msg)`.
   * @default no logging
   */
  logger?: Logger
}

/** Your callback answers each delivery. */
export interface OnEventsOptions {
  /**
   * Called with the verified, typed events of each new delivery (never for a rejected or a
   * duplicate one). Its answer is the handler's: a `Response`, or nothing for `204 No Content`.
   * A 2xx marks the delivery handled; any other status, or a throw (answered 500 with code
   * `handler_error` and no detail; the error's message goes to `logger`), releases it so
   * MailChannels' retry is handled.
   */
  onEvents: (events: WebhookEvent[], request: Request) => OnEventsResult | Promise<OnEventsResult>
  handlers?: undefined
  enqueue?: undefined
  enqueueTimeout?: undefined
}

/** A `WebhookEventRouter` handles the events and the handler answers for it. */
export type HandlersOptions = Required<Pick<WebhookReceiverOptions, 'handlers'>> & { onEvents?: undefined, enqueue?: undefined, enqueueTimeout?: undefined }

/** A durable queue takes the events and the handler answers once it accepted them. */
export type EnqueueOptions = Required<Pick<WebhookReceiverOptions, 'enqueue'>> & Pick<WebhookReceiverOptions, 'enqueueTimeout'> & { onEvents?: undefined, handlers?: undefined }

/**
 * Options of `createWebhookHandler`: the receiver options shared by every adapter, a logger, and
 * exactly one of `onEvents` (your callback answers), `handlers` (a `WebhookEventRouter` answers)
 * or `enqueue` (a durable queue takes the events).
 */
export type WebhookHandlerOptions = WebhookHandlerCommonOptions & (OnEventsOptions | HandlersOptions | EnqueueOptions)

/** A fetch handler: `export default { fetch: handler }`, `Deno.serve(handler)`, `export const POST = handler`. */
export type WebhookHandler = (request: Request) => Promise<Response>
