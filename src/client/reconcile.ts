// reconcile: find every batch whose delivery failed in a window and resend each one once,
// politely (bounded concurrency, a rate limit, a stop on auth errors or repeated failures).
import { localError, type ErrorResponse, type Result } from '../errors.js'
import { batchResponseStatus, buildBatchesQuery, checkMaxBatches, DEFAULT_MAX_BATCHES, ListingTracker, MAX_LIMIT, parseDateInput, type BatchesOptions, type WebhooksBatch, type WebhooksBatchStatus } from './batches.js'
import { abortedError, isAbortSignal, isRecord, sleep } from './http.js'
import type { RequestOptions } from './request-options.js'
import { checkBatchId, type ResendBatchOptions, type ResentBatch } from './webhooks.js'
import { terminalText } from '../terminal-text.js'

const DAY_MS = 24 * 3600 * 1000
/** With no window given, reconcile looks this far back (the listing's own default). */
export const DEFAULT_RECONCILE_WINDOW_MS = 3 * DAY_MS
const MAX_RANGE_MS = 31 * DAY_MS
export const DEFAULT_RECONCILE_STATUSES: readonly WebhooksBatchStatus[] = Object.freeze(['4xx', '5xx', 'no_response'])
export const DEFAULT_RECONCILE_CONCURRENCY = 1
export const DEFAULT_RECONCILE_RATE = 3
export const DEFAULT_STOP_AFTER_FAILURES = 5
const MAX_CONCURRENCY = 16
const MAX_RATE = 100

/** Options of `webhooks.reconcile`. All are optional. */
export interface ReconcileOptions {
  /**
   * Inclusive start of the window: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SSZ` (UTC) or a `Date`.
   * At most 31 days before `createdBefore`.
   * @default 3 days before `createdBefore`
   */
  createdAfter?: string | Date
  /**
   * Exclusive end of the window, same formats.
   * @default now (when the call starts: batches that fail during the run are left to the next one)
   */
  createdBefore?: string | Date
  /**
   * Which delivery results count as failed.
   * @default ['4xx', '5xx', 'no_response']
   */
  statuses?: WebhooksBatchStatus[]
  /**
   * Only batches sent to this exact endpoint URL.
   * @default all endpoints
   */
  webhook?: string
  /**
   * List what would be resent, resend nothing.
   * @default false
   */
  dryRun?: boolean
  /**
   * Resends in flight at once, 1 to 16.
   * @default 1
   */
  concurrency?: number
  /**
   * Resends started per second at most (evenly spaced), above 0 and up to 100.
   * @default 3
   */
  rate?: number
  /**
   * Batch ids not to resend (already resent by an earlier run): reported as `skipped`.
   * Numbers or decimal strings.
   * @default none
   */
  exclude?: Iterable<number | string>
  /**
   * Stops the run between batches: resends in flight finish (and are reported), no new one
   * starts, the rest are reported `not_attempted`. During the listing it cancels
   * the call, which then resolves an aborted `application_error`.
   * @default none
   */
  signal?: AbortSignal
  /**
   * Called after each batch is settled (resent, failed or skipped). A throw from it is ignored.
   * @default none
   */
  onProgress?: (progress: ReconcileProgress) => void
  /**
   * Stop after this many failed resends in a row (API errors other than those about one batch,
   * timeouts, or your endpoint still not answering 2xx), rather than hammering a failing API or
   * endpoint. 401 and 403 stop at once.
   * @default 5
   */
  stopAfterFailures?: number
  /**
   * Retry a resend after a 5xx (it may then be delivered twice; see `RequestOptions`).
   * @default false
   */
  retryNonIdempotent?: boolean
  /**
   * The most listing entries (one per delivery attempt) to list, a positive integer. A
   * listing that goes on past it resolves a `listing_limit_reached` error and nothing is
   * resent; a full page of entries already listed (the API ignoring `offset`) resolves
   * `listing_repeated`.
   * @default 300000 (entries; 600 full pages of 500: one delivery attempt every 10 seconds for 31 days)
   */
  maxBatches?: number
}

/**
 * Why a batch was not resent. Every listed batch is checked against the filters asked for
 * before it is resent: a listing that ignored them (a proxy, a changed query, a buggy API)
 * never makes reconcile resend a delivered batch, or one outside the window or of another
 * endpoint.
 */
