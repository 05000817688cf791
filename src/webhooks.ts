import type { Result } from './errors.js'
import type { WebhookEvent } from './events/types.js'
import type { VerifyOptions } from './verify/options.js'
import { verifyWebhook } from './verify/index.js'

/** Webhook verification without an API key. */
export class Webhooks {
  /**
   * Verifies a MailChannels webhook delivery: headers, freshness, Content-Digest, key,
   * Ed25519 signature, then the events. Resolves `{ data: WebhookEvent[], error: null }`
   * or `{ data: null, error: ErrorResponse }`; never throws, never rejects.
   */
  static verify (options: VerifyOptions): Promise<Result<WebhookEvent[]>> {
    return verifyWebhook(options)
  }
}
