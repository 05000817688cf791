// `mailchannels-webhooks/sqlite`: a seen-events store in a SQLite file, so one instance keeps its
// seen events across restarts with nothing to run, and the transactional inbox for apps whose
// data is in that file. The driver is `node:sqlite` where the Node line has it (22.13+, 24) and
// the optional peer `better-sqlite3` elsewhere (Node 20), chosen when a store opens a file, never
// when this module is imported; or pass your own open database.
import { randomBytes } from 'node:crypto'
import { checkDatabaseOptions, createPrivately, isBusy, isMemoryPath, openDatabase, type SqliteDatabaseLike, type SqliteStatementLike } from './driver.js'
import { HandlerTimeoutError, InboxTransactionError, ReplayStoreError } from '../replay/errors.js'
import { claimTokens, type StoreClaim, type StoreClaimResult, type ClaimStore, type TransactionalClaimStore } from '../replay/claim-store.js'
import { checkTtl } from '../replay/ttl.js'

export type { TransactionalClaimStore, StoreClaim } from '../replay/claim-store.js'
export type { TransactionContext } from '../dispatch/types.js'
export type { SqliteDatabaseLike, SqliteStatementLike } from './driver.js'

export interface SqliteSeenEventsOptions<D extends SqliteDatabaseLike = SqliteDatabaseLike> {
  /** The database file to open (created if missing, mode 0600), with `node:sqlite` on Node 22.13+ and 24, else better-sqlite3. Give this or `database`. */
  path?: string
  /**
   * Your own open database (`new DatabaseSync(file)` from `node:sqlite`, or `new Database(file)` from
   * better-sqlite3): the store keeps its table in that database's file, on a connection of its own
   * that it opens to the same file (so your connection is never inside an event's transaction).
   */
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
   * How long a call keeps trying for another connection's write lock on the file before it fails
   * with `ReplayStoreError` (a 503). It retries on timers with backoff, never blocking the event loop.
   * @default 5000 (milliseconds)
   */
  busyTimeout?: number
  /** Run each event's handlers in a transaction on the store's connection, handed to them as `context.db`, with the done mark written in it. @default false */
  transactional?: boolean
  /**
   * With `transactional`: the longest an event's handlers may hold its transaction (and so the
   * file's write lock). Past it the transaction is rolled back, the claim released, the event fails
   * with `HandlerTimeoutError` (the delivery is answered 503 and retried) and the handlers' later
   * calls on `context.db` are refused.
   * @default 30000 (milliseconds)
   */
  handlerTimeout?: number
  /**
   * How often expired rows (done marks past `ttl`, claims whose holder died) are deleted, in the
   * background of a `claim` (at most 10,000 rows at a time). 0 turns it off: then call
   * `purgeExpired()` yourself.
   * @default 3600 (seconds)
   */
  purgeInterval?: number
  /**
   * Accept an in-memory database (`path: ':memory:'`, or such a `database`): nothing survives a
   * restart, so every event is handled again after one. For tests.
   * @default false
   */
  allowMemory?: boolean
}

const DEFAULT_TABLE = 'mailchannels_webhooks_seen_events'
const DEFAULT_TTL = 3 * 24 * 60 * 60
const DEFAULT_HANDLER_TIMEOUT = 30_000
const MAX_TIMER = 2 ** 31 - 1
const PURGE_LIMIT = 10_000

/** The file of an open database (better-sqlite3 `name`, node:sqlite `location()`), or undefined when it is in memory. */
function fileOf (db: SqliteDatabaseLike): string | undefined {
  const d = db as { name?: unknown, memory?: unknown, location?: unknown }
  if (typeof d.location === 'function') {
    try {
      const location: unknown = d.location()
      return typeof location === 'string' && location !== '' ? location : undefined
    } catch {
      return undefined
    }
  }
  if (typeof d.name !== 'string') {
    throw new TypeError('sqliteSeenEvents cannot tell which file database is (better-sqlite3 has db.name, node:sqlite db.location() from Node 22.16): give path, the file\'s name, instead')
  }
  if (d.memory === true || isMemoryPath(d.name)) return undefined
  return d.name
}

