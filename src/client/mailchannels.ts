import { localError, type ErrorResponse, type Result } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import type { VerifyOptions } from '../verify/options.js'
import { verifyWebhook } from '../verify/index.js'
import { DEFAULT_BASE_URL, parseBaseUrl } from '../base-url.js'
import { MAX_KEY_RESPONSE_BYTES, publicKeyUrl } from '../keys/fetch-public-key.js'
import { importEd25519PublicKey, KeyRejectedError } from '../keys/public-key.js'
import { isKeyId } from '../keys/key-id.js'
import { buildBatchesQuery, checkMaxBatches, DEFAULT_MAX_BATCHES, ListingTracker, MAX_LIMIT, mapBatchesResponse, type BatchesOptions, type IterateBatchesOptions, type WebhooksBatch } from './batches.js'
import { abortedError, getJson, isRecord, type Transport } from './http.js'
import { checkRequestOptions, type RequestOptions } from './request-options.js'
import { createWebhookLifecycle, type WebhookLifecycleApi } from './webhooks.js'
import { reconcile, type ReconcileOptions, type ReconcileReport } from './reconcile.js'

export const DEFAULT_TIMEOUT = 30_000
export const DEFAULT_MAX_RETRIES = 2
export const DEFAULT_MAX_RETRY_DELAY = 30_000

/** Options of the API client. */
export interface MailChannelsOptions {
  /** API origin. Default `https://api.mailchannels.net`; `http:` only for loopback hosts. */
  baseUrl?: string
  /** Milliseconds each HTTP attempt may take (headers and body). Default `30000`. */
  timeout?: number
  /** The fetch implementation. Default `globalThis.fetch`. */
  fetch?: typeof globalThis.fetch
  /** Retries after an upstream 429 or 5xx, an integer from 0 to 5. Default `2`. */
  maxRetries?: number
  /**
   * The longest wait before a retry, in milliseconds. A `Retry-After` longer than this ends
   * the retries and returns the error. Default `30000`.
   */
  maxRetryDelay?: number
}

export type { RequestOptions } from './request-options.js'

// MailChannels keys are tokens of visible ASCII. Anything else is refused rather than cleaned:
// fetch strips surrounding whitespace from header values, so a key kept with a trailing newline
// is not the key sent, and redaction of an echoed key would miss it.
const API_KEY_PATTERN = /^[\x21-\x7e]+$/

/** A signing key as the public-key endpoint serves it (validated as an Ed25519 key). */
export interface SigningKey {
  id: string
  /** Base64 SPKI DER or PEM, exactly as served. */
  key: string
}

/** The webhook operations of a client. */
export interface WebhooksApi extends WebhookLifecycleApi {
  /** Same as `verifyWebhook`, with keys fetched from the client's `baseUrl` (never with the API key). */
  verify (options: VerifyOptions): Promise<Result<WebhookEvent[]>>
  /**
   * One page of webhook delivery batches (`GET /tx/v1/webhook-batch`). Invalid options give
   * `validation_error` without any HTTP call. `request.signal` cancels the call. Never throws,
   * never rejects.
   */
  batches (options?: BatchesOptions, request?: RequestOptions): Promise<Result<WebhooksBatch[]>>
  /**
   * Every batch matching `options`, page by page (by `offset`, `limit` items a page, default
   * 500) until a page is shorter than `limit`. The one API that throws: an iterator has no
   * `{ data, error }` channel, so a failure rejects the pending `next()` with a
   * `MailChannelsError` whose `error` is the `ErrorResponse`. `request.signal` cancels the page
   * in flight and ends the iteration (with an aborted `MailChannelsError`).
   * A listing that does not end stops with an error rather than running on: a full page of
   * entries already listed (the API ignoring `offset`) gives `listing_repeated`, more than
   * `options.maxBatches` entries (default 300,000) `listing_limit_reached`; each says what was
   * seen.
   */
  iterateBatches (options?: IterateBatchesOptions, request?: RequestOptions): AsyncGenerator<WebhooksBatch, void, undefined>
  /**
   * Fetches a signing key by id from the public-key endpoint. Sends no API key.
   * `request.signal` cancels the call. Never throws.
   */
  getSigningKey (id: string, request?: RequestOptions): Promise<Result<SigningKey>>
  /**
   * Lists every batch of a window whose delivery failed (every page) and resends each one once,
   * at `rate` per second with `concurrency` in flight; `exclude` skips batches an earlier run
   * resent. Stops on 401/403 or repeated failures and says so in `data.stopped`. Invalid
   * options, a failed listing or an abort during the listing resolve `{ data: null, error }`.
   * Never throws.
   */
  reconcile (options?: ReconcileOptions): Promise<Result<ReconcileReport>>
}

