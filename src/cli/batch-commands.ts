// batches and resend: the batch commands, and the window flags and table they share with reconcile.
import { buildBatchesQuery, DEFAULT_MAX_BATCHES, parseUtcDate, type WebhooksBatch, type WebhooksBatchStatus } from '../client/batches.js'
import { MailChannelsError } from '../client/mailchannels.js'
import { checkCustomerHandle, type ResentBatch } from '../client/webhooks.js'
import type { ErrorResponse } from '../errors.js'
import { terminalText } from '../terminal-text.js'
import { BIN, numeric, UsageError } from './args.js'
import { BOLD, DIM, GREEN, oneLine, plural, RED, table, type painter } from './io.js'
import { advice, connect, fail, printJson, type Context } from './operator-connection.js'

const DURATION = /^(\d{1,5})([dhm])$/
const UNIT_MS: Record<string, number> = { d: 86_400_000, h: 3_600_000, m: 60_000 }

const wireDate = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z')

/** The window and filters of `batches` and `reconcile`, from their flags. */
export function windowOptions (c: Context, defaultSince?: string): { createdAfter?: string, createdBefore?: string, statuses?: WebhooksBatchStatus[], webhook?: string } {
  const { since, after, before, status, webhook } = c.values as Record<string, string | undefined>
  if (since !== undefined && after !== undefined) throw new UsageError('give --since or --after, not both.', c.command)
  for (const [flag, value] of [['--after', after], ['--before', before]] as const) {
    if (value !== undefined && parseUtcDate(value) === null) throw new UsageError(`${flag} must be a date: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC), got '${value}'.`, c.command)
  }
  const out: { createdAfter?: string, createdBefore?: string, statuses?: WebhooksBatchStatus[], webhook?: string } = {}
  const sinceValue = since ?? (after === undefined && before === undefined ? defaultSince : undefined)
  if (sinceValue !== undefined) {
    const m = DURATION.exec(sinceValue)
    const ms = m === null ? NaN : Number(m[1]) * UNIT_MS[m[2]!]!
    if (m === null || ms <= 0 || ms > 31 * 86_400_000) throw new UsageError(`--since must be a duration of at most 31 days, e.g. 3d, 12h or 30m; got '${sinceValue}'.`, c.command)
    out.createdAfter = wireDate(Math.floor((Date.now() - ms) / 1000) * 1000)
  }
  if (after !== undefined) out.createdAfter = after
  if (before !== undefined) out.createdBefore = before
  if (status !== undefined) out.statuses = status.split(',').map((s) => s.trim()) as WebhooksBatchStatus[]
  if (webhook !== undefined) out.webhook = webhook
  return out
}

function batchRow (b: WebhooksBatch, paint: ReturnType<typeof painter>): string[] {
  const ok = b.status === '2xx_response'
  const status = b.status === 'no_response' ? 'no response' : b.status.replace('_response', '')
  return [
    String(b.batchId),
    terminalText(b.createdAt),
    ok ? paint(GREEN, status) : paint(RED, status),
    b.statusCode === null ? '---' : String(b.statusCode),
    String(b.eventCount),
    b.duration === undefined ? '-' : `${b.duration.value} ms`,
    terminalText(b.webhook),
  ]
}

const BATCH_HEADER = ['ID', 'CREATED', 'STATUS', 'CODE', 'EVENTS', 'DURATION', 'ENDPOINT']
// Colour codes add invisible characters: align on the plain text, then paint.
export function batchTable (batches: WebhooksBatch[], paint: ReturnType<typeof painter>): string[] {
  const plain = batches.map((b) => batchRow(b, (_code, text) => text))
  const lines = table([BATCH_HEADER, ...plain], new Set([4, 5]))
  const painted = batches.map((b) => batchRow(b, paint))
  return lines.map((line, i) => (i === 0 ? paint(BOLD, line) : line.replace(plain[i - 1]![2]!, painted[i - 1]![2]!)))
}