/** Whether a transaction is open on `db` (better-sqlite3 `inTransaction`, node:sqlite `isTransaction`); undefined if the driver cannot say. */
function transactionOpen (db: SqliteDatabaseLike): boolean | undefined {
  const d = db as { inTransaction?: unknown, isTransaction?: unknown }
  if (typeof d.inTransaction === 'boolean') return d.inTransaction
  if (typeof d.isTransaction === 'boolean') return d.isTransaction
  return undefined
}

const message = (err: unknown): string => err instanceof Error ? err.message : String(err)
const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

/**
 * `context.db` for one event: the store's connection behind a proxy that refuses every call once
 * the event's handlers settled (or ran past `handlerTimeout`), and notices when a call ended the
 * transaction the store opened (`COMMIT`, `ROLLBACK`), refusing every call after it: statements
 * run after the transaction ended would commit on their own, outside any transaction.
 */
class HandlerConnection {
  readonly proxy: SqliteDatabaseLike
  /** Why calls are refused from now on, once the handlers settled. */
  #revoked: 'settled' | 'timeout' | undefined
  /** Whether a call of the handlers was seen ending the transaction. */
  ended = false
  readonly #proxies = new WeakMap<object, unknown>()

  constructor (readonly db: SqliteDatabaseLike, readonly fingerprint: string, readonly handlerTimeout: number) {
    this.proxy = this.#wrap(db) as SqliteDatabaseLike
  }

  revoke (why: 'settled' | 'timeout'): void { this.#revoked = why }

  endedError (cause?: unknown): InboxTransactionError {
    return new InboxTransactionError('transaction_ended', this.fingerprint,
      `A handler of event ${this.fingerprint} ended the transaction the inbox opened for it (COMMIT, ROLLBACK or BEGIN through context.db). ` +
      'The event is not marked done, not acknowledged, and its claim is kept until it expires: the retry after that runs its handlers again, ' +
      'and whatever the handler committed itself stays committed. Never end context.db\'s transaction: throw to roll it back, ' +
      'and use a SAVEPOINT (or better-sqlite3\'s db.transaction()) for a part you may undo.', cause === undefined ? undefined : { cause })
  }

  #check (): void {
    if (this.#revoked !== undefined) {
      throw new InboxTransactionError('used_after_handler', this.fingerprint,
        `context.db of event ${this.fingerprint} was used after ${this.#revoked === 'timeout'
          ? `its handlers ran past handlerTimeout (${this.handlerTimeout} ms) and its transaction was rolled back`
          : 'its handlers settled and its transaction ended'}: nothing was run. Await every call on context.db inside the handler.`)
    }
    if (this.ended) throw this.endedError()
  }

  #call (self: unknown, fn: (...args: unknown[]) => unknown, args: unknown[], name?: PropertyKey): unknown {
    this.#check()
    if (name === 'close' || name === 'open') {
      throw new TypeError(`context.db is the inbox's connection: a handler may not ${name} it (event ${this.fingerprint})`)
    }
    const out = Reflect.apply(fn, self, args)
    if (transactionOpen(this.db) === false) {
      this.ended = true
      throw this.endedError()
    }
    return this.#wrapResult(out)
  }

  /** Statements, transaction functions and iterators it returns get the same guard; rows do not. */
  #wrapResult (out: unknown): unknown {
    if (out === null || (typeof out !== 'object' && typeof out !== 'function')) return out
    const known = this.#proxies.get(out)
    if (known !== undefined) return known
    const o = out as { run?: unknown, next?: unknown }
    if (typeof out === 'function' || typeof o.run === 'function' || typeof o.next === 'function') return this.#wrap(out)
    return out
  }

  #wrap (target: object): unknown {
    const connection = this
    // Objects are proxied through a stand-in with their prototype, not themselves: a proxy must
    // return a non-configurable property's own value (better-sqlite3's statement.database is one).
    const standIn = typeof target === 'function' ? target : Object.create(Object.getPrototypeOf(target) as object | null) as object
    const proxy = new Proxy(standIn, {
      get (_standIn, prop) {
        // The real object as receiver: native getters (node:sqlite) check it.
        const value: unknown = Reflect.get(target, prop, target)
        // A statement's `database` (better-sqlite3) is the guarded connection too.
        if (value === connection.db) return connection.proxy
        if (typeof value !== 'function' || prop === 'constructor') return value
        return function (this: unknown, ...args: unknown[]) {
          return connection.#call(target, value as (...a: unknown[]) => unknown, args, prop)
        }
      },
      set (_standIn, prop, value) { return Reflect.set(target, prop, value, target) },
      has (_standIn, prop) { return Reflect.has(target, prop) },
      apply (fn, thisArg, args) {
        return connection.#call(thisArg, fn as (...a: unknown[]) => unknown, args)
      },
    })
    this.#proxies.set(target, proxy)
    return proxy
  }
}

