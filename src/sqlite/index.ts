// `mailchannels-webhooks/sqlite`: a seen-events store in a SQLite file, so one instance keeps its
// seen events across restarts with nothing to run, and the transactional inbox for apps whose
// data is in that file. The driver is `node:sqlite` where the Node line has it (22.13+, 24) and
// the optional peer `better-sqlite3` elsewhere (Node 20), chosen when a store opens a file, never
// when this module is imported; or pass your own open database.
import { createRequire } from 'node:module'
import { ReplayStoreError } from '../replay/errors.js'
import { claimTokens, type EventClaim, type EventClaimResult, type SeenEventsStore, type TransactionalSeenEventsStore } from '../replay/seen-events.js'
import { checkTtl } from '../replay/ttl.js'

export type { TransactionalSeenEventsStore, EventClaim } from '../replay/seen-events.js'
export type { TransactionContext } from '../dispatch/types.js'

/** A prepared statement of `node:sqlite` (`StatementSync`) or better-sqlite3 (`Statement`). */
export interface SqliteStatementLike {
  run (...params: any[]): { changes: number | bigint }
  all (...params: any[]): unknown[]
}

/** An open database of `node:sqlite` (`DatabaseSync`) or better-sqlite3 (`Database`). */
export interface SqliteDatabaseLike {
  exec (sql: string): unknown
  prepare (sql: string): SqliteStatementLike
  close (): unknown
}

export interface SqliteSeenEventsOptions<D extends SqliteDatabaseLike = SqliteDatabaseLike> {
  /** The database file to open (created if missing), with `node:sqlite` on Node 22.13+ and 24, else better-sqlite3. Give this or `database`. */
  path?: string
  /** Your own open database (`new DatabaseSync(file)` from `node:sqlite`, or `new Database(file)` from better-sqlite3): with `transactional: true` your handlers write to it in the done mark's transaction. */
  database?: D
  /**
   * The table of claims and done marks (created if missing).
   * @default 'mailchannels_webhooks_seen_events'
   */
  table?: string
  /**
   * How long a done mark is remembered: at least the resend horizon.
   * @default 259200 (seconds: 3 days)
   */
  ttl?: number
  /**
   * How long a call waits for another process's write lock on the file before it fails with `ReplayStoreError` (SQLite `busy_timeout`).
   * @default 5000 (milliseconds)
   */
  busyTimeout?: number
  /** Run each event's handlers in a transaction on this database, handed to them as `context.db`, with the done mark written in it. @default false */
  transactional?: boolean
}

const DEFAULT_TABLE = 'mailchannels_webhooks_seen_events'
const DEFAULT_TTL = 3 * 24 * 60 * 60
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/

/** Opens `file` with the driver this Node line has: `node:sqlite`, else better-sqlite3. */
function openDatabase (file: string): SqliteDatabaseLike {
  let builtin: { DatabaseSync?: new (path: string) => SqliteDatabaseLike } | undefined
  try {
    builtin = process.getBuiltinModule?.('node:sqlite') as typeof builtin
  } catch {
    builtin = undefined
  }
  if (builtin?.DatabaseSync !== undefined) return new builtin.DatabaseSync(file)
  let Database: new (path: string) => SqliteDatabaseLike
  try {
    Database = createRequire(import.meta.url)('better-sqlite3') as typeof Database
  } catch (err) {
    throw new TypeError(`sqliteSeenEvents needs node:sqlite (Node 22.13 or later) or the better-sqlite3 package on this Node ${process.version}: npm install better-sqlite3 (${err instanceof Error ? err.message.split('\n')[0] : String(err)})`)
  }
  return new Database(file)
}

/**
 * Seen events in a SQLite file: claims, done marks, releases and renewals with the same meaning
 * as the other stores, each call one transaction (`BEGIN IMMEDIATE`, so processes sharing the
 * file take turns). Calls of one store run one after the other (one connection; a transaction of
 * handlers holds it until it commits). Failures reject with `ReplayStoreError`.
 */
export class SqliteSeenEventsStore implements SeenEventsStore {
  /** The open database (yours, or the one opened from `path`). */
  readonly database: SqliteDatabaseLike
  readonly #owned: boolean
  readonly #ttlMs: number
  readonly #sql: Record<'get' | 'insert' | 'done' | 'release' | 'extend' | 'delete' | 'mark' | 'purge', SqliteStatementLike>
  #queue: Promise<unknown> = Promise.resolve()
  #closed = false

