// The SQL of the dead-letter stores on PostgreSQL and SQLite: one table, the same statements,
// `$n` placeholders (SQLite gets `@pn`, bound by name with `sqliteValues`: better-sqlite3 has no `?n`). Times are milliseconds since the epoch (bigint / integer),
// so both databases store and compare them alike.
import { afterCursor, type CheckedQuery, type StoredLetter } from './dead-letters-types.js'

export type SqlDialect = 'postgres' | 'sqlite'

export const DEFAULT_DEAD_LETTER_TABLE = 'mailchannels_webhooks_dead_letters'

/** The statements, for `table` (already quoted). */
export interface DeadLetterSql {
  readonly schema: string
  /** $1 fp, $2 type, $3 event, $4 now, $5 error name, $6 error message, $7 park after, $8 source, $9 expires at. Returns attempts, parked_at. */
  readonly record: string
  /** $1 fp. */
  readonly clear: string
  /** $1 fp. */
  readonly get: string
  /** $1 fp. */
  readonly discard: string
  /** $1 fp, $2 now. */
  readonly request: string
  /** $1 fp, $2 token, $3 now, $4 until. Returns the row when taken. */
  readonly claimRetry: string
  /** $1 fp, $2 now: 'missing' or 'busy' after claimRetry took nothing. */
  readonly exists: string
  /** $1 fp, $2 token. */
  readonly resolveRetry: string
  /** $1 fp, $2 token, $3 now, $4 error name, $5 error message. */
  readonly failRetry: string
  /** $1 now. */
  readonly purge: string
  /** The list statement and its values for a checked query. */
  list: (q: CheckedQuery) => { text: string, values: unknown[] }
}

const COLUMNS = 'fingerprint, type, event, attempts, first_failed_at, last_failed_at, parked_at, error_name, error_message, retry_requested_at, source'

