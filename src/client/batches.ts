import { localError, type ErrorResponse } from '../errors.js'
import { isRecord } from './http.js'

/** Status filter values of `batches`. */
export type WebhooksBatchStatus = '1xx' | '2xx' | '3xx' | '4xx' | '5xx' | 'no_response'

/** The `status` of a batch in a listing: the filter value plus `_response`, except `no_response`. */
export type WebhooksBatchResponseStatus = '1xx_response' | '2xx_response' | '3xx_response' | '4xx_response' | '5xx_response' | 'no_response'

/** The status filters of a listing (the client's `statuses`, the service's `statuses` query). */
export const WEBHOOKS_BATCH_STATUSES: readonly WebhooksBatchStatus[] = Object.freeze(['1xx', '2xx', '3xx', '4xx', '5xx', 'no_response'])

/** The `status` a batch of a filter carries in a listing: `4xx` -> `4xx_response`; `no_response` is the same in both. */
export function batchResponseStatus (filter: WebhooksBatchStatus): WebhooksBatchResponseStatus {
  return filter === 'no_response' ? filter : `${filter}_response`
}

const RESPONSE_STATUSES: ReadonlySet<string> = new Set(WEBHOOKS_BATCH_STATUSES.map(batchResponseStatus))

/** Options of `webhooks.batches` and `webhooks.iterateBatches`. All are optional. */
export interface BatchesOptions {
  /**
   * Inclusive lower bound, UTC: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SSZ` or a `Date` (sent as
   * `YYYY-MM-DDTHH:MM:SSZ`, milliseconds dropped). Default: none (with neither bound the
   * service lists the last 3 days).
   */
  createdAfter?: string | Date
  /** Exclusive upper bound, same formats. At most 31 days after `createdAfter`. Default: none. */
  createdBefore?: string | Date
  /** Only batches whose delivery ended with one of these (unique, at most 6). Default: all. */
  statuses?: WebhooksBatchStatus[]
  /** Only batches sent to this exact endpoint URL. Default: all. */
  webhook?: string
  /** Page size, an integer from 1 to 500. Default: the service's, 500. */
  limit?: number
  /** Items to skip, an integer >= 0. Default: 0. */
  offset?: number
}

/**
 * The most listing entries (one per delivery attempt) one run of `iterateBatches` or
 * `reconcile` takes: one attempt every 10 seconds, around the clock, for the longest window
 * the listing allows (31 days: 267,840 entries) fits, in 600 full pages of 500. Resending
 * that many at reconcile's default 3 a second would take over a day: narrow the window first.
 */
export const DEFAULT_MAX_BATCHES = 300_000

/** Options of `webhooks.iterateBatches`: those of `batches`, and a cap on the whole listing. */
export interface IterateBatchesOptions extends BatchesOptions {
  /**
   * The most entries to list in all, a positive integer: a listing that has not ended by then
   * (more full pages to come) ends with a `listing_limit_reached` error, so an API that never
   * stops returning new entries cannot keep the iteration (and its memory) growing.
   * @default 300000 (entries; 600 full pages of 500: one delivery attempt every 10 seconds for 31 days)
   */
  maxBatches?: number
}

/** Checks `maxBatches`; `null` when valid. */
export function checkMaxBatches (value: unknown): ErrorResponse | null {
  if (value === undefined || (Number.isSafeInteger(value) && (value as number) >= 1)) return null
  return localError('validation_error', 'The maxBatches value must be a positive integer (entries listed per run).')
}

/**
 * Follows a listing page by page and says when to stop: a full page holding only entries
 * already listed (the API ignoring `offset`: it would repeat forever), or `maxBatches`
 * entries listed before the listing ended. Remembers one short key per entry listed, at most
 * `maxBatches` of them.
 */
export class ListingTracker {
  #pages = 0
  #entries = 0
  readonly #seen = new Set<string>()
  readonly #max: number

  constructor (maxBatches: number) {
    this.#max = maxBatches
  }

