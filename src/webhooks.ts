import type { Result } from './errors.js'
import type { WebhookEvent } from './events/types.js'
import type { VerifyOptions } from './verify/options.js'
import { verifyWebhook as verifyDelivery } from './verify/index.js'

/**
 * Verifies a MailChannels webhook delivery: headers, freshness, Content-Digest, key,
 * Ed25519 signature, then the events. Resolves `{ data: WebhookEvent[], error: null }`
 * or `{ data: null, error: ErrorResponse }`; never throws, never rejects.
 *
 * @example
 * ```ts
 * import { verifyWebhook } from 'mailchannels-webhooks'
 * const { data: events, error } = await verifyWebhook({ payload: rawBody, headers, customerHandles: ['abc123'] })
 * ```
 */
export function verifyWebhook (options: VerifyOptions): Promise<Result<WebhookEvent[]>> {
  return verifyDelivery(options)
}