export function deadLetterSql (table: string, indexName: string, dialect: SqlDialect): DeadLetterSql {
  // PostgreSQL needs the type of a parameter it cannot deduce (\`$4::bigint\`); SQLite takes none.
  const p = (text: string): string => dialect === 'sqlite' ? text.replace(/::(bigint|integer)/g, '').replace(/\$(\d+)/g, '@p$1') : text
  const int = dialect === 'postgres' ? 'bigint' : 'INTEGER'
  const collate = dialect === 'postgres' ? 'COLLATE "C"' : ''
  // A failing event whose last failure is older than the ttl starts counting again.
  const attempts = 'CASE WHEN d.parked_at IS NULL AND d.expires_at <= $4::bigint THEN 1 ELSE d.attempts + 1 END'
  return {
    schema: `CREATE TABLE IF NOT EXISTS ${table} (
  fingerprint text ${collate} PRIMARY KEY,
  type text NOT NULL,
  event text NOT NULL,
  attempts integer NOT NULL,
  first_failed_at ${int} NOT NULL,
  last_failed_at ${int} NOT NULL,
  parked_at ${int},
  error_name text NOT NULL,
  error_message text NOT NULL,
  retry_requested_at ${int},
  retry_token text,
  retry_until ${int},
  source text NOT NULL,
  expires_at ${int}
);
CREATE INDEX IF NOT EXISTS "${indexName}" ON ${table} (parked_at, fingerprint);
`,
    record: p(`INSERT INTO ${table} AS d (fingerprint, type, event, attempts, first_failed_at, last_failed_at, parked_at, error_name, error_message, source, expires_at)
VALUES ($1, $2, $3, 1, $4::bigint, $4::bigint, CASE WHEN 1 >= $7::integer THEN $4::bigint END, $5, $6, $8, CASE WHEN 1 >= $7::integer THEN NULL ELSE $9::bigint END)
ON CONFLICT (fingerprint) DO UPDATE SET
  attempts = ${attempts},
  first_failed_at = CASE WHEN d.parked_at IS NULL AND d.expires_at <= $4::bigint THEN $4::bigint ELSE d.first_failed_at END,
  last_failed_at = $4::bigint, error_name = $5, error_message = $6,
  parked_at = COALESCE(d.parked_at, CASE WHEN ${attempts} >= $7::integer THEN $4::bigint END),
  expires_at = CASE WHEN d.parked_at IS NOT NULL OR ${attempts} >= $7::integer THEN NULL ELSE $9::bigint END
RETURNING attempts, parked_at`),
    clear: p(`DELETE FROM ${table} WHERE fingerprint = $1 AND parked_at IS NULL`),
    get: p(`SELECT ${COLUMNS} FROM ${table} WHERE fingerprint = $1 AND parked_at IS NOT NULL`),
    discard: p(`DELETE FROM ${table} WHERE fingerprint = $1 AND parked_at IS NOT NULL`),
    request: p(`UPDATE ${table} SET retry_requested_at = $2::bigint WHERE fingerprint = $1 AND parked_at IS NOT NULL`),
    claimRetry: p(`UPDATE ${table} SET retry_token = $2, retry_until = $4::bigint
WHERE fingerprint = $1 AND parked_at IS NOT NULL AND (retry_token IS NULL OR retry_until <= $3::bigint)
RETURNING ${COLUMNS}`),
    exists: p(`SELECT fingerprint FROM ${table} WHERE fingerprint = $1 AND parked_at IS NOT NULL`),
    resolveRetry: p(`DELETE FROM ${table} WHERE fingerprint = $1 AND retry_token = $2`),
    failRetry: p(`UPDATE ${table} SET attempts = attempts + 1, last_failed_at = $3::bigint, parked_at = $3::bigint, error_name = $4, error_message = $5,
  retry_token = NULL, retry_until = NULL, retry_requested_at = NULL
WHERE fingerprint = $1 AND retry_token = $2`),
    purge: p(`DELETE FROM ${table} WHERE parked_at IS NULL AND expires_at < $1::bigint`),
    list: (q) => {
      const where = ['parked_at IS NOT NULL']
      const values: unknown[] = []
      const add = (value: unknown): string => { values.push(value); return `$${values.length}` }
      if (q.type !== undefined) where.push(`type = ${add(q.type)}`)
      if (q.before !== undefined) where.push(`parked_at < ${add(q.before)}::bigint`)
      if (q.after !== undefined) where.push(`parked_at >= ${add(q.after)}::bigint`)
      if (q.requested) where.push('retry_requested_at IS NOT NULL')
      if (q.cursor !== undefined) {
        const at = `${add(q.cursor[0])}::bigint`
        where.push(`(parked_at < ${at} OR (parked_at = ${at} AND fingerprint < ${add(q.cursor[1])}))`)
      }
      return {
        text: p(`SELECT ${COLUMNS} FROM ${table} WHERE ${where.join(' AND ')} ORDER BY parked_at DESC, fingerprint DESC LIMIT ${q.limit + 1}`),
        values,
      }
    },
  }
}

/** A row of `COLUMNS` as a stored letter (bigints may come back as strings or BigInts). */
export function rowToStored (row: Record<string, unknown>): StoredLetter {
  const n = (v: unknown): number => Number(v)
  return {
    fingerprint: String(row.fingerprint),
    type: String(row.type),
    event: String(row.event),
    attempts: n(row.attempts),
    firstFailedAt: n(row.first_failed_at),
    lastFailedAt: n(row.last_failed_at),
    parkedAt: n(row.parked_at),
    errorName: String(row.error_name),
    errorMessage: String(row.error_message),
    retryRequestedAt: row.retry_requested_at === null || row.retry_requested_at === undefined ? null : n(row.retry_requested_at),
    source: String(row.source),
  }
}

/** Keeps the rows of one page: the first `limit`, and the cursor of the next when there are more. */
export function pageOf (rows: StoredLetter[], q: CheckedQuery, encode: (parkedAt: number, fp: string) => string): { rows: StoredLetter[], next?: string } {
  const page = rows.slice(0, q.limit).filter((r) => afterCursor(r.parkedAt, r.fingerprint, q.cursor))
  const last = page[page.length - 1]
  return { rows: page, ...(rows.length > q.limit && last !== undefined ? { next: encode(last.parkedAt, last.fingerprint) } : {}) }
}

/** Positional values as the named values of SQLite's `@p1`, `@p2`... placeholders. */
export function sqliteValues (values: readonly unknown[]): Record<string, unknown> {
  const named: Record<string, unknown> = {}
  values.forEach((v, i) => { named[`p${i + 1}`] = v })
  return named
}
