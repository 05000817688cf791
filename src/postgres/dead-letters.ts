// Dead letters in PostgreSQL, beside the seen-events store: one row per failing or
// parked event, in a table of its own. Every write is one statement on the pool, committed before
// it resolves, so a parked event is in the database before its delivery is answered.
import { createHash } from 'node:crypto'
import { ReplayStoreError } from '../replay/errors.js'
import {
  checkFingerprint, checkQuery, encodeCursor, eventJson, retryToken, toDeadLetter,
  type DeadLetter, type DeadLetterError, type DeadLetterFailure, type DeadLetterPage, type DeadLetterQuery,
  type DeadLetterRetry, type DeadLetterStore, type RecordedFailure,
} from '../replay/dead-letters-types.js'
import { DEFAULT_DEAD_LETTER_TABLE, deadLetterSql, pageOf, rowToStored, type DeadLetterSql } from '../replay/dead-letters-sql.js'
import { DEFAULT_CLAIM_TTL } from '../replay/claim-store.js'
import { checkTtl } from '../replay/ttl.js'

/** The part of a node-postgres `Pool` the dead-letter store uses. */
export interface PgQueryableLike {
  query (config: { text: string, values?: unknown[], query_timeout?: number }): Promise<{ rows: any[], rowCount?: number | null }>
}

export interface PostgresDeadLettersOptions {
  /** Your node-postgres `Pool` (the one of `postgresSeenEvents` will do). */
  pool: PgQueryableLike
  /**
   * The table, optionally schema-qualified.
   * @default 'mailchannels_webhooks_dead_letters'
   */
  table?: string
  /**
   * Create the table if it does not exist, on first use. Turn it off to create it from
   * `postgresDeadLettersSchema()` in a migration.
   * @default true
   */
  createSchema?: boolean
  /**
   * How long the failed attempts of an event not (yet) parked are remembered after its last
   * failure, in seconds. Parked events are kept until retried or discarded.
   * @default 259200 (seconds: 3 days)
   */
  ttl?: number
  /**
   * A last guard on every call: one that takes longer fails with `ReplayStoreError`.
   * @default 5000 (milliseconds)
   */
  timeout?: number
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/

function quoteTable (table: unknown): { quoted: string, plain: string } {
  if (typeof table !== 'string') throw new TypeError(`table must be a string (a table name, optionally schema-qualified), got ${typeof table}`)
  const parts = table.split('.')
  if (parts.length > 2 || !parts.every((p) => IDENTIFIER.test(p))) {
    throw new TypeError('table must be a PostgreSQL identifier of letters, digits and underscores (at most 63), optionally schema-qualified (schema.table)')
  }
  return { quoted: parts.map((p) => `"${p}"`).join('.'), plain: parts[parts.length - 1]! }
}

/** The index name, under PostgreSQL's 63 characters (a hash of the table when it is long). */
function indexName (plain: string): string {
  const name = `${plain}_parked`
  return name.length <= 63 ? name : `${plain.slice(0, 30)}_${createHash('sha256').update(plain).digest('hex').slice(0, 16)}_parked`
}

/** The SQL creating the dead-letter table and its index (idempotent), for a migration of your own (`createSchema: false`). */
export function postgresDeadLettersSchema (options: { table?: string } = {}): string {
  const { quoted, plain } = quoteTable(options.table ?? DEFAULT_DEAD_LETTER_TABLE)
  return deadLetterSql(quoted, indexName(plain), 'postgres').schema
}

/** Dead letters in PostgreSQL. Build it with `postgresDeadLetters`. */
export class PostgresDeadLetterStore implements DeadLetterStore {
  readonly #pool: PgQueryableLike
  readonly #sql: DeadLetterSql
  readonly #ttlMs: number
  readonly #timeout: number
  #schema: Promise<void> | undefined
  #lastPurge = 0
  /** The database the pool is on, to recognise a transaction on the same one (`resolveRetryIn`). */
  #identity: Promise<string> | undefined