  /**
   * Records the page listed at `offset`; `full` when it is as long as the page size asked
   * for (the listing goes on). `take` is how many of its entries to use (all, fewer at the
   * cap, none of a repeated page); `error`, when set, ends the listing.
   */
  page (entries: readonly WebhooksBatch[], offset: number, full: boolean): { take: number, error: ErrorResponse | null } {
    this.#pages++
    let fresh = 0
    for (const b of entries) {
      // An entry is one attempt: the same batch id comes back once per attempt.
      const key = `${b.batchId} ${b.createdAt} ${b.status} ${b.statusCode}`
      if (!this.#seen.has(key)) {
        fresh++
        if (this.#seen.size < this.#max) this.#seen.add(key)
      }
    }
    if (full && fresh === 0) {
      const ids = entries.map((b) => b.batchId)
      return {
        take: 0,
        error: localError('listing_repeated', `Failed to list webhook batches: the page at offset ${offset} lists only batches already listed (${entries.length} entries, batch ids ${Math.min(...ids)} to ${Math.max(...ids)}): the API seems to ignore offset. Stopped after ${this.#pages} pages, ${this.#entries + entries.length} entries.`),
      }
    }
    const take = Math.min(entries.length, this.#max - this.#entries)
    this.#entries += take
    // Entries beyond the cap: the listing has not ended (a listing of exactly maxBatches
    // entries ends with an empty page, which is fine).
    if (take < entries.length) {
      return {
        take,
        error: localError('listing_limit_reached', `Failed to list webhook batches: ${this.#entries} entries in ${this.#pages} pages and the listing has not ended; maxBatches (${this.#max}) stops it here. Narrow the window or the filters, or raise maxBatches.`),
      }
    }
    return { take, error: null }
  }
}

/** One webhook delivery batch (the service's `WebhookBatch`, in camelCase). */
export interface WebhooksBatch {
  batchId: number
  /** ISO 8601 date-time, as the service sends it. */
  createdAt: string
  customerHandle: string
  /** How long the delivery took, when the service reports it. */
  duration?: { unit: string, value: number }
  eventCount: number
  status: WebhooksBatchResponseStatus
  /** The HTTP status your endpoint answered, or `null` when there was no response. */
  statusCode: number | null
  webhook: string
}

export const MAX_LIMIT = 500
const MAX_RANGE_MS = 31 * 24 * 3600 * 1000
const MAX_WEBHOOK_CHARS = 2048
const OPTION_NAMES: ReadonlySet<string> = new Set(['createdAfter', 'createdBefore', 'statuses', 'webhook', 'limit', 'offset'])

/** The wire query (the API's snake_case names), in a fixed order. */
export type BatchesQuery = Array<[string, string]>

/**
 * Validates `batches` options (the API's order and messages, plus integer,
 * date-format and allowlist checks) and builds the query. A failure names the option.
 */
export function buildBatchesQuery (options: unknown): { query: BatchesQuery, error: null } | { query: null, error: ErrorResponse } {
  const bad = (message: string): { query: null, error: ErrorResponse } => ({ query: null, error: localError('validation_error', message) })
  if (options === undefined || options === null) options = {}
  if (!isRecord(options)) return bad('batches options must be an object.')
  for (const key of Object.keys(options)) {
    if (!OPTION_NAMES.has(key)) return bad(`Unknown option '${key.slice(0, 40)}'. Valid options are: createdAfter, createdBefore, statuses, webhook, limit, offset.`)
  }
  const { limit, offset, statuses, webhook } = options
  if (limit !== undefined && !(Number.isInteger(limit) && (limit as number) >= 1 && (limit as number) <= MAX_LIMIT)) {
    return bad('The limit value must be an integer between 1 and 500.')
  }
  if (offset !== undefined && !(Number.isSafeInteger(offset) && (offset as number) >= 0)) {
    return bad('The offset value must be an integer greater than or equal to 0.')
  }
  if (statuses !== undefined) {
    if (!Array.isArray(statuses)) return bad('The statuses value must be an array of status filters.')
    if (statuses.length > 6) return bad('statuses: A maximum of 6 status filters can be provided.')
    if (new Set(statuses).size !== statuses.length) return bad('statuses: Status filters must be unique.')
    if (!statuses.every((s) => (WEBHOOKS_BATCH_STATUSES as readonly unknown[]).includes(s))) {
      return bad("statuses: Invalid status filter provided. Valid values are: '1xx', '2xx', '3xx', '4xx', '5xx', 'no_response'.")
    }
  }
  const after = parseDateInput(options.createdAfter)
  if (after === 'invalid') return bad("The 'createdAfter' value is not a valid date. Use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ (UTC) or a Date.")
  const before = parseDateInput(options.createdBefore)
  if (before === 'invalid') return bad("The 'createdBefore' value is not a valid date. Use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ (UTC) or a Date.")
  if (after !== null && before !== null) {
    if (before.ms <= after.ms) return bad('createdBefore must be later than createdAfter.')
    if (before.ms - after.ms > MAX_RANGE_MS) return bad('The time range between createdAfter and createdBefore must not exceed 31 days.')
  }
  if (webhook !== undefined && !(typeof webhook === 'string' && webhook.length > 0 && webhook.length <= MAX_WEBHOOK_CHARS)) {
    return bad(`The webhook value must be a non-empty string of at most ${MAX_WEBHOOK_CHARS} characters.`)
  }
  const query: BatchesQuery = []
  if (after !== null) query.push(['created_after', after.wire])
  if (before !== null) query.push(['created_before', before.wire])
  // One comma-separated parameter (OpenAPI `explode: false`); an empty list sends nothing.
  if (Array.isArray(statuses) && statuses.length > 0) query.push(['statuses', statuses.join(',')])
  if (typeof webhook === 'string') query.push(['webhook', webhook])
  if (limit !== undefined) query.push(['limit', String(limit)])
  if (offset !== undefined) query.push(['offset', String(offset)])
  return { query, error: null }
}

const DATE_ONLY = /^(\d{4})-(\d{2})-(\d{2})$/
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z$/

/**
 * Parses the service's two date formats, `YYYY-MM-DD` and `YYYY-MM-DDTHH:MM:SSZ` (UTC), to epoch
 * milliseconds; `null` when the text is not one of them or not a calendar date (`2026-02-30`).
 */
export function parseUtcDate (value: string): number | null {
  const m = DATE_ONLY.exec(value) ?? DATE_TIME.exec(value)
  if (m === null) return null
  const [y, mo, d, h = 0, mi = 0, s = 0] = m.slice(1).map(Number) as number[]
  if (h! > 23 || mi! > 59 || s! > 59) return null
  const ms = Date.UTC(y!, mo! - 1, d!, h, mi, s)
  const back = new Date(ms)
  // Date.UTC rolls 2026-02-30 over to March: a calendar-invalid date does not round-trip.
  if (back.getUTCFullYear() !== y || back.getUTCMonth() !== mo! - 1 || back.getUTCDate() !== d) return null
  return ms
}

/** A date option as `{ms, wire}`; `null` when absent; `'invalid'` otherwise. */
export function parseDateInput (value: unknown): { ms: number, wire: string } | null | 'invalid' {
  if (value === undefined) return null
  if (value instanceof Date) {
    const ms = value.getTime()
    if (Number.isNaN(ms)) return 'invalid'
    const wire = new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z')
    return DATE_TIME.test(wire) ? { ms, wire } : 'invalid'
  }
  if (typeof value !== 'string') return 'invalid'
  const ms = parseUtcDate(value)
  return ms === null ? 'invalid' : { ms, wire: value }
}

/** Maps the service's reply to `WebhooksBatch[]`, or explains why it is not one. */
export function mapBatchesResponse (body: unknown): { data: WebhooksBatch[], error: null } | { data: null, error: ErrorResponse } {
  const bad = (why: string): { data: null, error: ErrorResponse } => ({
    data: null,
    error: localError('api_error', `Failed to fetch webhook batches: the response is not a valid batch listing (${why}).`),
  })
  if (!isRecord(body)) return bad('not a JSON object')
  const list = body.webhook_batches
  if (!Array.isArray(list)) return bad('"webhook_batches" is not an array')
  const data: WebhooksBatch[] = []
  for (let i = 0; i < list.length; i++) {
    const item: unknown = list[i]
    const why = checkItem(item)
    if (why !== null) return bad(`item ${i}: ${why}`)
    const r = item as Record<string, unknown>
    const batch: WebhooksBatch = {
      batchId: r.batch_id as number,
      createdAt: r.created_at as string,
      customerHandle: r.customer_handle as string,
      eventCount: r.event_count as number,
      status: r.status as WebhooksBatchResponseStatus,
      statusCode: (r.status_code ?? null) as number | null,
      webhook: r.webhook as string,
    }
    if (isRecord(r.duration)) batch.duration = { unit: r.duration.unit as string, value: r.duration.value as number }
    data.push(batch)
  }
  return { data, error: null }
}

function checkItem (item: unknown): string | null {
  if (!isRecord(item)) return 'not an object'
  if (!Number.isSafeInteger(item.batch_id)) return '"batch_id" is not an integer'
  if (typeof item.created_at !== 'string') return '"created_at" is not a string'
  if (typeof item.customer_handle !== 'string') return '"customer_handle" is not a string'
  if (!Number.isSafeInteger(item.event_count) || (item.event_count as number) < 0) return '"event_count" is not a non-negative integer'
  if (typeof item.status !== 'string' || !RESPONSE_STATUSES.has(item.status)) return '"status" is not a known batch status'
  if (item.status_code !== undefined && item.status_code !== null && !Number.isInteger(item.status_code)) return '"status_code" is not an integer or null'
  if (typeof item.webhook !== 'string') return '"webhook" is not a string'
  if (item.duration !== undefined && item.duration !== null) {
    if (!isRecord(item.duration) || typeof item.duration.unit !== 'string' || typeof item.duration.value !== 'number' || !Number.isFinite(item.duration.value)) {
      return '"duration" is not {unit, value}'
    }
  }
  return null
}
