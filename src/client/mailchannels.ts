import type { Result } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import type { VerifyOptions } from '../options.js'
import { verifyWebhook } from '../verify/index.js'
import { DEFAULT_BASE_URL, parseBaseUrl } from '../base-url.js'

/** Options of the API client. */
export interface MailChannelsOptions {
  /** API origin. Default `https://api.mailchannels.net`; `http:` only for loopback hosts. */
  baseUrl?: string
}

/** The webhook operations of a client. */
export interface WebhooksApi {
  /** Same as `Webhooks.verify`, with keys fetched from the client's `baseUrl` (never with the API key). */
  verify (options: VerifyOptions): Promise<Result<WebhookEvent[]>>
}

/** MailChannels API client. The API key is held privately: it never appears in errors, logs, `JSON.stringify` or `util.inspect`. */
export class MailChannels {
  readonly #apiKey: string
  readonly baseUrl: string
  readonly webhooks: WebhooksApi

  constructor (apiKey: string, options: MailChannelsOptions = {}) {
    if (typeof apiKey !== 'string' || apiKey.trim() === '') {
      throw new TypeError('MailChannels needs an API key: new MailChannels(apiKey). Webhooks.verify works without one.')
    }
    this.#apiKey = apiKey
    this.baseUrl = parseBaseUrl(options.baseUrl ?? DEFAULT_BASE_URL)
    const baseUrl = this.baseUrl
    this.webhooks = {
      verify: (opts) => verifyWebhook(opts, { baseUrl }),
    }
  }

  toJSON (): object {
    return { baseUrl: this.baseUrl }
  }

  [Symbol.for('nodejs.util.inspect.custom')] (): string {
    return `MailChannels { baseUrl: '${this.baseUrl}', apiKey: '[redacted]' }`
  }
}