/** The store's statements, prepared once: SQLite parses each only once. */
type Statements = Record<'get' | 'insert' | 'done' | 'release' | 'extend' | 'delete' | 'mark' | 'purge' | 'begin' | 'commit' | 'rollback' | 'savepoint' | 'releaseSavepoint', SqliteStatementLike>

const TIMED_OUT = Symbol('timed out')
type Outcome<R> = { ok: true, value: R } | { ok: false, error: unknown } | typeof TIMED_OUT

/**
 * Seen events in a SQLite file: claims, done marks, releases and renewals with the same meaning
 * as the other stores, each call one transaction (`BEGIN IMMEDIATE`, so processes sharing the
 * file take turns; a busy file is retried on timers up to `busyTimeout`). Calls of one store run
 * one after the other on a connection of its own (a transaction of handlers holds it until it
 * commits). Failures reject with `ReplayStoreError`.
 */
export class SqliteSeenEventsStore implements ClaimStore {
  /**
   * Your database (`database`), or a connection to the file it opened (`path`): for your own setup,
   * reads and writes. With `transactional` and a file, a second connection, never the one handlers'
   * transactions run on (`context.db`).
   */
  readonly database: SqliteDatabaseLike
  /** The store's own connection: claims, marks and handlers' transactions run on it, never on yours. */
  readonly #db: SqliteDatabaseLike
  readonly #owned: boolean
  /** Whether `database` is a second connection the store opened from `path` (closed with the store). */
  readonly #ownsDatabase: boolean
  readonly #wal: boolean
  readonly #table: string
  readonly #ttlMs: number
  readonly #busyTimeout: number
  readonly #handlerTimeout: number
  readonly #purgeMs: number
  readonly #savepoint = `mcwh_inbox_${randomBytes(6).toString('hex')}`
  #sql: Statements | undefined
  /** Claims whose transaction a handler ended: never released (the router releases a failed event's claim), they expire on their own. */
  readonly #kept = new Set<string>()
  #lastPurge = 0
  #queue: Promise<unknown> = Promise.resolve()
  #closed = false