  constructor (options: PostgresDeadLettersOptions) {
    if (options === null || typeof options !== 'object') throw new TypeError('postgresDeadLetters options must be an object with a pool')
    const { pool, table = DEFAULT_DEAD_LETTER_TABLE, createSchema = true, ttl = DEFAULT_CLAIM_TTL, timeout = 5000 } = options
    if (pool === null || typeof pool !== 'object' || typeof pool.query !== 'function') {
      throw new TypeError('pool must be a node-postgres Pool (new pg.Pool({ connectionString })): an object with a query method')
    }
    const { quoted, plain } = quoteTable(table)
    checkTtl(ttl, 'ttl')
    if (!Number.isSafeInteger(timeout) || timeout < 1) throw new TypeError('timeout must be a positive integer number of milliseconds')
    if (typeof createSchema !== 'boolean') throw new TypeError('createSchema must be true or false')
    this.#pool = pool
    this.#sql = deadLetterSql(quoted, indexName(plain), 'postgres')
    this.#ttlMs = ttl * 1000
    this.#timeout = timeout
    if (!createSchema) this.#schema = Promise.resolve()
  }

  /** Creates the table and index if they do not exist (what `createSchema: true` does on first use). */
  async createSchema (): Promise<void> {
    this.#schema = this.#create()
    await this.#schema
  }

  async #create (): Promise<void> {
    // One instance at a time: concurrent CREATE TABLE IF NOT EXISTS can collide in the catalogue.
    const text = `BEGIN; SELECT pg_advisory_xact_lock(7236110428193311); ${this.#sql.schema} COMMIT;`
    try {
      await this.#guard('createSchema', async () => await this.#pool.query({ text }))
    } catch (err) {
      this.#schema = undefined
      throw err
    }
  }