export type ReconcileSkipReason =
  /** Its id is in `exclude`. */
  | 'excluded'
  /** `dryRun` is set. */
  | 'dry_run'
  /** Listed with a status not among `statuses` (e.g. `2xx_response`: delivered). */
  | 'status_not_requested'
  /** Its `createdAt` is not inside the window (or not an ISO 8601 date-time). */
  | 'outside_window'
  /** Sent to another endpoint than the `webhook` asked for. */
  | 'other_webhook'

/** What happened to one batch. */
export type ReconcileBatchResult =
  /** Resent, and your endpoint answered 2xx. */
  | { outcome: 'resent', batchId: number, batch: WebhooksBatch, resend: ResentBatch }
  /**
   * Not delivered: the API refused or failed (`error` from the API call, `resend` null), or the
   * resend was made but your endpoint did not answer 2xx (`error.type` `delivery_failed`,
   * `resend` the attempt).
   */
  | { outcome: 'failed', batchId: number, batch: WebhooksBatch, error: ErrorResponse, resend: ResentBatch | null }
  | { outcome: 'skipped', batchId: number, batch: WebhooksBatch, reason: ReconcileSkipReason }
  /** Never tried: the run stopped (aborted, auth error, repeated failures) before its turn. */
  | { outcome: 'not_attempted', batchId: number, batch: WebhooksBatch }

/** What happened to a batch whose turn came: all outcomes but `not_attempted`. */
export type ReconcileSettled = Exclude<ReconcileBatchResult, { outcome: 'not_attempted' }>

/** What `onProgress` receives. */
export interface ReconcileProgress {
  /** Batches settled so far (this one included). */
  done: number
  /** Batches to settle in all (distinct batch ids listed). */
  total: number
  batch: WebhooksBatch
  outcome: ReconcileSettled['outcome']
  result: ReconcileSettled
}

/** Why a run stopped early. */
export interface ReconcileStop {
  reason: 'aborted' | 'auth_error' | 'repeated_failures'
  /** What happened and what to do. */
  message: string
  /** The API error behind it (`null` when aborted). */
  error: ErrorResponse | null
}

/** What `reconcile` resolves. */
export interface ReconcileReport {
  /** The window listed, as sent to the API. */
  window: { createdAfter: string, createdBefore: string }
  /** One entry per distinct batch id, in listing order (a batch listed once per attempt counts once). */
  batches: ReconcileBatchResult[]
  /** How many batches had each outcome; `total` is their sum. */
  summary: { total: number, resent: number, failed: number, skipped: number, notAttempted: number }
  /** Set when the run stopped before every batch was tried. */
  stopped: ReconcileStop | null
}

/** What reconcile needs of a client: `new MailChannels(apiKey).webhooks` fits. */
export interface ReconcileClient {
  batches (options?: BatchesOptions, request?: RequestOptions): Promise<Result<WebhooksBatch[]>>
  resendBatch (batchId: number | string, options?: ResendBatchOptions, request?: RequestOptions): Promise<Result<ResentBatch>>
}

const OPTION_NAMES = ['createdAfter', 'createdBefore', 'statuses', 'webhook', 'dryRun', 'concurrency', 'rate', 'exclude', 'signal', 'onProgress', 'stopAfterFailures', 'retryNonIdempotent', 'maxBatches']

interface Plan {
  listing: BatchesOptions
  /** The window and filters again, to check each listed batch against. */
  check: { afterMs: number, beforeMs: number, statuses: ReadonlySet<string>, webhook: string | undefined }
  window: { createdAfter: string, createdBefore: string }
  dryRun: boolean
  concurrency: number
  intervalMs: number
  exclude: ReadonlySet<number>
  signal: AbortSignal | undefined
  onProgress: ((p: ReconcileProgress) => void) | undefined
  stopAfterFailures: number
  retryNonIdempotent: boolean
  maxBatches: number
}

const wire = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z')

/**
 * The error `reconcile(options)` would answer for these options before any request (the same
 * `validation_error`), or `null` when they are valid: for a caller that checks what it was
 * given before it has a client (the CLI checks its flags before the API key).
 */