  constructor (options: SqliteSeenEventsOptions) {
    if (options === null || typeof options !== 'object') throw new TypeError('SqliteSeenEventsStore options must be an object with a path or a database')
    const {
      path, database, table = DEFAULT_TABLE, ttl = DEFAULT_TTL, busyTimeout = 5000,
      handlerTimeout = DEFAULT_HANDLER_TIMEOUT, purgeInterval = 3600, allowMemory = false,
    } = options
    const transactional = this instanceof TransactionalSqliteSeenEventsStore
    checkDatabaseOptions('sqliteSeenEvents', path, database, table)
    checkTtl(ttl, 'ttl')
    if (!Number.isSafeInteger(busyTimeout) || busyTimeout < 0 || busyTimeout > MAX_TIMER) throw new TypeError('busyTimeout must be a whole number of milliseconds (0 to 2147483647)')
    if (!Number.isSafeInteger(handlerTimeout) || handlerTimeout < 1 || handlerTimeout > MAX_TIMER) {
      throw new TypeError('handlerTimeout must be a whole number of milliseconds from 1 to 2147483647: the longest an event\'s handlers may hold its transaction')
    }
    if (!Number.isSafeInteger(purgeInterval) || purgeInterval < 0) throw new TypeError('purgeInterval must be a whole number of seconds (0 turns purging off)')
    if (typeof allowMemory !== 'boolean') throw new TypeError('allowMemory must be true or false')
    const file = path !== undefined ? (isMemoryPath(path) ? undefined : path) : fileOf(database!)
    if (file === undefined && !allowMemory) {
      throw new TypeError(`${path !== undefined ? `path ${JSON.stringify(path)}` : 'database'} is an in-memory SQLite database: nothing survives a restart, so every event is handled again after one. ` +
        'Give a database file, or set allowMemory: true if that is what you want (tests).')
    }
    if (file === undefined && database !== undefined && transactional) {
      throw new TypeError('transactional: true with your own database needs a database file: the store opens a connection of its own to it, so that your connection is never inside an event\'s transaction, ' +
        'and an in-memory database cannot be opened twice. Use path: \':memory:\' with allowMemory: true, and create your tables through store.database.')
    }
    this.#table = table
    this.#ttlMs = ttl * 1000
    this.#busyTimeout = busyTimeout
    this.#handlerTimeout = handlerTimeout
    this.#purgeMs = purgeInterval * 1000
    this.#wal = path !== undefined && file !== undefined
    let opened: SqliteDatabaseLike | undefined
    try {
      if (path !== undefined) {
        if (file !== undefined) createPrivately(file)
        this.#db = opened = openDatabase(path)
        this.#owned = true
      } else if (file !== undefined) {
        // A connection of the store's own to your database's file, with your database's driver.
        this.#db = opened = new (database!.constructor as new (file: string) => SqliteDatabaseLike)(file)
        this.#owned = true
        // Foreign keys are enforced per connection: as on yours, so handlers' writes are checked alike.
        const keys = database!.prepare('PRAGMA foreign_keys').all()[0] as { foreign_keys?: unknown } | undefined
        if (Number(keys?.foreign_keys) === 1) this.#db.exec('PRAGMA foreign_keys = ON')
      } else {
        this.#db = database!
        this.#owned = false
      }
      // A transactional store's connection is in an event's transaction while its handlers await:
      // with path, your code gets a second connection to the file, so it is never inside one.
      this.database = database ?? (transactional && file !== undefined ? openDatabase(path!) : this.#db)
      this.#ownsDatabase = database === undefined && this.database !== this.#db
      // Lock waits happen on timers (#whenFree), never inside SQLite, which would block the event loop.
      if (this.#owned) this.#db.exec('PRAGMA busy_timeout = 0')
    } catch (err) {
      // A connection opened before the failure is closed, not leaked.
      try { opened?.close() } catch {}
      if (err instanceof TypeError && err.message.startsWith('sqliteSeenEvents needs')) throw err
      throw new ReplayStoreError('open', `The SQLite database could not be opened: ${message(err)}`, { cause: err })
    }
  }

  async has (fingerprints: readonly string[]): Promise<boolean[]> {
    return await this.#run('has', false, (sql) => { const now = Date.now(); return fingerprints.map((fp) => sql.done.all(fp, now).length > 0) })
  }

  async add (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    return await this.#run('add', true, (sql) => {
      const now = Date.now()
      const tokenOf = claimTokens(fingerprints.length)
      return fingerprints.map((fp, i) => {
        if (this.#live(sql, fp, now) !== undefined) return false
        sql.insert.run(fp, tokenOf(i), 1, now + this.#ttlMs)
        return true
      })
    })
  }

  async delete (fingerprints: readonly string[]): Promise<void> {
    if (fingerprints.length === 0) return
    await this.#run('delete', true, (sql) => { for (const fp of fingerprints) sql.delete.run(fp) })
  }

  async claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<StoreClaimResult[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (fingerprints.length === 0) return []
    this.#maybePurge()
    return await this.#run('claim', true, (sql) => {
      const now = Date.now()
      const tokenOf = claimTokens(fingerprints.length)
      return fingerprints.map((fingerprint, i): StoreClaimResult => {
        const live = this.#live(sql, fingerprint, now)
        if (live !== undefined) return live.done ? 'done' : 'processing'
        const token = tokenOf(i)
        sql.insert.run(fingerprint, token, 0, now + lifetimeSeconds * 1000)
        return { fingerprint, token }
      })
    })
  }

