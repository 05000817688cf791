// Dead letters in a SQLite file, beside the seen-events store: one row per failing or
// parked event. Each write is one autocommitted statement, so a parked event is in the file before
// its delivery is answered. Lock waits are retried on timers, never inside SQLite.
import { ReplayStoreError } from '../replay/errors.js'
import {
  checkFingerprint, checkQuery, encodeCursor, eventJson, retryToken, toDeadLetter,
  type DeadLetter, type DeadLetterError, type DeadLetterFailure, type DeadLetterPage, type DeadLetterQuery,
  type DeadLetterRetry, type DeadLetterStore, type RecordedFailure,
} from '../replay/dead-letters-types.js'
import { DEFAULT_DEAD_LETTER_TABLE, deadLetterSql, pageOf, rowToStored, sqliteValues as v, type DeadLetterSql } from '../replay/dead-letters-sql.js'
import { DEFAULT_CLAIM_TTL } from '../replay/claim-store.js'
import { checkTtl } from '../replay/ttl.js'
import { checkDatabaseOptions, createPrivately, isBusy, isMemoryPath, openDatabase, type SqliteDatabaseLike } from './driver.js'

export interface SqliteDeadLettersOptions {
  /** The database file (created if missing, mode 0600): usually the seen-events store's. Give this or `database`. */
  path?: string
  /** Your own open database (`node:sqlite` `DatabaseSync` or better-sqlite3 `Database`), used as is. Not one inside a transaction of yours. */
  database?: SqliteDatabaseLike
  /**
   * The table (created if missing).
   * @default 'mailchannels_webhooks_dead_letters'
   */
  table?: string
  /**
   * How long the failed attempts of an event not (yet) parked are remembered after its last
   * failure, in seconds. Parked events are kept until retried or discarded.
   * @default 259200 (seconds: 3 days)
   */
  ttl?: number
  /**
   * How long a call keeps trying for another connection's write lock before it fails with `ReplayStoreError`.
   * @default 5000 (milliseconds)
   */
  busyTimeout?: number
  /** Accept an in-memory database (tests). @default false */
  allowMemory?: boolean
}


/** The file of a connection's main database ('' in memory): https://www.sqlite.org/pragma.html#pragma_database_list */
function mainFile (db: SqliteDatabaseLike): string {
  const rows = db.prepare('PRAGMA database_list').all() as Array<{ name?: unknown, file?: unknown }>
  const file = rows.find((r) => r.name === 'main')?.file
  return typeof file === 'string' ? file : ''
}
const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

/** Dead letters in a SQLite file. Build it with `sqliteDeadLetters`; `close()` closes a file it opened. */
export class SqliteDeadLetterStore implements DeadLetterStore {
  readonly #db: SqliteDatabaseLike
  readonly #owned: boolean
  readonly #sql: DeadLetterSql
  readonly #ttlMs: number
  readonly #busyTimeout: number
  #ready = false
  #lastPurge = 0