export function checkReconcileOptions (options: unknown): ErrorResponse | null {
  return plan(options, Date.now()).error
}

/** Validates the options once and fixes the window (so batches failing during the run do not shift the pages). */
function plan (options: unknown, now: number): { plan: Plan, error: null } | { plan: null, error: ErrorResponse } {
  const bad = (message: string): { plan: null, error: ErrorResponse } => ({ plan: null, error: localError('validation_error', message) })
  if (options === undefined || options === null) options = {}
  if (!isRecord(options)) return bad('reconcile options must be an object.')
  for (const key of Object.keys(options)) {
    if (!OPTION_NAMES.includes(key)) return bad(`Unknown option '${key.slice(0, 40)}'. Valid options are: ${OPTION_NAMES.join(', ')}.`)
  }
  const o = options as ReconcileOptions
  const after = parseDateInput(o.createdAfter)
  if (after === 'invalid') return bad("The 'createdAfter' value is not a valid date. Use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ (UTC) or a Date.")
  const before = parseDateInput(o.createdBefore)
  if (before === 'invalid') return bad("The 'createdBefore' value is not a valid date. Use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ (UTC) or a Date.")
  // Whole seconds: the API's date-time format has none finer. The end is rounded up so a batch
  // created in the current second is inside the window.
  const beforeMs = before?.ms ?? Math.ceil(now / 1000) * 1000
  const afterMs = after?.ms ?? beforeMs - DEFAULT_RECONCILE_WINDOW_MS
  if (beforeMs <= afterMs) return bad('createdBefore must be later than createdAfter.')
  if (beforeMs - afterMs > MAX_RANGE_MS) {
    return bad(`The window from createdAfter to createdBefore must not exceed 31 days (the batch listing's limit)${before === null ? '; createdBefore defaults to now, so give an earlier createdBefore, or run reconcile once per 31 days' : ''}.`)
  }
  const window = { createdAfter: after?.wire ?? wire(afterMs), createdBefore: before?.wire ?? wire(beforeMs) }
  const statuses = o.statuses ?? [...DEFAULT_RECONCILE_STATUSES]
  if (Array.isArray(statuses) && statuses.length === 0) return bad('statuses must list at least one status (an empty list would mean every batch, delivered ones included).')
  if (Array.isArray(statuses) && statuses.includes('2xx')) return bad("statuses must not include '2xx': those batches were delivered.")
  const listing: BatchesOptions = { createdAfter: window.createdAfter, createdBefore: window.createdBefore, statuses, limit: MAX_LIMIT }
  if (o.webhook !== undefined) listing.webhook = o.webhook
  // The listing's own checks (statuses allowlist, webhook, the 31-day rule) with its messages.
  const built = buildBatchesQuery(listing)
  if (built.error !== null) return { plan: null, error: built.error }

  if (o.dryRun !== undefined && typeof o.dryRun !== 'boolean') return bad('dryRun must be true or false.')
  const concurrency = o.concurrency ?? DEFAULT_RECONCILE_CONCURRENCY
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_CONCURRENCY) return bad(`concurrency must be an integer from 1 to ${MAX_CONCURRENCY}.`)
  const rate = o.rate ?? DEFAULT_RECONCILE_RATE
  if (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0 || rate > MAX_RATE) return bad(`rate must be a number of resends per second above 0 and at most ${MAX_RATE}.`)
  const stopAfterFailures = o.stopAfterFailures ?? DEFAULT_STOP_AFTER_FAILURES
  if (!Number.isInteger(stopAfterFailures) || stopAfterFailures < 1) return bad('stopAfterFailures must be a positive integer.')
  if (o.retryNonIdempotent !== undefined && typeof o.retryNonIdempotent !== 'boolean') return bad('retryNonIdempotent must be true or false.')
  const badMax = checkMaxBatches(o.maxBatches)
  if (badMax !== null) return { plan: null, error: badMax }
  if (o.signal !== undefined && !isAbortSignal(o.signal)) return bad('signal must be an AbortSignal.')
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function') return bad('onProgress must be a function.')
  const exclude = new Set<number>()
  if (o.exclude !== undefined) {
    if (o.exclude === null || typeof (o.exclude as Iterable<unknown>)[Symbol.iterator] !== 'function' || typeof o.exclude === 'string') {
      return bad('exclude must be an iterable (a Set or an array) of batch ids.')
    }
    for (const id of o.exclude) {
      const checked = checkBatchId(id)
      if (checked.error !== null) return bad(`exclude: ${checked.error.message}`)
      exclude.add(checked.value)
    }
  }
  return {
    plan: {
      listing,
      check: { afterMs: after?.ms ?? afterMs, beforeMs, statuses: new Set((statuses as WebhooksBatchStatus[]).map(batchResponseStatus)), webhook: o.webhook },
      window,
      dryRun: o.dryRun ?? false,
      concurrency,
      intervalMs: 1000 / rate,
      exclude,
      signal: o.signal,
      onProgress: o.onProgress,
      stopAfterFailures,
      retryNonIdempotent: o.retryNonIdempotent ?? false,
      maxBatches: o.maxBatches ?? DEFAULT_MAX_BATCHES,
    },
    error: null,
  }
}

