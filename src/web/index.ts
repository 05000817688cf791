// The Fetch-API entry point (`mailchannels-webhooks/web`): a `Request` in, a `Response` out.
// Runtime-neutral: Cloudflare Workers, Deno, Bun, Vercel / Next.js (edge and Node), Node 20+.
// No `node:` import and no `Buffer` here or below (the core's crypto is chosen by the runtime).
import type { Result } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import { errorReply, resolveBodyLimit, type WebhookReceiverOptions } from '../receiver/index.js'
import { checkContentLength } from '../receiver/transport.js'
import { createWebFlow } from '../receiver/web/flow.js'
import { readBodyAtMost } from '../receiver/web/read-body.js'
import { replyResponse } from '../receiver/web/reply.js'
import { toErrorResponse } from '../verify/index.js'
import { readClock, resolveVerifyConfig, type Clock, type VerifyConfig } from '../verify/options.js'
import { readFetchSignatureFields } from '../verify/headers.js'
import { verifyFields } from '../verify/verify-webhook.js'

export type { WebhookEvent } from '../events/types.js'
export type { ErrorResponse, Result } from '../errors.js'
export type { ReplayStore, DeliveryReplayStore, ClaimState } from '../replay/types.js'
export type { ClaimStore, ClaimStoreOptions, StoreClaim, StoreClaimResult } from '../replay/claim-store.js'
export type { Logger } from '../logger.js'
export type { ReceiverContext, DeliveryErrorCode, DispatchedBody, QueuedBody } from '../receiver/index.js'
export type { EnqueueEvents, EnqueueContext } from '../dispatch/types.js'
export { MemoryClaimStore } from '../replay/memory-claim-store.js'
export type { MemoryClaimStoreOptions } from '../replay/memory-claim-store.js'
/** @deprecated Use `MemoryClaimStore`. */
export { MemoryReplayStore } from '../replay/memory-store.js'

/** Options of `verifyWebhookRequest`: everything `Webhooks.verify` takes but the delivery, plus a body limit. */
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

/** The 405 answered to anything but POST (MailChannels delivers with POST only). */
function methodNotAllowed (): Response {
  const response = replyResponse(errorReply(405, 'method_not_allowed', 'Webhook deliveries are POST requests.'))
  response.headers.set('allow', 'POST')
  return response
}

/**
 * Verifies a MailChannels delivery received as a fetch `Request`: reads its body once (at most
 * `bodyLimit` bytes), then checks it exactly as `Webhooks.verify` does. Resolves
 * `{ data: WebhookEvent[], error: null }` or `{ data: null, error: ErrorResponse }`; never throws,
 * never rejects. Replay protection is the caller's (see `createWebhookHandler`).
 *
 * ```ts
 * const { data, error } = await verifyWebhookRequest(request, { customerHandles: ['acct_1'] })
 * ```
 */
export async function verifyWebhookRequest (request: Request, options: VerifyWebhookRequestOptions): Promise<Result<WebhookEvent[]>> {
  try {
    if (options === null || typeof options !== 'object') throw new TypeError('verifyWebhookRequest expects an options object')
    const { bodyLimit: bodyLimitOption, now, ...verifyConfig } = options
    const bodyLimit = resolveBodyLimit(bodyLimitOption)
    const config = resolveVerifyConfig(verifyConfig)
    const at = readClock(now)
    // The receivers' Content-Length check alone (checkTransport's last step): media type and
    // encoding are left to the digest, as `verify` does.
    const declared = checkContentLength(request.headers.get('content-length'), bodyLimit)
    if (declared !== null) throw declared
    const body = await readBodyAtMost(request, bodyLimit)
    const delivery = await verifyFields(config, body, readFetchSignatureFields(request.headers), at)
    return { data: delivery.events, error: null }
  } catch (err) {
    return { data: null, error: toErrorResponse(err) }
  }
}

/** What `onEvents` may answer: a `Response` (its status settles the replay claim), or nothing for `204 No Content`. */
export type OnEventsResult = Response | undefined | void

/** Options every `createWebhookHandler` takes: the Node receivers' options and a logger. */
export interface WebhookHandlerCommonOptions extends Omit<WebhookReceiverOptions, 'handlers' | 'enqueue' | 'enqueueTimeout'> {
  /**
   * Where rejections, duplicates, key-fetch failures, replay-store failures and `onEvents`
   * errors are logged (the same lines as the Node receivers). Any pino-compatible logger,
   * called as `log.info(obj, msg)`.
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
 * Options of `createWebhookHandler`: the Node receivers' options, a logger, and exactly one of
 * `onEvents` (your callback answers), `handlers` (a `WebhookEventRouter` answers) or `enqueue`
 * (a durable queue takes the events).
 */
export type WebhookHandlerOptions = WebhookHandlerCommonOptions & (OnEventsOptions | HandlersOptions | EnqueueOptions)

/** A fetch handler: `export default { fetch: handler }`, `Deno.serve(handler)`, `export const POST = handler`. */
export type WebhookHandler = (request: Request) => Promise<Response>

/**
 * A MailChannels webhook endpoint as a fetch handler: `(request: Request) => Promise<Response>`.
 * For each POST it checks the transport, reads at most `bodyLimit` bytes, verifies the delivery
 * (Content-Digest, Ed25519 signature with the key named by `keyid`, freshness, the allowed
 * customers), claims it in the replay store, then calls `onEvents` (or, instead, dispatches the
 * events to `handlers`, or hands them to `enqueue`, and answers as the Node receivers do). Answers
 * like the Node receivers: `{ statusCode, code, error, message }` with 400, 401, 403, 413, 415,
 * 500, or 503 with `Retry-After`; `405` with `Allow: POST` for other methods;
 * `200 { duplicate: true }` for an exact resend, without calling `onEvents`.
 *
 * Create it once (at module scope): options are validated here (a `TypeError` names the
 * option; `customerHandles` is required), and fetched keys are cached in the handler's key
 * store for the life of the process or isolate. The keys listed in `keyIds` are fetched when the
 * first delivery arrives, not at creation (Cloudflare Workers allow no I/O outside a request).
 *
 * ```ts
 * const handler = createWebhookHandler({ customerHandles: ['acct_1'], onEvents: async (events) => { await save(events) } })
 * export default { fetch: handler }
 * // or: createWebhookHandler({ customerHandles: ['acct_1'], handlers: router })
 * ```
 */
export function createWebhookHandler (options: WebhookHandlerOptions): WebhookHandler {
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object')
  const { onEvents } = options
  const given = (['onEvents', 'handlers', 'enqueue'] as const).filter((name) => options[name] !== undefined)
  if (given.length !== 1) {
    throw new TypeError(given.length === 0
      ? 'onEvents, handlers or enqueue is required: a function called with the verified events of each delivery, a WebhookEventRouter, or a function handing the events to a queue'
      : `${given.join(' and ')} cannot be given together: pass exactly one of onEvents, handlers and enqueue`)
  }
  if (onEvents !== undefined && typeof onEvents !== 'function') throw new TypeError('onEvents must be a function called with the verified events of each delivery')
  const flow = createWebFlow<Request, Response>(options, {
    request: (request) => request,
    async run (request, outcome, settle) {
      const result = await onEvents!(outcome.events, request)
      const response = result instanceof Response ? result : new Response(null, { status: 204 })
      settle(outcome, response.status)
      return response
    },
  }, ['onEvents'])

  return async function mailchannelsWebhookHandler (request: Request): Promise<Response> {
    if (request.method !== 'POST') return methodNotAllowed()
    return await flow.handle(request)
  }
}