  constructor (options: SqliteDeadLettersOptions) {
    if (options === null || typeof options !== 'object') throw new TypeError('sqliteDeadLetters options must be an object with a path or a database')
    const { path, database, table = DEFAULT_DEAD_LETTER_TABLE, ttl = DEFAULT_CLAIM_TTL, busyTimeout = 5000, allowMemory = false } = options
    checkDatabaseOptions('sqliteDeadLetters', path, database, table)
    checkTtl(ttl, 'ttl')
    if (!Number.isSafeInteger(busyTimeout) || busyTimeout < 0 || busyTimeout > 2 ** 31 - 1) throw new TypeError('busyTimeout must be a whole number of milliseconds (0 to 2147483647)')
    if (typeof allowMemory !== 'boolean') throw new TypeError('allowMemory must be true or false')
    if (path !== undefined && isMemoryPath(path) && !allowMemory) {
      throw new TypeError(`path ${JSON.stringify(path)} is an in-memory SQLite database: dead letters would not survive a restart. Give a file, or allowMemory: true (tests).`)
    }
    this.#sql = deadLetterSql(`"${table}"`, `${table}_parked`, 'sqlite')
    this.#ttlMs = ttl * 1000
    this.#busyTimeout = busyTimeout
    if (path !== undefined) {
      if (!isMemoryPath(path)) createPrivately(path)
      try {
        this.#db = openDatabase(path)
      } catch (err) {
        if (err instanceof TypeError) throw err
        throw new ReplayStoreError('open', `The SQLite database could not be opened: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
      }
      this.#owned = true
      this.#db.exec('PRAGMA busy_timeout = 0')
    } else {
      this.#db = database!
      this.#owned = false
    }
  }

  /** Closes the database file it opened (not a `database` you gave it). */
  close (): void {
    if (this.#owned) this.#db.close()
  }

  async recordFailure (failure: DeadLetterFailure): Promise<RecordedFailure> {
    const fp = checkFingerprint(failure.fingerprint)
    const json = eventJson(failure.event, fp)
    const now = Date.now()
    const row = await this.#run('park', () => this.#db.prepare(this.#sql.record).all(v([fp, failure.event.event, json, now, failure.error.name, failure.error.message, failure.parkAfter, failure.source ?? 'router', now + this.#ttlMs]))[0] as Record<string, unknown> | undefined)
    if (row === undefined) throw new ReplayStoreError('park', 'SQLite answered recordFailure with no row.')
    if (now - this.#lastPurge > 3_600_000) {
      this.#lastPurge = now
      await this.#run('purge', () => this.#db.prepare(this.#sql.purge).run(v([now]))).catch(() => {})
    }
    return { attempts: Number(row.attempts), parked: row.parked_at !== null && row.parked_at !== undefined }
  }

  async clearFailures (fingerprints: readonly string[]): Promise<void> {
    for (const fp of fingerprints) await this.#run('clear', () => this.#db.prepare(this.#sql.clear).run(v([checkFingerprint(fp)])))
  }

  async list (query?: DeadLetterQuery): Promise<DeadLetterPage> {
    const q = checkQuery(query)
    const { text, values } = this.#sql.list(q)
    const rows = await this.#run('list', () => this.#db.prepare(text).all(v(values)) as Array<Record<string, unknown>>)
    const page = pageOf(rows.map(rowToStored), q, encodeCursor)
    return { items: page.rows.map(toDeadLetter), ...(page.next !== undefined ? { next: page.next } : {}) }
  }

  async get (fingerprint: string): Promise<DeadLetter | undefined> {
    const fp = checkFingerprint(fingerprint)
    const row = await this.#run('get', () => this.#db.prepare(this.#sql.get).all(v([fp]))[0] as Record<string, unknown> | undefined)
    return row === undefined ? undefined : toDeadLetter(rowToStored(row))
  }

  async discard (fingerprint: string): Promise<boolean> {
    const fp = checkFingerprint(fingerprint)
    return Number((await this.#run('discard', () => this.#db.prepare(this.#sql.discard).run(v([fp])))).changes) > 0
  }

  async requestRetry (fingerprint: string): Promise<boolean> {
    const fp = checkFingerprint(fingerprint)
    return Number((await this.#run('request', () => this.#db.prepare(this.#sql.request).run(v([fp, Date.now()])))).changes) > 0
  }

  async claimRetry (fingerprint: string, lifetimeSeconds: number): Promise<DeadLetterRetry | 'missing' | 'busy'> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    const fp = checkFingerprint(fingerprint)
    const token = retryToken()
    const now = Date.now()
    const row = await this.#run('retry', () => this.#db.prepare(this.#sql.claimRetry).all(v([fp, token, now, now + lifetimeSeconds * 1000]))[0] as Record<string, unknown> | undefined)
    if (row !== undefined) return { fingerprint: fp, token, letter: toDeadLetter(rowToStored(row)) }
    const exists = await this.#run('retry', () => this.#db.prepare(this.#sql.exists).all(v([fp])))
    return exists.length > 0 ? 'busy' : 'missing'
  }

  async resolveRetry (retry: DeadLetterRetry): Promise<void> {
    await this.#run('retry', () => this.#db.prepare(this.#sql.resolveRetry).run(v([retry.fingerprint, retry.token])))
  }

  async failRetry (retry: DeadLetterRetry, error: DeadLetterError): Promise<void> {
    await this.#run('park', () => this.#db.prepare(this.#sql.failRetry).run(v([retry.fingerprint, retry.token, Date.now(), error.name, error.message])))
  }

  /**
   * Deletes a retried dead letter through `db`, the transaction its handlers run in (the router's
   * retry with `sqliteSeenEvents({ transactional: true })`), so the effects, the done mark and the
   * deletion commit together. False, changing nothing, when `db` is not a connection to this
   * store's file (the router then deletes it after the commit).
   */
  async resolveRetryIn (db: unknown, retry: DeadLetterRetry): Promise<boolean> {
    const d = db as Partial<SqliteDatabaseLike> | null
    if (d === null || typeof d !== 'object' || typeof d.prepare !== 'function') return false
    const mine = await this.#run('retry', () => mainFile(this.#db))
    if (mine === '' || mainFile(d as SqliteDatabaseLike) !== mine) return false
    d.prepare(this.#sql.resolveRetry).run(v([retry.fingerprint, retry.token]))
    return true
  }

  /** Runs `work` (creating the table first), retrying on timers while another connection holds the lock. */
  async #run<R> (operation: string, work: () => R): Promise<R> {
    const deadline = Date.now() + this.#busyTimeout
    let pause = 2
    for (;;) {
      try {
        if (!this.#ready) {
          this.#db.exec(this.#sql.schema)
          this.#ready = true
        }
        return work()
      } catch (err) {
        if (isBusy(err) && Date.now() < deadline) {
          await sleep(pause)
          pause = Math.min(pause * 2, 50)
          continue
        }
        throw new ReplayStoreError(operation, `SQLite ${operation} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
      }
    }
  }
}

/**
 * Dead letters in a SQLite file, for `new WebhookEventRouter({ seenEvents, deadLetters: { store } })`
 * and the CLI's `dead-letters` commands.
 *
 * @example
 * ```ts
 * import { sqliteSeenEvents, sqliteDeadLetters } from 'mailchannels-webhooks/sqlite'
 * const router = new WebhookEventRouter({ seenEvents: sqliteSeenEvents({ path: 'events.db' }), deadLetters: { store: sqliteDeadLetters({ path: 'events.db' }) } })
 * ```
 */
export function sqliteDeadLetters (options: SqliteDeadLettersOptions): SqliteDeadLetterStore {
  return new SqliteDeadLetterStore(options)
}