  async complete (claims: readonly StoreClaim[]): Promise<void> {
    if (claims.length === 0) return
    await this.#run('complete', true, (sql) => { const until = Date.now() + this.#ttlMs; for (const c of claims) sql.insert.run(c.fingerprint, c.token, 1, until) })
  }

  async release (claims: readonly StoreClaim[]): Promise<void> {
    // A claim whose transaction a handler ended is kept: what that handler committed itself is unknown.
    const free = this.#kept.size === 0 ? claims : claims.filter((c) => !this.#kept.delete(`${c.fingerprint}\0${c.token}`))
    if (free.length === 0) return
    await this.#run('release', true, (sql) => { for (const c of free) sql.release.run(c.fingerprint, c.token) })
  }

  async extend (claims: readonly StoreClaim[], lifetimeSeconds: number): Promise<boolean[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (claims.length === 0) return []
    return await this.#run('extend', true, (sql) => {
      const now = Date.now()
      return claims.map((c) => Number(sql.extend.run(now + lifetimeSeconds * 1000, c.fingerprint, c.token, now).changes) === 1)
    })
  }

  /**
   * Deletes up to 10,000 expired rows (done marks past `ttl`, claims whose holder died) and
   * resolves how many. Claims run it in the background every `purgeInterval`; call it yourself
   * (from a timer or a job) with `purgeInterval: 0`, or to purge more at once.
   */
  async purgeExpired (): Promise<number> {
    return await this.#run('purge', true, (sql) => Number(sql.purge.run(Date.now()).changes))
  }

  /** Waits for running calls, then closes the store's connection (never your `database`). */
  async close (): Promise<void> {
    await this.#enqueue(async () => {
      if (this.#closed) return
      this.#closed = true
      if (this.#owned) this.#db.close()
      if (this.#ownsDatabase) this.database.close()
    })
  }

  /** Runs `work` when the calls before it finished: the one connection never interleaves two transactions. */
  protected async enqueue<R> (work: () => Promise<R>): Promise<R> { return await this.#enqueue(work) }

  /** The done mark of `claim` written in the open transaction: whether the claim still held. */
  protected markInTransaction (claim: StoreClaim): boolean {
    return Number(this.#sql!.mark.run(Date.now() + this.#ttlMs, claim.fingerprint, claim.token).changes) === 1
  }

  protected assertOpen (operation: string): void {
    if (this.#closed) throw new ReplayStoreError(operation, 'The SQLite seen-events store was closed.')
  }

  /**
   * Runs `work` with a guarded `context.db` (HandlerConnection) in a transaction of the store's
   * connection, and commits it with the claim's done mark: only when the handlers resolved within
   * `handlerTimeout` and the transaction they ran in is still the one opened here.
   */
  protected async handleInTransaction<R> (claim: StoreClaim, work: (tx: SqliteDatabaseLike) => Promise<R>): Promise<R> {
    return await this.#enqueue(async () => {
      this.assertOpen('transaction')
      const db = this.#db
      let sql: Statements
      try {
        sql = await this.#whenFree(() => { const prepared = this.#setup(); prepared.begin.run(); return prepared })
        // A savepoint of the store's own inside it: a handler that ends the transaction and opens
        // another one (ROLLBACK; BEGIN) leaves a transaction open, but not this savepoint.
        sql.savepoint.run()
      } catch (err) {
        this.#rollback()
        throw new ReplayStoreError('transaction', `SQLite could not open a transaction: ${this.#describe(err)}`, { cause: err })
      }
      const connection = new HandlerConnection(db, claim.fingerprint, this.#handlerTimeout)
      let timer: ReturnType<typeof setTimeout> | undefined
      const deadline = new Promise<typeof TIMED_OUT>((resolve) => { timer = setTimeout(resolve, this.#handlerTimeout, TIMED_OUT) })
      let outcome: Outcome<R>
      try {
        const running = (async () => await work(connection.proxy))()
        outcome = await Promise.race([running.then((value): Outcome<R> => ({ ok: true, value }), (error: unknown): Outcome<R> => ({ ok: false, error })), deadline])
      } finally {
        clearTimeout(timer)
      }
      connection.revoke(outcome === TIMED_OUT ? 'timeout' : 'settled')
      const ours = !connection.ended && this.#releaseSavepoint()
      if (!ours) {
        this.#rollback()
        // The router releases a failed event's claim; this one is kept (never released) instead.
        if (outcome === TIMED_OUT || !outcome.ok) this.#kept.add(`${claim.fingerprint}\0${claim.token}`)
        const error = outcome !== TIMED_OUT && !outcome.ok ? outcome.error : undefined
        throw error instanceof InboxTransactionError && error.reason === 'transaction_ended' ? error : connection.endedError(error)
      }
      if (outcome === TIMED_OUT) {
        this.#rollback()
        throw new HandlerTimeoutError(claim.fingerprint, `The handlers of event ${claim.fingerprint} ran past handlerTimeout (${this.#handlerTimeout} ms): ` +
          'their transaction was rolled back and the claim released, so the retry runs them again; their later calls on context.db are refused. ' +
          'Make the handlers finish sooner, or raise handlerTimeout.')
      }
      if (!outcome.ok) {
        this.#rollback()
        throw outcome.error
      }
      try {
        if (!this.markInTransaction(claim)) {
          throw new ReplayStoreError('complete', 'The claim on this event expired and another caller took it: this transaction was rolled back, the other one decides.')
        }
        await this.#whenFree(() => sql.commit.run())
        return outcome.value
      } catch (err) {
        this.#rollback()
        if (err instanceof ReplayStoreError) throw err
        throw new ReplayStoreError('complete', `SQLite could not commit the event's transaction: ${this.#describe(err)}`, { cause: err })
      }
    })
  }

  async #enqueue<R> (work: () => Promise<R>): Promise<R> {
    const run = this.#queue.then(work, work)
    this.#queue = run.catch(() => {})
    return await run
  }

  /** Creates the table and prepares the statements, on first use (it may wait for the file's lock). */
  #setup (): Statements {
    if (this.#sql !== undefined) return this.#sql
    const db = this.#db
    const t = `"${this.#table}"`
    // WAL: readers do not block the writer, and a commit survives the process being killed.
    if (this.#wal) db.exec('PRAGMA journal_mode = WAL')
    db.exec(`CREATE TABLE IF NOT EXISTS ${t} (fingerprint TEXT PRIMARY KEY, token TEXT NOT NULL, done INTEGER NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID`)
    db.exec(`CREATE INDEX IF NOT EXISTS "${this.#table}_expires_at" ON ${t} (expires_at)`)
    this.#sql = {
      get: db.prepare(`SELECT token, done, expires_at FROM ${t} WHERE fingerprint = ?`),
      insert: db.prepare(`INSERT INTO ${t} (fingerprint, token, done, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (fingerprint) DO UPDATE SET token = excluded.token, done = excluded.done, expires_at = excluded.expires_at`),
      done: db.prepare(`SELECT fingerprint FROM ${t} WHERE fingerprint = ? AND done = 1 AND expires_at > ?`),
      release: db.prepare(`DELETE FROM ${t} WHERE fingerprint = ? AND token = ? AND done = 0`),
      extend: db.prepare(`UPDATE ${t} SET expires_at = ? WHERE fingerprint = ? AND token = ? AND done = 0 AND expires_at > ?`),
      delete: db.prepare(`DELETE FROM ${t} WHERE fingerprint = ?`),
      mark: db.prepare(`UPDATE ${t} SET done = 1, expires_at = ? WHERE fingerprint = ? AND token = ? AND done = 0`),
      purge: db.prepare(`DELETE FROM ${t} WHERE fingerprint IN (SELECT fingerprint FROM ${t} WHERE expires_at < ? LIMIT ${PURGE_LIMIT})`),
      begin: db.prepare('BEGIN IMMEDIATE'),
      commit: db.prepare('COMMIT'),
      rollback: db.prepare('ROLLBACK'),
      savepoint: db.prepare(`SAVEPOINT "${this.#savepoint}"`),
      releaseSavepoint: db.prepare(`RELEASE "${this.#savepoint}"`),
    }
    return this.#sql
  }

  /**
   * Runs `attempt` (synchronous SQLite work), again on a timer while another connection holds the
   * lock (SQLITE_BUSY), with backoff (1 ms doubling to 100 ms, jittered) up to `busyTimeout`.
   */
  async #whenFree<R> (attempt: () => R): Promise<R> {
    const deadline = Date.now() + this.#busyTimeout
    for (let n = 0; ; n++) {
      try {
        return attempt()
      } catch (err) {
        const left = deadline - Date.now()
        if (!isBusy(err) || left <= 0) throw err
        await sleep(Math.min(left, Math.ceil(Math.min(100, 2 ** n) * (0.5 + Math.random() / 2))))
      }
    }
  }

  #describe (err: unknown): string {
    return isBusy(err) ? `${message(err)} (another connection held the file's write lock for longer than busyTimeout, ${this.#busyTimeout} ms)` : message(err)
  }

  /** Releases the store's savepoint: whether it still existed (the transaction opened for the handlers is still open). */
  #releaseSavepoint (): boolean {
    if (transactionOpen(this.#db) === false) return false
    try {
      this.#sql!.releaseSavepoint.run()
      return true
    } catch {
      return false
    }
  }

  #rollback (): void {
    if (transactionOpen(this.#db) === false) return
    try { (this.#sql?.rollback ?? { run: () => this.#db.exec('ROLLBACK') }).run() } catch {}
  }

  #maybePurge (): void {
    if (this.#purgeMs === 0 || Date.now() - this.#lastPurge < this.#purgeMs) return
    this.#lastPurge = Date.now()
    // In the background: a failed purge is retried at the next interval.
    this.purgeExpired().catch(() => {})
  }

  /** A done mark or a live claim on `fp`, or undefined when it is free (never seen, or expired). */
  #live (sql: { get: SqliteStatementLike }, fp: string, now: number): { done: boolean } | undefined {
    const row = sql.get.all(fp)[0] as { done: number, expires_at: number } | undefined
    if (row === undefined || Number(row.expires_at) <= now) return undefined
    return { done: Number(row.done) === 1 }
  }

  async #run<R> (operation: string, write: boolean, work: (sql: Statements) => R): Promise<R> {
    return await this.#enqueue(async () => {
      this.assertOpen(operation)
      try {
        return await this.#whenFree(() => {
          const sql = this.#setup()
          if (!write) return work(sql)
          sql.begin.run()
          try {
            const result = work(sql)
            sql.commit.run()
            return result
          } catch (err) {
            this.#rollback()
            throw err
          }
        })
      } catch (err) {
        if (err instanceof TypeError) throw err
        throw new ReplayStoreError(operation, `SQLite failed to ${operation}: ${this.#describe(err)}`, { cause: err })
      }
    })
  }
}

/** `SqliteSeenEventsStore` that runs handlers in a transaction with the done mark (`transactional: true`). */
export class TransactionalSqliteSeenEventsStore<D extends SqliteDatabaseLike> extends SqliteSeenEventsStore implements TransactionalClaimStore<D> {
  /**
   * Runs `work` with `context.db` (the store's connection, guarded: refused once `work` settled)
   * in a transaction, and commits it with the claim's done mark. Rejects, rolled back, when a
   * handler threw, ended the transaction itself (`InboxTransactionError`), or ran past
   * `handlerTimeout` (`HandlerTimeoutError`).
   */
  async runInTransaction<R> (claim: StoreClaim, work: (tx: D) => Promise<R>): Promise<R> {
    return await this.handleInTransaction(claim, work as unknown as (tx: SqliteDatabaseLike) => Promise<R>)
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

// Dead letters, in a file of their own (./dead-letters.ts).
export { sqliteDeadLetters, SqliteDeadLetterStore } from './dead-letters.js'
export type { SqliteDeadLettersOptions } from './dead-letters.js'
