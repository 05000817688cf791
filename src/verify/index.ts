import { localError, VerificationError, type ErrorResponse, type Result } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import { readFetchSignatureFields } from './headers.js'
import { readClock, resolveVerifyConfig, type Clock, type VerifyConfig, type VerifyOptions } from './options.js'
import { verifyDelivery, verifyFields } from './verify-webhook.js'

/** Maps anything thrown while verifying to an `ErrorResponse`; nothing escapes. */
export function toErrorResponse (err: unknown): ErrorResponse {
  if (err instanceof VerificationError) return localError(err.type, err.message)
  if (err instanceof TypeError) return localError('validation_error', err.message)
  /* c8 ignore next */
  return localError('application_error', 'Verification failed unexpectedly.')
}

/**
 * Verifies one delivery and returns its typed events. Never throws, never rejects.
 * Shared by the public `verifyWebhook` (src/webhooks.ts) and `MailChannels#webhooks.verify`.
 */
export async function verifyWebhook (options: VerifyOptions, defaults?: VerifyConfig): Promise<Result<WebhookEvent[]>> {
  try {
    if (options === null || typeof options !== 'object') throw new TypeError('verify expects an options object with payload and headers')
    const config = resolveVerifyConfig(defaults === undefined ? options : { ...defaults, ...definedOnly(options) })
    const pending = verifyDelivery(config, options.payload, options.headers, readClock(options.now))
    const delivery = pending instanceof Promise ? await pending : pending // no extra tick when it finished synchronously
    return { data: delivery.events, error: null }
  } catch (err) {
    return { data: null, error: toErrorResponse(err) }
  }
}

function definedOnly<T extends object> (o: T): Partial<T> {
  const out: Partial<T> = {}
  for (const k of Object.keys(o) as Array<keyof T>) if (o[k] !== undefined) out[k] = o[k]
  return out
}

/**
 * `verifyWebhook` for a body already read from a fetch `Request`, with its `Headers`, on the
 * calling thread (the web entry's `verifyWebhookRequest`): the same checks and results, with the
 * fetch headers' own reader, so a Worker that only verifies bundles no more than it needs.
 */
export async function verifyFetchBody (options: VerifyConfig & { now?: Clock }, body: Uint8Array, headers: { get (name: string): string | null }): Promise<Result<WebhookEvent[]>> {
  try {
    const { now, ...config } = options
    const delivery = await verifyFields(resolveVerifyConfig(config), body, readFetchSignatureFields(headers), readClock(now))
    return { data: delivery.events, error: null }
  } catch (err) {
    return { data: null, error: toErrorResponse(err) }
  }
}