export async function batches (c: Context): Promise<number> {
  const limit = numeric(c.values.limit, 'limit', c.command)
  if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1)) throw new UsageError('--limit must be a positive integer.', c.command)
  const options = windowOptions(c)
  const query = buildBatchesQuery({ ...options, limit: Math.min(limit ?? 500, 500) })
  if (query.error !== null) return fail(c, null, query.error)
  const conn = connect(c)
  const found: WebhooksBatch[] = []
  try {
    // With --limit above the default cap, the cap follows it (--limit ends the listing first).
    const cap = limit !== undefined && limit > DEFAULT_MAX_BATCHES ? { maxBatches: limit } : {}
    for await (const b of conn.client.webhooks.iterateBatches({ ...options, limit: Math.min(limit ?? 500, 500), ...cap })) {
      found.push(b)
      if (limit !== undefined && found.length >= limit) break
    }
  } catch (err) {
    if (err instanceof MailChannelsError) return fail(c, conn, err.error)
    throw err
  }
  if (c.json) {
    printJson(c, found)
    return 0
  }
  if (found.length === 0) {
    c.io.out('no batches match (the default window is the last 3 days; widen it with --since or --after)')
    return 0
  }
  for (const line of batchTable(found, c.paint)) c.io.out(line)
  // The listing has one entry per delivery attempt: count the batches (distinct ids) apart.
  const delivered = new Set(found.filter((b) => b.status === '2xx_response').map((b) => b.batchId))
  const ids = new Set(found.map((b) => b.batchId))
  const notDelivered = [...ids].filter((id) => !delivered.has(id)).length
  const attempts = found.length === ids.size ? '' : ` (${plural(found.length, 'attempt')})`
  c.io.out(c.paint(DIM, `${plural(ids.size, 'batch', 'batches')}${attempts}${notDelivered > 0 ? `, ${notDelivered} not delivered` : ''}${limit !== undefined && found.length >= limit ? ` (--limit ${limit} reached)` : ''}`))
  return 0
}

export function answered (r: ResentBatch): string {
  if (r.statusCode === null) return 'the endpoint did not answer'
  return `the endpoint answered ${r.statusCode}${r.durationInMs === null ? '' : ` (${r.durationInMs} ms)`}`
}

const delivered = (r: ResentBatch): boolean => r.statusCode !== null && r.statusCode >= 200 && r.statusCode < 300

export async function resend (c: Context): Promise<number> {
  const ids = c.args.map((raw) => {
    if (!/^[1-9]\d{0,15}$/.test(raw) || !Number.isSafeInteger(Number(raw))) throw new UsageError(`'${oneLine(raw, 40)}' is not a batch id: ids are positive integers, as '${BIN} batches' lists them.`, c.command)
    return Number(raw)
  })
  const handle = c.values['customer-handle'] as string | undefined
  if (handle !== undefined) {
    const checked = checkCustomerHandle(handle)
    if (checked.error !== null) return fail(c, null, checked.error)
  }
  const conn = connect(c)
  const results: Array<{ batchId: number, resend: ResentBatch | null, error: ErrorResponse | null }> = []
  let code = 0
  for (const id of ids) {
    const r = await conn.client.webhooks.resendBatch(id, handle === undefined ? {} : { customerHandle: handle })
    if (r.error !== null) {
      if (r.error.type === 'validation_error') return fail(c, conn, r.error)
      results.push({ batchId: id, resend: null, error: r.error })
      code = 1
      if (!c.json) {
        const todo = advice(r.error, conn, c.command)
        c.io.err(`batch ${id}: ${c.paint(RED, 'not resent')}: ${terminalText(r.error.message)}${todo === null ? '' : `\n  ${todo}`}\n`)
      }
      // A refused key fails every other id the same way.
      if (r.error.statusCode === 401 || r.error.statusCode === 403) break
      continue
    }
    results.push({ batchId: id, resend: r.data, error: null })
    if (!delivered(r.data)) code = 1
    if (!c.json) c.io.out(`batch ${id}: resent to ${terminalText(r.data.webhook)}: ${delivered(r.data) ? c.paint(GREEN, answered(r.data)) : c.paint(RED, answered(r.data))}`)
  }
  if (c.json) printJson(c, results)
  else if (code !== 0 && results.some((x) => x.resend !== null && !delivered(x.resend))) c.io.err('Some endpoints still do not answer 2xx: fix the receiver, then resend again.\n')
  return code
}