  constructor (options: SqliteSeenEventsOptions) {
    if (options === null || typeof options !== 'object') throw new TypeError('SqliteSeenEventsStore options must be an object with a path or a database')
    const { path, database, table = DEFAULT_TABLE, ttl = DEFAULT_TTL, busyTimeout = 5000 } = options
    if ((path === undefined) === (database === undefined)) throw new TypeError('give sqliteSeenEvents exactly one of path (a database file to open) or database (your own open node:sqlite or better-sqlite3 database)')
    if (path !== undefined && (typeof path !== 'string' || path === '')) throw new TypeError('path must be the database file name (a non-empty string)')
    if (database !== undefined && (database === null || typeof database !== 'object' || typeof database.prepare !== 'function' || typeof database.exec !== 'function')) {
      throw new TypeError('database must be an open node:sqlite DatabaseSync or better-sqlite3 Database (with prepare and exec)')
    }
    if (typeof table !== 'string' || !IDENTIFIER.test(table)) throw new TypeError('table must be a SQLite identifier of letters, digits and underscores (at most 63)')
    checkTtl(ttl, 'ttl')
    if (!Number.isSafeInteger(busyTimeout) || busyTimeout < 0) throw new TypeError('busyTimeout must be a whole number of milliseconds')
    this.#ttlMs = ttl * 1000
    this.#owned = path !== undefined
    try {
      this.database = database ?? openDatabase(path!)
      const db = this.database
      db.exec(`PRAGMA busy_timeout = ${busyTimeout}`)
      // WAL: readers do not block the writer, and a commit survives the process being killed.
      if (this.#owned) db.exec('PRAGMA journal_mode = WAL')
      db.exec(`CREATE TABLE IF NOT EXISTS "${table}" (fingerprint TEXT PRIMARY KEY, token TEXT NOT NULL, done INTEGER NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID`)
      db.exec(`CREATE INDEX IF NOT EXISTS "${table}_expires_at" ON "${table}" (expires_at)`)
      const t = `"${table}"`
      this.#sql = {
        get: db.prepare(`SELECT token, done, expires_at FROM ${t} WHERE fingerprint = ?`),
        insert: db.prepare(`INSERT INTO ${t} (fingerprint, token, done, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (fingerprint) DO UPDATE SET token = excluded.token, done = excluded.done, expires_at = excluded.expires_at`),
        done: db.prepare(`SELECT fingerprint FROM ${t} WHERE fingerprint = ? AND done = 1 AND expires_at > ?`),
        release: db.prepare(`DELETE FROM ${t} WHERE fingerprint = ? AND token = ? AND done = 0`),
        extend: db.prepare(`UPDATE ${t} SET expires_at = ? WHERE fingerprint = ? AND token = ? AND done = 0 AND expires_at > ?`),
        delete: db.prepare(`DELETE FROM ${t} WHERE fingerprint = ?`),
        mark: db.prepare(`UPDATE ${t} SET done = 1, expires_at = ? WHERE fingerprint = ? AND token = ? AND done = 0`),
        purge: db.prepare(`DELETE FROM ${t} WHERE expires_at < ?`),
      }
    } catch (err) {
      if (err instanceof TypeError && err.message.startsWith('sqliteSeenEvents needs')) throw err
      throw new ReplayStoreError('open', `The SQLite database could not be opened: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
    }
  }

  async has (fingerprints: readonly string[]): Promise<boolean[]> {
    return await this.#run('has', false, () => { const now = Date.now(); return fingerprints.map((fp) => this.#sql.done.all(fp, now).length > 0) })
  }

  async add (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    return await this.#run('add', true, () => {
      const now = Date.now()
      const tokenOf = claimTokens(fingerprints.length)
      return fingerprints.map((fp, i) => {
        if (this.#live(fp, now) !== undefined) return false
        this.#sql.insert.run(fp, tokenOf(i), 1, now + this.#ttlMs)
        return true
      })
    })
  }

  async delete (fingerprints: readonly string[]): Promise<void> {
    if (fingerprints.length === 0) return
    await this.#run('delete', true, () => { for (const fp of fingerprints) this.#sql.delete.run(fp) })
  }

  async claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<EventClaimResult[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (fingerprints.length === 0) return []
    return await this.#run('claim', true, () => {
      const now = Date.now()
      const tokenOf = claimTokens(fingerprints.length)
      return fingerprints.map((fingerprint, i): EventClaimResult => {
        const live = this.#live(fingerprint, now)
        if (live !== undefined) return live.done ? 'done' : 'processing'
        const token = tokenOf(i)
        this.#sql.insert.run(fingerprint, token, 0, now + lifetimeSeconds * 1000)
        return { fingerprint, token }
      })
    })
  }

  async complete (claims: readonly EventClaim[]): Promise<void> {
    if (claims.length === 0) return
    await this.#run('complete', true, () => { const until = Date.now() + this.#ttlMs; for (const c of claims) this.#sql.insert.run(c.fingerprint, c.token, 1, until) })
  }

  async release (claims: readonly EventClaim[]): Promise<void> {
    if (claims.length === 0) return
    await this.#run('release', true, () => { for (const c of claims) this.#sql.release.run(c.fingerprint, c.token) })
  }

  async extend (claims: readonly EventClaim[], lifetimeSeconds: number): Promise<void> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (claims.length === 0) return
    await this.#run('extend', true, () => {
      const now = Date.now()
      for (const c of claims) this.#sql.extend.run(now + lifetimeSeconds * 1000, c.fingerprint, c.token, now)
    })
  }

  /** Deletes expired rows (done marks past `ttl`, claims whose holder died); resolves how many. */
  async purgeExpired (): Promise<number> {
    return await this.#run('purge', true, () => Number(this.#sql.purge.run(Date.now()).changes))
  }

  /** Waits for running calls, then closes the database if this store opened it (from `path`). */
  async close (): Promise<void> {
    await this.#enqueue(async () => {
      if (this.#closed) return
      this.#closed = true
      if (this.#owned) this.database.close()
    })
  }

  /** Runs `work` when the calls before it finished: the one connection never interleaves two transactions. */
  protected async enqueue<R> (work: () => Promise<R>): Promise<R> { return await this.#enqueue(work) }

  /** The done mark of `claim` written in the open transaction: whether the claim still held. */
  protected markInTransaction (claim: EventClaim): boolean {
    return Number(this.#sql.mark.run(Date.now() + this.#ttlMs, claim.fingerprint, claim.token).changes) === 1
  }

  protected assertOpen (operation: string): void {
    if (this.#closed) throw new ReplayStoreError(operation, 'The SQLite seen-events store was closed.')
  }

  async #enqueue<R> (work: () => Promise<R>): Promise<R> {
    const run = this.#queue.then(work, work)
    this.#queue = run.catch(() => {})
    return await run
  }

  /** A done mark or a live claim on `fp`, or undefined when it is free (never seen, or expired). */
  #live (fp: string, now: number): { done: boolean } | undefined {
    const row = this.#sql.get.all(fp)[0] as { done: number, expires_at: number } | undefined
    if (row === undefined || Number(row.expires_at) <= now) return undefined
    return { done: Number(row.done) === 1 }
  }

  async #run<R> (operation: string, write: boolean, work: () => R): Promise<R> {
    return await this.#enqueue(async () => {
      this.assertOpen(operation)
      try {
        if (!write) return work()
        this.database.exec('BEGIN IMMEDIATE')
        try {
          const result = work()
          this.database.exec('COMMIT')
          return result
        } catch (err) {
          try { this.database.exec('ROLLBACK') } catch {}
          throw err
        }
      } catch (err) {
        if (err instanceof TypeError) throw err
        throw new ReplayStoreError(operation, `SQLite failed to ${operation}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
      }
    })
  }
}