  async recordFailure (failure: DeadLetterFailure): Promise<RecordedFailure> {
    const fp = checkFingerprint(failure.fingerprint)
    const now = Date.now()
    const { rows } = await this.#query('park', this.#sql.record, [
      fp, failure.event.event, eventJson(failure.event, fp), now, failure.error.name, failure.error.message,
      failure.parkAfter, failure.source ?? 'router', now + this.#ttlMs,
    ])
    const row = rows[0] as { attempts?: unknown, parked_at?: unknown } | undefined
    if (row === undefined) throw new ReplayStoreError('park', 'PostgreSQL answered recordFailure with no row.')
    this.#maybePurge(now)
    return { attempts: Number(row.attempts), parked: row.parked_at !== null && row.parked_at !== undefined }
  }

  async clearFailures (fingerprints: readonly string[]): Promise<void> {
    for (const fp of fingerprints) await this.#query('clear', this.#sql.clear, [checkFingerprint(fp)])
  }

  async list (query?: DeadLetterQuery): Promise<DeadLetterPage> {
    const q = checkQuery(query)
    const { text, values } = this.#sql.list(q)
    const { rows } = await this.#query('list', text, values)
    const page = pageOf(rows.map(rowToStored), q, encodeCursor)
    return { items: page.rows.map(toDeadLetter), ...(page.next !== undefined ? { next: page.next } : {}) }
  }

  async get (fingerprint: string): Promise<DeadLetter | undefined> {
    const { rows } = await this.#query('get', this.#sql.get, [checkFingerprint(fingerprint)])
    return rows[0] === undefined ? undefined : toDeadLetter(rowToStored(rows[0]))
  }

  async discard (fingerprint: string): Promise<boolean> {
    const result = await this.#query('discard', this.#sql.discard, [checkFingerprint(fingerprint)])
    return (result.rowCount ?? 0) > 0
  }

  async requestRetry (fingerprint: string): Promise<boolean> {
    const result = await this.#query('request', this.#sql.request, [checkFingerprint(fingerprint), Date.now()])
    return (result.rowCount ?? 0) > 0
  }

  async claimRetry (fingerprint: string, lifetimeSeconds: number): Promise<DeadLetterRetry | 'missing' | 'busy'> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    const fp = checkFingerprint(fingerprint)
    const token = retryToken()
    const now = Date.now()
    const { rows } = await this.#query('retry', this.#sql.claimRetry, [fp, token, now, now + lifetimeSeconds * 1000])
    if (rows[0] !== undefined) return { fingerprint: fp, token, letter: toDeadLetter(rowToStored(rows[0])) }
    const exists = await this.#query('retry', this.#sql.exists, [fp])
    return exists.rows.length > 0 ? 'busy' : 'missing'
  }

  async resolveRetry (retry: DeadLetterRetry): Promise<void> {
    await this.#query('retry', this.#sql.resolveRetry, [retry.fingerprint, retry.token])
  }

  async failRetry (retry: DeadLetterRetry, error: DeadLetterError): Promise<void> {
    await this.#query('park', this.#sql.failRetry, [retry.fingerprint, retry.token, Date.now(), error.name, error.message])
  }

  /**
   * Deletes a retried dead letter through `db`, the transaction its handlers run in (the router's
   * retry with `postgresSeenEvents({ transactional: true })`), so the effects, the done mark and the
   * deletion commit together. False, changing nothing, when `db` is not a node-postgres client on
   * the database of this store's pool (the router then deletes it after the commit).
   */
  async resolveRetryIn (db: unknown, retry: DeadLetterRetry): Promise<boolean> {
    const client = db as Partial<PgQueryableLike> | null
    if (client === null || typeof client !== 'object' || typeof client.query !== 'function') return false
    const identity = 'SELECT current_database() AS db, inet_server_addr()::text AS addr, inet_server_port() AS port'
    this.#identity ??= this.#query('retry', identity, []).then(({ rows }) => JSON.stringify(rows[0]))
    const mine = await this.#identity.catch((err: unknown) => { this.#identity = undefined; throw err })
    const theirs = await this.#guard('retry', async () => await client.query!({ text: identity, values: [] }))
    if (JSON.stringify(theirs.rows[0]) !== mine) return false
    await this.#guard('retry', async () => await client.query!({ text: this.#sql.resolveRetry, values: [retry.fingerprint, retry.token] }))
    return true
  }

  async #query (operation: string, text: string, values: unknown[]): Promise<{ rows: any[], rowCount?: number | null }> {
    await (this.#schema ??= this.#create())
    return await this.#guard(operation, async () => await this.#pool.query({ text, values, query_timeout: this.#timeout }))
  }

  async #guard<R> (operation: string, call: () => Promise<R>): Promise<R> {
    let timer: ReturnType<typeof setTimeout> | undefined
    const pending = Promise.resolve().then(call)
    pending.catch(() => {})
    try {
      return await Promise.race([pending, new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => { reject(new ReplayStoreError(operation, `PostgreSQL did not answer ${operation} within ${this.#timeout} ms.`)) }, this.#timeout)
      })])
    } catch (err) {
      if (err instanceof ReplayStoreError) throw err
      throw new ReplayStoreError(operation, `PostgreSQL ${operation} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
    } finally {
      clearTimeout(timer)
    }
  }

  /** Deletes failing rows past their ttl, at most hourly, in the background. */
  #maybePurge (now: number): void {
    if (now - this.#lastPurge < 3_600_000) return
    this.#lastPurge = now
    this.#query('purge', this.#sql.purge, [now]).catch(() => {})
  }
}

/**
 * Dead letters in PostgreSQL, for `new WebhookEventRouter({ seenEvents, deadLetters: { store } })`
 * and the CLI's `dead-letters` commands.
 *
 * @example
 * ```ts
 * import { postgresSeenEvents, postgresDeadLetters } from 'mailchannels-webhooks/postgres'
 * const router = new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool }), deadLetters: { store: postgresDeadLetters({ pool }) } })
 * ```
 */
export function postgresDeadLetters (options: PostgresDeadLettersOptions): PostgresDeadLetterStore {
  return new PostgresDeadLetterStore(options)
}