/**
 * Lists every page of the window; distinct batch ids in listing order. A listing that repeats
 * a page or goes past `maxBatches` entries ends with its error (ListingTracker, batches.ts).
 */
async function listAll (client: ReconcileClient, p: Plan): Promise<Result<WebhooksBatch[]>> {
  const byId = new Map<number, WebhooksBatch>()
  const tracker = new ListingTracker(p.maxBatches)
  let offset = 0
  for (;;) {
    const page = await client.batches({ ...p.listing, offset }, p.signal !== undefined ? { signal: p.signal } : undefined)
    if (page.error !== null) return page
    const full = page.data.length >= MAX_LIMIT
    const { take, error } = tracker.page(page.data, offset, full)
    if (error !== null) return { data: null, error }
    for (const b of page.data.slice(0, take)) if (!byId.has(b.batchId)) byId.set(b.batchId, b)
    if (!full) return { data: [...byId.values()], error: null }
    offset += page.data.length
  }
}

// ISO 8601 date-time with a zone, as the service writes created_at.
const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/

/** Why a listed batch does not match what was asked for; `null` when it does. */
function mismatch (batch: WebhooksBatch, check: Plan['check']): ReconcileSkipReason | null {
  if (!check.statuses.has(batch.status)) return 'status_not_requested'
  const at = DATE_TIME.test(batch.createdAt) ? Date.parse(batch.createdAt) : NaN
  if (!(at >= check.afterMs && at < check.beforeMs)) return 'outside_window'
  if (check.webhook !== undefined && batch.webhook !== check.webhook) return 'other_webhook'
  return null
}

/** Errors about one batch: they do not count towards `stopAfterFailures`. */
function isBatchSpecific (error: ErrorResponse): boolean {
  return error.type === 'validation_error' || [400, 404, 409, 410, 422].includes(error.statusCode ?? 0)
}

/**
 * Lists every batch in the window whose delivery failed and resends each distinct batch once.
 * Never throws, never rejects: invalid options, a failed listing or an abort during the listing
 * resolve `{ data: null, error }`; everything after that resolves a report.
 */