/** Thrown by `iterateBatches` (only); carries the `ErrorResponse`. */
export class MailChannelsError extends Error {
  readonly error: ErrorResponse
  constructor (error: ErrorResponse) {
    super(error.message)
    this.name = 'MailChannelsError'
    this.error = error
  }

  get type (): ErrorResponse['type'] { return this.error.type }
  get statusCode (): number | null { return this.error.statusCode }
}

/** MailChannels API client. The API key is held privately: it never appears in errors, logs, `JSON.stringify` or `util.inspect`. */
export class MailChannels {
  readonly #apiKey: string
  readonly baseUrl: string
  readonly webhooks: WebhooksApi

  constructor (apiKey: string, options: MailChannelsOptions = {}) {
    if (typeof apiKey !== 'string' || apiKey.trim() === '') {
      throw new TypeError('MailChannels needs an API key: new MailChannels(apiKey). verifyWebhook works without one.')
    }
    if (!API_KEY_PATTERN.test(apiKey)) {
      // The message never quotes the key.
      throw new TypeError('The MailChannels API key must be printable ASCII without spaces or control characters. A key read from a file or an environment variable often ends with a newline: pass it trimmed, e.g. new MailChannels(key.trim()).')
    }
    if (options === null || typeof options !== 'object') throw new TypeError('MailChannels options must be an object')
    this.#apiKey = apiKey
    this.baseUrl = parseBaseUrl(options.baseUrl ?? DEFAULT_BASE_URL)
    const timeout = options.timeout ?? DEFAULT_TIMEOUT
    if (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout <= 0) throw new TypeError('timeout must be a positive number of milliseconds')
    const fetchFn = options.fetch ?? globalThis.fetch
    if (typeof fetchFn !== 'function') throw new TypeError('fetch must be a function')
    const maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES
    if (!Number.isInteger(maxRetries) || maxRetries < 0 || maxRetries > 5) throw new TypeError('maxRetries must be an integer from 0 to 5')
    const maxRetryDelay = options.maxRetryDelay ?? DEFAULT_MAX_RETRY_DELAY
    if (typeof maxRetryDelay !== 'number' || !Number.isFinite(maxRetryDelay) || maxRetryDelay < 0) throw new TypeError('maxRetryDelay must be a number of milliseconds >= 0')

    const baseUrl = this.baseUrl
    const transport = (withKey: boolean): Transport => ({
      baseUrl, fetch: fetchFn, timeout, maxRetries, maxRetryDelay, apiKey: withKey ? this.#apiKey : null, secret: this.#apiKey,
    })

    const batches = async (opts?: BatchesOptions, request?: RequestOptions): Promise<Result<WebhooksBatch[]>> => {
      try {
        const built = buildBatchesQuery(opts)
        if (built.error !== null) return { data: null, error: built.error }
        const req = checkRequestOptions(request)
        if (req.error !== null) return { data: null, error: req.error }
        const { signal } = req.request
        if (signal?.aborted === true) return { data: null, error: abortedError('fetch webhook batches') }
        const url = new URL(`${baseUrl}/tx/v1/webhook-batch`)
        for (const [k, v] of built.query) url.searchParams.append(k, v)
        const outcome = await getJson(transport(true), url, 'fetch webhook batches', signal)
        if (!outcome.ok) return { data: null, error: outcome.error }
        return mapBatchesResponse(outcome.body)
      } catch {
        /* c8 ignore next */
        return { data: null, error: localError('application_error', 'Failed to fetch webhook batches.') }
      }
    }

    async function * iterateBatches (opts: IterateBatchesOptions = {}, request?: RequestOptions): AsyncGenerator<WebhooksBatch, void, undefined> {
      if (opts !== null && opts !== undefined && !isRecord(opts)) throw new MailChannelsError(localError('validation_error', 'batches options must be an object.'))
      const { maxBatches, ...listing } = (opts ?? {}) as IterateBatchesOptions
      const invalid = checkMaxBatches(maxBatches)
      if (invalid !== null) throw new MailChannelsError(invalid)
      const tracker = new ListingTracker(maxBatches ?? DEFAULT_MAX_BATCHES)
      const limit = listing.limit ?? MAX_LIMIT
      let offset = listing.offset ?? 0
      for (;;) {
        const page = await batches({ ...listing, limit, offset }, request)
        if (page.error !== null) throw new MailChannelsError(page.error)
        const full = page.data.length >= limit
        const { take, error } = tracker.page(page.data, offset, full)
        yield * page.data.slice(0, take)
        if (error !== null) throw new MailChannelsError(error)
        if (!full) return
        offset += page.data.length
      }
    }

    const getSigningKey = async (id: string, request?: RequestOptions): Promise<Result<SigningKey>> => {
      try {
        if (!isKeyId(id)) {
          return { data: null, error: localError('validation_error', 'The id value must be a key id of 1 to 64 characters from A-Z, a-z, 0-9, ".", "_", "~", "-".') }
        }
        const req = checkRequestOptions(request)
        if (req.error !== null) return { data: null, error: req.error }
        const { signal } = req.request
        if (signal?.aborted === true) return { data: null, error: abortedError('fetch the signing key') }
        // The public-key endpoint takes no API key: never send it where it is not needed.
        const outcome = await getJson({ ...transport(false), maxRetries: 0 }, publicKeyUrl(baseUrl, id), 'fetch the signing key', signal)
        if (!outcome.ok) return { data: null, error: outcome.error }
        const body = outcome.body
        if (!isRecord(body) || typeof body.id !== 'string' || typeof body.key !== 'string' || body.key.length > MAX_KEY_RESPONSE_BYTES) {
          return { data: null, error: localError('api_error', 'Failed to fetch the signing key: the response is not {"id", "key"}.') }
        }
        if (body.id !== id) return { data: null, error: localError('api_error', 'Failed to fetch the signing key: the response is for a different key id.') }
        try {
          importEd25519PublicKey(body.key)
        } catch (err) {
          const why = err instanceof KeyRejectedError ? `: ${err.message}` : ''
          return { data: null, error: localError('api_error', `Failed to fetch the signing key: the served key was refused${why}.`) }
        }
        return { data: { id: body.id, key: body.key }, error: null }
      } catch {
        /* c8 ignore next */
        return { data: null, error: localError('application_error', 'Failed to fetch the signing key.') }
      }
    }

    const lifecycle = createWebhookLifecycle(transport, baseUrl)
    const webhooks: WebhooksApi = {
      verify: (opts: VerifyOptions) => verifyWebhook(opts, { baseUrl }),
      batches,
      iterateBatches,
      getSigningKey,
      ...lifecycle,
      reconcile: (opts?: ReconcileOptions) => reconcile(webhooks, opts),
    }
    this.webhooks = Object.freeze(webhooks)
  }

  toJSON (): object {
    return { baseUrl: this.baseUrl }
  }

  [Symbol.for('nodejs.util.inspect.custom')] (): string {
    return `MailChannels { baseUrl: '${this.baseUrl}', apiKey: '[redacted]' }`
  }
}