/** `SqliteSeenEventsStore` that runs handlers in a transaction with the done mark (`transactional: true`). */
export class TransactionalSqliteSeenEventsStore<D extends SqliteDatabaseLike> extends SqliteSeenEventsStore implements TransactionalSeenEventsStore<D> {
  async runInTransaction<R> (claim: EventClaim, work: (tx: D) => Promise<R>): Promise<R> {
    return await this.enqueue(async () => {
      this.assertOpen('transaction')
      const db = this.database as D
      try {
        db.exec('BEGIN IMMEDIATE')
      } catch (err) {
        throw new ReplayStoreError('transaction', `SQLite could not open a transaction: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
      }
      let result: R
      try {
        result = await work(db)
      } catch (err) {
        try { db.exec('ROLLBACK') } catch {}
        throw err
      }
      try {
        if (!this.markInTransaction(claim)) {
          throw new ReplayStoreError('complete', 'The claim on this event expired and another caller took it: this transaction was rolled back, the other one decides.')
        }
        db.exec('COMMIT')
        return result
      } catch (err) {
        try { db.exec('ROLLBACK') } catch {}
        if (err instanceof ReplayStoreError) throw err
        throw new ReplayStoreError('complete', `SQLite could not commit the event's transaction: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
      }
    })
  }
}

/**
 * A SQLite seen-events store for `WebhookEventRouter`: a file, so a single instance keeps its
 * seen events across restarts. With `transactional: true` each event's handlers run in a
 * transaction on the database (`context.db`), committed with the event's done mark.
 *
 * @example
 * ```ts
 * import { DatabaseSync } from 'node:sqlite'   // or: import Database from 'better-sqlite3' (Node 20)
 * const db = new DatabaseSync('app.db')
 * const router = new WebhookEventRouter({ seenEvents: sqliteSeenEvents({ database: db, transactional: true }) })
 *   .on('hard-bounced', (event, { db }) => { db.prepare('INSERT OR IGNORE INTO suppressions (email) VALUES (?)').run(event.email) })
 * ```
 */
export function sqliteSeenEvents<D extends SqliteDatabaseLike> (options: SqliteSeenEventsOptions<D> & { database: D, transactional: true }): TransactionalSqliteSeenEventsStore<D>
export function sqliteSeenEvents (options: SqliteSeenEventsOptions & { transactional: true }): TransactionalSqliteSeenEventsStore<SqliteDatabaseLike>
export function sqliteSeenEvents (options: SqliteSeenEventsOptions & { transactional?: false }): SqliteSeenEventsStore
export function sqliteSeenEvents (options: SqliteSeenEventsOptions): SqliteSeenEventsStore {
  if (options === null || typeof options !== 'object') throw new TypeError('sqliteSeenEvents options must be an object with a path or a database')
  const { transactional = false } = options
  if (typeof transactional !== 'boolean') throw new TypeError('transactional must be true or false')
  return transactional ? new TransactionalSqliteSeenEventsStore(options) : new SqliteSeenEventsStore(options)
}
