// The Fetch-API entry point (`mailchannels-webhooks/web`): a `Request` in, a `Response` out.
// Runtime-neutral: Cloudflare Workers, Deno, Bun, Vercel / Next.js (edge and Node), Node 20+.
// No `node:` import and no `Buffer` here or below (the core's crypto is chosen by the runtime).
// A translation of the fetch API for the request pipeline (../receiver/pipeline.ts).
import type { Result } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import { createWebhookPipeline, resolveBodyLimit } from '../receiver/index.js'
import { errorReply } from '../receiver/reply.js'
import { checkContentLength } from '../receiver/transport.js'
import { fetchPort } from '../receiver/web/port.js'
import { readBodyAtMost } from '../receiver/web/read-body.js'
import { replyResponse } from '../receiver/web/reply.js'
import { toErrorResponse, verifyFetchBody } from '../verify/index.js'
import type { VerifyWebhookRequestOptions, WebhookHandler, WebhookHandlerOptions } from './options.js'

export type { WebhookEvent } from '../events/types.js'
export type { ErrorResponse, Result } from '../errors.js'
export type { ReplayStore, DeliveryReplayStore } from '../replay/types.js'
export type { ClaimStore, ClaimStoreOptions, StoreClaim, StoreClaimResult } from '../replay/claim-store.js'
export type { Logger } from '../logger.js'
export type { EventHandlerContext, DeliveryErrorCode, DispatchedBody, QueuedBody } from '../receiver/index.js'
export type { Enqueuer, EnqueueContext } from '../dispatch/types.js'
export type { EnqueueOptions, HandlersOptions, OnEventsOptions, OnEventsResult, VerifyWebhookRequestOptions, WebhookHandler, WebhookHandlerCommonOptions, WebhookHandlerOptions } from './options.js'
export { MemoryClaimStore } from '../replay/memory-claim-store.js'
export type { MemoryClaimStoreOptions } from '../replay/memory-claim-store.js'

/**
 * Verifies a MailChannels delivery received as a fetch `Request`: reads its body once (at most
 * `bodyLimit` bytes; a `Content-Length` over it is refused before reading), then checks it as
 * `verifyWebhook` does. Resolves `{ data: WebhookEvent[], error: null }` or
 * `{ data: null, error: ErrorResponse }`; never throws, never rejects. Replay protection is the
 * caller's (see `createWebhookHandler`).
 *
 * ```ts
 * const { data, error } = await verifyWebhookRequest(request, { customerHandles: ['acct_1'] })
 * ```
 */
export async function verifyWebhookRequest (request: Request, options: VerifyWebhookRequestOptions): Promise<Result<WebhookEvent[]>> {
  try {
    if (options === null || typeof options !== 'object') throw new TypeError('verifyWebhookRequest expects an options object')
    const { bodyLimit: bodyLimitOption, ...verifyOptions } = options
    const bodyLimit = resolveBodyLimit(bodyLimitOption)
    // The body-size step of the receivers' transport checks alone: media type and encoding are
    // left to the digest and the strict JSON checks, as `verifyWebhook` leaves them.
    const declared = checkContentLength(request.headers.get('content-length'), bodyLimit)
    if (declared !== null) throw declared
    const body = await readBodyAtMost(request, bodyLimit)
    const over = checkContentLength(body.byteLength, bodyLimit)
    if (over !== null) throw over
    return await verifyFetchBody(verifyOptions, body, request.headers)
  } catch (err) {
    return { data: null, error: toErrorResponse(err) }
  }
}

/**
 * A MailChannels webhook endpoint as a fetch handler: `(request: Request) => Promise<Response>`.
 * For each POST it checks the transport, reads at most `bodyLimit` bytes, verifies the delivery
 * (Content-Digest, Ed25519 signature with the key named by `keyid`, freshness, the allowed
 * customers), claims it in the replay store, then calls `onEvents` (or, instead, dispatches the
 * events to `handlers`, or hands them to `enqueue`, and answers as the other receivers do). Answers
 * `{ statusCode, code, error, message }` with 400, 401, 403, 413, 415, 500, or 503 with
 * `Retry-After`; `405` with `Allow: POST` for other methods; `200 { duplicate: true }` for an
 * exact resend, without calling `onEvents`.
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
  const { port, setup } = fetchPort<Request, Response>((request) => request, async (request, outcome, settle) => {
    const result = await onEvents!(outcome.events, request)
    const response = result instanceof Response ? result : new Response(null, { status: 204 })
    settle(outcome, response.status)
    return response
  }, ['onEvents'])
  const pipeline = createWebhookPipeline(options, port, setup)

  return async function mailchannelsWebhookHandler (request: Request): Promise<Response> {
    if (request.method !== 'POST') return methodNotAllowed()
    return await pipeline.handle(request)
  }
}

/** The 405 answered to anything but POST (MailChannels delivers with POST only). */
function methodNotAllowed (): Response {
  const response = replyResponse(errorReply(405, 'method_not_allowed', 'Webhook deliveries are POST requests.'))
  response.headers.set('allow', 'POST')
  return response
}