export async function reconcile (client: ReconcileClient, options?: ReconcileOptions, now: () => number = Date.now): Promise<Result<ReconcileReport>> {
  try {
    const planned = plan(options, now())
    if (planned.error !== null) return { data: null, error: planned.error }
    const p = planned.plan
    if (p.signal?.aborted === true) return { data: null, error: abortedError('reconcile webhook batches') }
    const listed = await listAll(client, p)
    if (listed.error !== null) return { data: null, error: listed.error }
    const batches = listed.data
    const results: Array<ReconcileBatchResult | undefined> = new Array(batches.length)
    let stopped: ReconcileStop | null = null
    let done = 0
    let failuresInARow = 0
    let cursor = 0
    // Start times at least `intervalMs` apart, measured from when each resend really started:
    // acquisitions queue behind each other, so a late timer never lets the next one bunch up.
    let lastStart = -Infinity
    let queue: Promise<void> = Promise.resolve()
    const startSlot = (): Promise<void> => {
      queue = queue.then(async () => {
        await sleep(lastStart + p.intervalMs - performance.now(), p.signal)
        lastStart = performance.now()
      })
      return queue
    }

    const settle = (i: number, result: ReconcileSettled): void => {
      results[i] = result
      done++
      try {
        p.onProgress?.({ done, total: batches.length, batch: result.batch, outcome: result.outcome, result })
      } catch {
        // An observer's failure must not change what is resent.
      }
    }
    const stop = (s: ReconcileStop): void => { stopped ??= s }
    const halted = (): boolean => {
      if (stopped === null && p.signal?.aborted === true) {
        stop({ reason: 'aborted', message: 'Stopped: the signal fired. Batches not attempted are reported as such; run reconcile again to resend them.', error: null })
      }
      return stopped !== null
    }

    const resendOne = async (i: number, batch: WebhooksBatch): Promise<void> => {
      await startSlot()
      if (halted()) return
      const resendOptions: ResendBatchOptions = /^[\x21-\x7e]{1,255}$/.test(batch.customerHandle) ? { customerHandle: batch.customerHandle } : {}
      // No signal: a resend the API has started is left to finish, so its outcome is known.
      const r = await client.resendBatch(batch.batchId, resendOptions, p.retryNonIdempotent ? { retryNonIdempotent: true } : undefined)
      if (r.error !== null) {
        settle(i, { outcome: 'failed', batchId: batch.batchId, batch, error: r.error, resend: null })
        if (r.error.statusCode === 401 || r.error.statusCode === 403) {
          stop({ reason: 'auth_error', message: `Stopped: the API refused the API key (HTTP ${r.error.statusCode}). Check MAILCHANNELS_API_KEY and its permissions, then run reconcile again.`, error: r.error })
        } else if (!isBatchSpecific(r.error) && ++failuresInARow >= p.stopAfterFailures) {
          stop({ reason: 'repeated_failures', message: `Stopped after ${failuresInARow} failed resends in a row (the last: ${r.error.message}). Try again later; batches already resent can be excluded.`, error: r.error })
        }
        return
      }
      const code = r.data.statusCode
      if (code !== null && code >= 200 && code < 300) {
        failuresInARow = 0
        settle(i, { outcome: 'resent', batchId: batch.batchId, batch, resend: r.data })
        return
      }
      const error: ErrorResponse = {
        message: `MailChannels resent batch ${batch.batchId}, but the endpoint ${code === null ? 'did not answer' : `answered HTTP ${code}`}: it still does not accept the delivery.`,
        statusCode: null,
        type: 'delivery_failed',
        response: null,
      }
      settle(i, { outcome: 'failed', batchId: batch.batchId, batch, error, resend: r.data })
      if (++failuresInARow >= p.stopAfterFailures) {
        stop({ reason: 'repeated_failures', message: `Stopped after ${failuresInARow} failed resends in a row: the endpoint ${terminalText(r.data.webhook)} still does not answer 2xx. Fix it, then run reconcile again.`, error })
      }
    }

    const worker = async (): Promise<void> => {
      while (cursor < batches.length) {
        if (halted()) return
        const i = cursor++
        const batch = batches[i]!
        const off = mismatch(batch, p.check)
        if (off !== null) settle(i, { outcome: 'skipped', batchId: batch.batchId, batch, reason: off })
        else if (p.exclude.has(batch.batchId)) settle(i, { outcome: 'skipped', batchId: batch.batchId, batch, reason: 'excluded' })
        else if (p.dryRun) settle(i, { outcome: 'skipped', batchId: batch.batchId, batch, reason: 'dry_run' })
        else await resendOne(i, batch)
      }
    }
    await Promise.all(Array.from({ length: Math.min(p.concurrency, Math.max(1, batches.length)) }, worker))

    const final: ReconcileBatchResult[] = batches.map((batch, i) => results[i] ?? { outcome: 'not_attempted', batchId: batch.batchId, batch })
    const count = (outcome: ReconcileBatchResult['outcome']): number => final.filter((r) => r.outcome === outcome).length
    return {
      data: {
        window: p.window,
        batches: final,
        summary: { total: final.length, resent: count('resent'), failed: count('failed'), skipped: count('skipped'), notAttempted: count('not_attempted') },
        stopped,
      },
      error: null,
    }
  } catch {
    /* c8 ignore next */
    return { data: null, error: localError('application_error', 'Failed to reconcile webhook batches.') }
  }
}
