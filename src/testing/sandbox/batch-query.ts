import { batchResponseStatus, parseUtcDate, WEBHOOKS_BATCH_STATUSES, type WebhooksBatchResponseStatus, type WebhooksBatchStatus } from '../../client/batches.js'

/** The `status` of a recorded batch, as the listing returns it. */
export type SandboxBatchStatus = WebhooksBatchResponseStatus

/** A webhook batch exactly as `GET /tx/v1/webhook-batch` returns it (snake_case). */
export interface SandboxBatch {
  batch_id: number
  /** ISO 8601 with milliseconds, UTC. */
  created_at: string
  customer_handle: string
  duration: { unit: 'milliseconds', value: number }
  event_count: number
  status: SandboxBatchStatus
  /** The receiver's HTTP status; `null` when it did not answer (timeout, refused connection). */
  status_code: number | null
  /** The URL the batch was posted to. */
  webhook: string
}

/** The validated filter of one listing request. */
export interface BatchQuery {
  /** Inclusive lower bound, epoch ms. */
  after: number
  /** Exclusive upper bound, epoch ms (`Infinity` when not given). */
  before: number
  statuses: ReadonlySet<SandboxBatchStatus> | null
  webhook: string | null
  limit: number
  offset: number
}

const DAY_MS = 24 * 60 * 60 * 1000
/** With neither bound given the service lists the last 3 days. */
export const DEFAULT_RANGE_MS = 3 * DAY_MS
const MAX_RANGE_MS = 31 * DAY_MS
const PARAMS = ['created_after', 'created_before', 'statuses', 'webhook', 'limit', 'offset']
const UINT = /^\d{1,9}$/

/** Parses the two documented formats, `YYYY-MM-DD` and `YYYY-MM-DDTHH:MM:SSZ` (UTC); `null` if invalid (e.g. `2026-02-30`). */
export const parseApiDate = parseUtcDate

/**
 * Validates the query of `GET /tx/v1/webhook-batch` as the service documents it:
 * every problem is reported, as the `errors` of a 400 body. `statuses` must be one
 * comma-separated parameter; repeated keys are rejected so a client that sends them is caught.
 */
export function parseBatchQuery (params: URLSearchParams, nowMs: number): { query: BatchQuery, errors: null } | { query: null, errors: string[] } {
  const errors: string[] = []
  for (const name of PARAMS) {
    if (params.getAll(name).length > 1) {
      errors.push(name === 'statuses'
        ? 'statuses must be given once, as a comma-separated list (statuses=4xx,5xx), not as repeated keys.'
        : `${name} must be given at most once.`)
    }
  }
  const date = (name: string): number | null | undefined => {
    const raw = params.get(name)
    if (raw === null) return undefined
    const ms = parseApiDate(raw)
    if (ms === null) errors.push(`${name} must be a date in the format YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC).`)
    return ms
  }
  const afterIn = date('created_after')
  const beforeIn = date('created_before')
  if (typeof afterIn === 'number' && typeof beforeIn === 'number') {
    if (beforeIn <= afterIn) errors.push('created_before must be later than created_after.')
    else if (beforeIn - afterIn > MAX_RANGE_MS) errors.push('The range between created_after and created_before must not exceed 31 days.')
  }

  let statuses: Set<SandboxBatchStatus> | null = null
  const rawStatuses = params.get('statuses')
  if (rawStatuses !== null && rawStatuses !== '') {
    const list = rawStatuses.split(',')
    if (list.some((s) => !(WEBHOOKS_BATCH_STATUSES as readonly string[]).includes(s))) {
      errors.push("statuses may contain only '1xx', '2xx', '3xx', '4xx', '5xx' and 'no_response'.")
    } else if (new Set(list).size !== list.length) {
      errors.push('statuses must be unique.')
    } else if (list.length > 6) {
      errors.push('statuses may contain at most 6 values.')
    }
    statuses = new Set((list as WebhooksBatchStatus[]).map(batchResponseStatus))
  }

  const int = (name: string, min: number, max: number, fallback: number, message: string): number => {
    const raw = params.get(name)
    if (raw === null) return fallback
    if (!UINT.test(raw) || Number(raw) < min || Number(raw) > max) {
      errors.push(message)
      return fallback
    }
    return Number(raw)
  }
  const limit = int('limit', 1, 500, 500, 'limit must be an integer between 1 and 500.')
  const offset = int('offset', 0, Number.MAX_SAFE_INTEGER, 0, 'offset must be an integer greater than or equal to 0.')

  if (errors.length > 0) return { query: null, errors }
  const after = typeof afterIn === 'number'
    ? afterIn
    : (typeof beforeIn === 'number' ? beforeIn : nowMs) - DEFAULT_RANGE_MS
  const before = typeof beforeIn === 'number' ? beforeIn : Infinity
  return { query: { after, before, statuses, webhook: params.get('webhook'), limit, offset }, errors: null }
}

/** Applies a validated query: created_after inclusive, created_before exclusive, oldest first. */
export function filterBatches (batches: readonly SandboxBatch[], query: BatchQuery): SandboxBatch[] {
  return batches
    .filter((b) => {
      const at = Date.parse(b.created_at)
      return at >= query.after && at < query.before &&
        (query.statuses === null || query.statuses.has(b.status)) &&
        (query.webhook === null || b.webhook === query.webhook)
    })
    .slice(query.offset, query.offset + query.limit)
}

/** The listing's status category for an HTTP status, or `no_response` when there was none. */
export function statusCategory (statusCode: number | null): SandboxBatchStatus {
  if (statusCode === null || statusCode < 100 || statusCode > 599) return 'no_response'
  return `${Math.floor(statusCode / 100)}xx_response` as SandboxBatchStatus
}
