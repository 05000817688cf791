// `mailchannels-webhooks/postgres`: a seen-events store on PostgreSQL (node-postgres), shared by
// every receiver instance on one database, and the transactional inbox: an event's handlers run
// in a transaction on your pool and its done mark is written in that same transaction.
// `pg` is an optional peer: this entry imports its types only (you pass your own Pool), and no
// other entry imports this one.
import { createHash } from 'node:crypto'
import type { Pool, PoolClient } from 'pg'
import { HandlerTimeoutError, InboxTransactionError, ReplayStoreError } from '../replay/errors.js'
import { claimTokens, type StoreClaim, type StoreClaimResult, type ClaimStore, type TransactionalClaimStore } from '../replay/claim-store.js'
import { checkTtl } from '../replay/ttl.js'
import { transactionControl } from './statements.js'
import type { DeliveryTransaction, DeliveryTransactionStore } from '../dispatch/types.js'

export type { TransactionalClaimStore, StoreClaim } from '../replay/claim-store.js'
export type { TransactionContext, DeliveryTransaction, DeliveryTransactionStore } from '../dispatch/types.js'
// What a transactional handler that breaks the rules of context.db, or runs past handlerTimeout, fails with.
export { HandlerTimeoutError, InboxTransactionError } from '../replay/errors.js'

/** The part of a node-postgres `QueryResult` this store reads. */
export interface PgQueryResultLike { rows: any[], rowCount?: number | null }

/** A checked-out node-postgres client (`PoolClient`): what `transactional: true` hands to handlers as `context.db`. */
export interface PgPoolClientLike {
  query (config: { text: string, values?: unknown[], query_timeout?: number }): Promise<PgQueryResultLike>
  release (destroy?: boolean | Error): void
  on (event: 'error', listener: (err: Error) => void): unknown
  removeListener (event: 'error', listener: (err: Error) => void): unknown
  /** node-postgres 8.21 and later: the transaction status the server reported after the last statement ('I', 'T' or 'E'). */
  getTransactionStatus?: () => string | null
}

/** A node-postgres `Pool` (`new pg.Pool(...)`), or anything with its `query`, `connect` and `on`. */
export interface PgPoolLike {
  query (config: { text: string, values?: unknown[], query_timeout?: number }): Promise<PgQueryResultLike>
  connect (): Promise<PgPoolClientLike>
  on (event: 'error' | 'connect', listener: (...args: any[]) => void): unknown
}

/**
 * How to open a transaction in your own database library and run this store's statement in it
 * (Kysely, Prisma: see docs/inbox.md). `T` is what your handlers get as `context.db`.
 */
export interface PostgresTransaction<T> {
  /** Runs `work` in a new transaction: commits when it resolves, rolls back when it rejects (what `db.transaction().execute(work)` does in Kysely). */
  run: (work: (tx: T) => Promise<unknown>) => Promise<unknown>
  /** Runs one parameterised statement (`$1`, `$2`... placeholders) in `tx`; resolves its rows (an array, or an object with `rows`). */
  query: (tx: T, text: string, values: unknown[]) => Promise<unknown>
}

export interface PostgresSeenEventsOptions<P extends PgPoolLike = PgPoolLike> {
  /** Your node-postgres `Pool`. The store listens for `'error'` on the pool and on every client it connects (once each), so a client whose server went away does not crash the process; its queries still reject. */
  pool: P
  /**
   * The table of claims and done marks, optionally schema-qualified (`app.webhook_events_seen`).
   * @default 'mailchannels_webhooks_seen_events'
   */
  table?: string
  /**
   * Create the table (and its index) if it does not exist, on first use. Turn it off to create it
   * yourself from `postgresSeenEventsSchema()` in a migration.
   * @default true
   */
  createSchema?: boolean
  /**
   * How long a done mark is remembered: at least the resend horizon.
   * @default 259200 (seconds: 3 days)
   */
  ttl?: number
  /**
   * A last guard on every store call, on top of your pool's own timeouts: a call that takes longer
   * fails with `ReplayStoreError` (the delivery is answered 503 and retried).
   * @default 5000 (milliseconds)
   */
  timeout?: number
  /**
   * How often expired rows (done marks past `ttl`, claims whose holder died) are deleted, in the
   * background of a `claim` (at most 10,000 rows at a time, skipping rows another instance is
   * deleting). 0 turns it off: then delete `WHERE expires_at < now()` yourself.
   * @default 3600 (seconds)
   */
  purgeInterval?: number
  /**
   * With `transactional` or `transaction`: the longest an event's handlers may run in their
   * transaction. Past it the transaction is rolled back, its connection given back to the pool,
   * the claim released, `context.signal` aborted and the delivery answered 503
   * (`HandlerTimeoutError`), so a handler that never returns cannot hold a connection "idle in
   * transaction" for good. Set it above your slowest handler.
   * @default 30000 (milliseconds)
   */
  handlerTimeout?: number
}

/** The transaction handed to handlers: a node-postgres `PoolClient` inside `BEGIN` … `COMMIT` (typed from `@types/pg`). */
export type PgTransactionClient<P extends PgPoolLike> = P extends Pool ? PoolClient : PgPoolClientLike

/** Pools and clients this module already listens to (one listener each, however many stores share them). */
const listened = new WeakSet<object>()
const DEFAULT_TABLE = 'mailchannels_webhooks_seen_events'
const DEFAULT_TTL = 3 * 24 * 60 * 60
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/
/** Fingerprints (base64url SHA-256) and claim tokens (base64url, a dot, base 36): safe to splice into SQL between single quotes. */
const LITERAL = /^[A-Za-z0-9_.-]{1,200}$/
const DEFAULT_HANDLER_TIMEOUT = 30_000
/** The longest delay `setTimeout` keeps (a longer one fires at once). */
const MAX_TIMER = 2 ** 31 - 1

/** The quoted, schema-qualified table name, or a TypeError naming the option. */
function quoteTable (table: unknown): string {
  if (typeof table !== 'string') throw new TypeError(`table must be a string (a table name, optionally schema-qualified), got ${typeof table}`)
  const parts = table.split('.')
  if (parts.length > 2 || !parts.every((p) => IDENTIFIER.test(p))) {
    throw new TypeError('table must be a PostgreSQL identifier of letters, digits and underscores (at most 63), optionally schema-qualified (schema.table)')
  }
  return parts.map((p) => `"${p}"`).join('.')
}

/**
 * The SQL that creates the store's table and index (idempotent: `IF NOT EXISTS`), for a migration
 * of your own (`createSchema: false`). One row per event fingerprint: a claim (`done` false, a
 * random `token`, a short `expires_at`) or the done mark (`done` true, kept until `expires_at`).
 */
export function postgresSeenEventsSchema (options: { table?: string } = {}): string {
  const table = quoteTable(options.table ?? DEFAULT_TABLE)
  const plain = (options.table ?? DEFAULT_TABLE).split('.').pop()!
  return `CREATE TABLE IF NOT EXISTS ${table} (
  fingerprint text PRIMARY KEY,
  token text NOT NULL,
  done boolean NOT NULL,
  expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS "${expiryIndexName(plain)}" ON ${table} (expires_at);
`
}

/**
 * The expiry index's name for table `plain`: `<table>_expires_at` while that fits PostgreSQL's 63
 * characters untruncated (tables of up to 50 characters: the name this store always gave them),
 * else the table's first 30 characters, a hash of its whole name and `_expires_at`. PostgreSQL
 * cuts longer names to 63 characters, so two long tables sharing a prefix would get one index name
 * and `CREATE INDEX IF NOT EXISTS` would skip the second; the hash keeps them apart. The two forms
 * never meet: a short table's name part is at most 50 characters, a long one's exactly 52.
 */
function expiryIndexName (plain: string): string {
  if (plain.length <= 50) return `${plain}_expires_at`
  const hash = createHash('sha256').update(plain).digest('hex').slice(0, 21)
  return `${plain.slice(0, 30)}_${hash}_expires_at`
}

/**
 * Seen events on PostgreSQL: claims, done marks, releases and renewals of a whole delivery in one
 * statement each (one round trip, whatever the number of events), atomic per event on the server,
 * so any number of receiver instances can share one database. Time is the database server's
 * (`now()`), so the instances' clocks do not matter. Failures reject with `ReplayStoreError`.
 *
 * Build it with `postgresSeenEvents`; with `transactional: true` (or `transaction`) it also runs
 * handlers in a transaction that commits their effects and the done mark together.
 */
export class PostgresSeenEventsStore implements ClaimStore {
  readonly #pool: PgPoolLike
  readonly #table: string
  readonly #ttl: number
  readonly #timeout: number
  readonly #purgeMs: number
  readonly #handlerTimeout: number
  #schema: Promise<void> | undefined
  #lastPurge = Date.now()
  readonly #sql: Record<'claim' | 'add' | 'complete' | 'release' | 'extend' | 'has' | 'delete' | 'mark' | 'markInTransaction' | 'markAll' | 'held' | 'purge', string>

  constructor (options: PostgresSeenEventsOptions) {
    if (options === null || typeof options !== 'object') throw new TypeError('PostgresSeenEventsStore options must be an object with a pool')
    const { pool, table = DEFAULT_TABLE, createSchema = true, ttl = DEFAULT_TTL, timeout = 5000, purgeInterval = 3600, handlerTimeout = DEFAULT_HANDLER_TIMEOUT } = options
    if (pool === null || typeof pool !== 'object' || typeof pool.query !== 'function' || typeof pool.connect !== 'function' || typeof pool.on !== 'function') {
      throw new TypeError('pool must be a node-postgres Pool (new pg.Pool({ connectionString })): an object with query, connect and on methods')
    }
    this.#table = quoteTable(table)
    checkTtl(ttl, 'ttl')
    if (!Number.isSafeInteger(timeout) || timeout < 1) throw new TypeError('timeout must be a positive integer number of milliseconds')
    if (!Number.isSafeInteger(purgeInterval) || purgeInterval < 0) throw new TypeError('purgeInterval must be a whole number of seconds (0 turns purging off)')
    if (typeof createSchema !== 'boolean') throw new TypeError('createSchema must be true or false')
    if (!Number.isSafeInteger(handlerTimeout) || handlerTimeout < 1 || handlerTimeout > MAX_TIMER) {
      throw new TypeError(`handlerTimeout must be a positive integer number of milliseconds (at most ${MAX_TIMER}): the longest an event's handlers may run in their transaction`)
    }
    this.#handlerTimeout = handlerTimeout
    this.#pool = pool
    this.#ttl = ttl
    this.#timeout = timeout
    this.#purgeMs = purgeInterval * 1000
    if (!createSchema) this.#schema = Promise.resolve()
    // An idle pooled client whose server went away emits 'error' on the pool; with no listener
    // Node throws it and the process dies. The next query simply connects again.
    if (!listened.has(pool)) {
      listened.add(pool)
      pool.on('error', () => {})
      // And a client checked out of the pool has no pool listener: its 'error' (the server gone
      // mid-query, or a late socket error once it is handed back broken) would crash the process
      // too. Each new client keeps a listener for good; its queries still reject.
      pool.on('connect', (client) => { listenForGood(client as PgPoolClientLike) })
    }
    const t = this.#table
    const input = 'unnest($1::text[], $2::text[]) AS u(f, t)'
    const life = 'now() + make_interval(secs => $3::double precision)'
    const expired = 's.expires_at <= now()'
    const expiredNot = 's.expires_at > now()'
    this.#sql = {
      // Every conflicting row is updated, to itself unless it expired: RETURNING then shows its
      // current state, even for a row another transaction committed after this statement began
      // (read committed re-checks the conflict on the newest version). Sorted, so two batches
      // lock shared rows in the same order (no deadlock).
      claim: `INSERT INTO ${t} AS s (fingerprint, token, done, expires_at) SELECT f, t, false, ${life} FROM ${input} ORDER BY f
ON CONFLICT (fingerprint) DO UPDATE SET
  token = CASE WHEN ${expired} THEN excluded.token ELSE s.token END,
  done = CASE WHEN ${expired} THEN false ELSE s.done END,
  expires_at = CASE WHEN ${expired} THEN excluded.expires_at ELSE s.expires_at END
RETURNING fingerprint, token, done`,
      add: `INSERT INTO ${t} AS s (fingerprint, token, done, expires_at) SELECT f, t, true, ${life} FROM ${input} ORDER BY f
ON CONFLICT (fingerprint) DO UPDATE SET
  token = CASE WHEN ${expired} THEN excluded.token ELSE s.token END,
  done = CASE WHEN ${expired} THEN true ELSE s.done END,
  expires_at = CASE WHEN ${expired} THEN excluded.expires_at ELSE s.expires_at END
RETURNING fingerprint, token`,
      complete: `INSERT INTO ${t} AS s (fingerprint, token, done, expires_at) SELECT f, t, true, ${life} FROM ${input} ORDER BY f
ON CONFLICT (fingerprint) DO UPDATE SET token = excluded.token, done = true, expires_at = excluded.expires_at`,
      // Releases, renewals and deletes lock their rows first, in fingerprint order as claim and
      // complete do (a join would lock them in whatever order its plan reads them, and two
      // statements sharing rows could then deadlock); the rows stay locked until the change.
      release: `WITH l AS (SELECT s.fingerprint FROM ${t} AS s, ${input} WHERE s.fingerprint = u.f AND s.token = u.t AND NOT s.done ORDER BY s.fingerprint FOR UPDATE OF s)
DELETE FROM ${t} AS s USING l WHERE s.fingerprint = l.fingerprint`,
      extend: `WITH l AS (SELECT s.fingerprint FROM ${t} AS s, ${input} WHERE s.fingerprint = u.f AND s.token = u.t AND NOT s.done AND ${expiredNot} ORDER BY s.fingerprint FOR UPDATE OF s)
UPDATE ${t} AS s SET expires_at = ${life} FROM l WHERE s.fingerprint = l.fingerprint RETURNING s.fingerprint, s.token`,
      has: `SELECT fingerprint FROM ${t} WHERE fingerprint = ANY($1::text[]) AND done AND expires_at > now()`,
      delete: `WITH l AS (SELECT fingerprint FROM ${t} WHERE fingerprint = ANY($1::text[]) ORDER BY fingerprint FOR UPDATE)
DELETE FROM ${t} AS s USING l WHERE s.fingerprint = l.fingerprint`,
      // In the handlers' transaction: only while this claim holds (an expired claim nobody took
      // again still does); else another caller owns the event now and this transaction rolls back.
      mark: `UPDATE ${t} SET done = true, expires_at = now() + make_interval(secs => $3::double precision) WHERE fingerprint = $1 AND token = $2 AND NOT done RETURNING fingerprint`,
      // The same, and only in the transaction the store opened ($4: its id, read at BEGIN): a
      // handler that ended it (COMMIT, ROLLBACK) leaves this statement in another transaction, or
      // in none, where it changes nothing.
      markInTransaction: `UPDATE ${t} SET done = true, expires_at = now() + make_interval(secs => $3::double precision) WHERE fingerprint = $1 AND token = $2 AND NOT done AND txid_current() = $4::bigint RETURNING fingerprint`,
      // A delivery's group of events at once (openDelivery), with the same two conditions. Each row
      // is found by its key (a LATERAL lookup that cannot be flattened, then `= ANY` of an array):
      // a join with the array may scan the whole table when the planner's idea of its size is stale.
      // The lookups run, and lock, in fingerprint order (the sorted input drives them).
      markAll: `WITH l AS (SELECT s.fingerprint FROM (SELECT f, t FROM ${input} ORDER BY f) AS u CROSS JOIN LATERAL (SELECT fingerprint FROM ${t} WHERE fingerprint = u.f AND token = u.t AND NOT done LIMIT 1) AS s ORDER BY s.fingerprint FOR UPDATE OF s)
UPDATE ${t} AS s SET done = true, expires_at = ${life} WHERE s.fingerprint = ANY(ARRAY(SELECT fingerprint FROM l)) AND txid_current() = $4::bigint RETURNING s.fingerprint`,
      held: `SELECT s.fingerprint FROM ${input} CROSS JOIN LATERAL (SELECT fingerprint FROM ${t} WHERE fingerprint = u.f AND token = u.t AND NOT done LIMIT 1) AS s`,
      purge: `DELETE FROM ${t} WHERE fingerprint IN (SELECT fingerprint FROM ${t} WHERE expires_at < now() LIMIT 10000 FOR UPDATE SKIP LOCKED)`,
    }
  }

  /** Creates the table and index if they do not exist (what `createSchema: true` does on first use). Safe to run from many instances at once. */
  async createSchema (): Promise<void> {
    this.#schema = this.#create()
    await this.#schema
  }

  async #create (): Promise<void> {
    // One instance at a time: concurrent CREATE TABLE IF NOT EXISTS can still collide in the catalogue.
    const text = `BEGIN; SELECT pg_advisory_xact_lock(7236110428193310); ${postgresSeenEventsSchema({ table: this.#table.replaceAll('"', '') })} COMMIT;`
    try {
      await this.#guard('createSchema', async () => await this.#pool.query({ text }))
    } catch (err) {
      // Tried again on the next call.
      this.#schema = undefined
      throw err
    }
  }

  async has (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    const { rows } = await this.#query('has', this.#sql.has, [fingerprints])
    const done = new Set(rows.map((r) => r.fingerprint as string))
    return fingerprints.map((fp) => done.has(fp))
  }

  async add (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    const unique = [...new Set(fingerprints)]
    const tokenOf = claimTokens(unique.length)
    const tokens = unique.map((_fp, i) => tokenOf(i))
    const { rows } = await this.#query('add', this.#sql.add, [unique, tokens, this.#ttl])
    const mine = new Map(unique.map((fp, i) => [fp, tokens[i]!]))
    const won = new Set(rows.filter((r) => mine.get(r.fingerprint) === r.token).map((r) => r.fingerprint as string))
    // A fingerprint twice in the batch counts once: its first occurrence.
    const seen = new Set<string>()
    return fingerprints.map((fp) => {
      if (seen.has(fp)) return false
      seen.add(fp)
      return won.has(fp)
    })
  }

  async delete (fingerprints: readonly string[]): Promise<void> {
    if (fingerprints.length === 0) return
    await this.#query('delete', this.#sql.delete, [fingerprints])
  }

  async claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<StoreClaimResult[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (fingerprints.length === 0) return []
    this.#maybePurge()
    const unique = [...new Set(fingerprints)]
    const tokenOf = claimTokens(unique.length)
    const tokens = unique.map((_fp, i) => tokenOf(i))
    const { rows } = await this.#query('claim', this.#sql.claim, [unique, tokens, lifetimeSeconds])
    const state = new Map<string, { token: string, done: boolean }>()
    for (const r of rows) state.set(r.fingerprint, r)
    const mine = new Map(unique.map((fp, i) => [fp, tokens[i]!]))
    if (state.size !== unique.length) throw new ReplayStoreError('claim', 'PostgreSQL answered claim with an unexpected number of rows.')
    const given = new Set<string>()
    return fingerprints.map((fingerprint): StoreClaimResult => {
      const row = state.get(fingerprint)!
      if (row.done) return 'done'
      const token = mine.get(fingerprint)!
      // A fingerprint twice in the batch: the first occurrence holds the claim, the next sees it taken.
      if (row.token !== token || given.has(fingerprint)) return 'processing'
      given.add(fingerprint)
      return { fingerprint, token }
    })
  }

  async complete (claims: readonly StoreClaim[]): Promise<void> {
    if (claims.length === 0) return
    const byFp = new Map(claims.map((c) => [c.fingerprint, c.token]))
    await this.#query('complete', this.#sql.complete, [[...byFp.keys()], [...byFp.values()], this.#ttl])
  }

  async release (claims: readonly StoreClaim[]): Promise<void> {
    if (claims.length === 0) return
    await this.#query('release', this.#sql.release, [claims.map((c) => c.fingerprint), claims.map((c) => c.token)])
  }

  async extend (claims: readonly StoreClaim[], lifetimeSeconds: number): Promise<boolean[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (claims.length === 0) return []
    const result = await this.#query('extend', this.#sql.extend, [claims.map((c) => c.fingerprint), claims.map((c) => c.token), lifetimeSeconds])
    const kept = new Set<string>()
    for (const row of result.rows as Array<{ fingerprint: string, token: string }>) kept.add(`${row.fingerprint}\0${row.token}`)
    return claims.map((c) => kept.has(`${c.fingerprint}\0${c.token}`))
  }

  /** Deletes up to 10,000 expired rows now; resolves how many. */
  async purgeExpired (): Promise<number> {
    const result = await this.#query('purge', this.#sql.purge, [])
    return result.rowCount ?? 0
  }

  /**
   * The done-mark statement and its values, for a transaction of yours (`runInTransaction`). With
   * `xid`, the transaction's id (`txid_current()`) read when it began, the statement marks the
   * event only in that same transaction.
   */
  protected markStatement (claim: StoreClaim, xid?: string): { text: string, values: unknown[] } {
    if (xid === undefined) return { text: this.#sql.mark, values: [claim.fingerprint, claim.token, this.#ttl] }
    return { text: this.#sql.markInTransaction, values: [claim.fingerprint, claim.token, this.#ttl, xid] }
  }

  /**
   * For `openDelivery`: the statement that writes the done marks of `claims` in one go, only in
   * the transaction `xid` and only while each claim holds; resolves the rows it marked. The rows
   * are locked in fingerprint order first, as `claim` and `complete` do (no deadlock).
   */
  protected markAll (claims: readonly StoreClaim[], xid: string): { text: string, values: unknown[] } {
    return { text: this.#sql.markAll, values: [claims.map((c) => c.fingerprint), claims.map((c) => c.token), this.#ttl, xid] }
  }

  /**
   * The same as one text followed by `then` (the `COMMIT`): it fails with division_by_zero when it
   * marked fewer rows than `claims`, so that `then` never runs for a part of them. Values are
   * spliced into the text (a text of several statements takes no parameters), so only the store's
   * own fingerprints and tokens qualify: `undefined` for anything else.
   */
  protected markAllThen (claims: readonly StoreClaim[], xid: string, then: string): string | undefined {
    if (!/^\d+$/.test(xid) || !claims.every((c) => LITERAL.test(c.fingerprint) && LITERAL.test(c.token))) return undefined
    const list = (values: string[]): string => `ARRAY['${values.join("','")}']::text[]`
    const input = `unnest(${list(claims.map((c) => c.fingerprint))}, ${list(claims.map((c) => c.token))}) AS u(f, t)`
    return `WITH l AS (SELECT s.fingerprint FROM (SELECT f, t FROM ${input} ORDER BY f) AS u CROSS JOIN LATERAL (SELECT fingerprint FROM ${this.#table} WHERE fingerprint = u.f AND token = u.t AND NOT done LIMIT 1) AS s ORDER BY s.fingerprint FOR UPDATE OF s), ` +
      `m AS (UPDATE ${this.#table} AS s SET done = true, expires_at = now() + make_interval(secs => ${this.#ttl}) WHERE s.fingerprint = ANY(ARRAY(SELECT fingerprint FROM l)) AND txid_current() = ${xid} RETURNING 1) ` +
      `SELECT 1 / (count(*) = ${claims.length})::int AS marked FROM m; ${then}`
  }

  /** The statement that reads which of `claims` still hold (their token, not done): their fingerprints. */
  protected heldStatement (claims: readonly StoreClaim[]): { text: string, values: unknown[] } {
    return { text: this.#sql.held, values: [claims.map((c) => c.fingerprint), claims.map((c) => c.token)] }
  }

  /** Waits for the schema (created on first use). */
  protected async ready (): Promise<void> {
    await (this.#schema ??= this.#create())
  }

  protected get timeout (): number { return this.#timeout }
  protected get handlerTimeout (): number { return this.#handlerTimeout }
  protected get pool (): PgPoolLike { return this.#pool }

  async #query (operation: string, text: string, values: unknown[]): Promise<PgQueryResultLike> {
    await this.ready()
    return await this.#guard(operation, async () => await this.#pool.query({ text, values, query_timeout: this.#timeout }))
  }

  async #guard<R> (operation: string, call: () => Promise<R>): Promise<R> {
    return await guard(operation, this.#timeout, call)
  }

  #maybePurge (): void {
    if (this.#purgeMs === 0 || Date.now() - this.#lastPurge < this.#purgeMs) return
    this.#lastPurge = Date.now()
    // In the background: a failed purge is retried at the next interval.
    this.purgeExpired().catch(() => {})
  }
}

/** `PostgresSeenEventsStore` that runs handlers in a transaction with the done mark: what `postgresSeenEvents` builds for `transactional` or `transaction`. */
export class TransactionalPostgresSeenEventsStore<T> extends PostgresSeenEventsStore implements TransactionalClaimStore<T>, DeliveryTransactionStore<T> {
  readonly #transaction: PostgresTransaction<T>
  /** With `transactional: true`: the pool whose clients the store guards itself (`#runOnPool`). */
  readonly #onPool: PgPoolLike | undefined

  constructor (options: PostgresSeenEventsOptions, transaction: PostgresTransaction<T>) {
    super(options)
    if (transaction === null || typeof transaction !== 'object' || typeof transaction.run !== 'function' || typeof transaction.query !== 'function') {
      throw new TypeError('transaction must be an object with run(work) and query(tx, text, values) functions (see docs/inbox.md), or use transactional: true with a node-postgres Pool')
    }
    this.#transaction = transaction
    this.#onPool = onPool.get(transaction)
  }

  /**
   * With `transactional: true`: one transaction for up to 100 events of a delivery, their done
   * marks written with its one commit; an event that fails is left out and the others run again
   * (what `WebhookEventRouter` uses). `undefined` with your own library's `transaction`, whose
   * events keep a transaction each (`runInTransaction`).
   */
  openDelivery (): DeliveryTransaction<T> | undefined {
    if (this.#onPool === undefined) return undefined
    return new PoolDelivery(this.#onPool, this.timeout, this.handlerTimeout, EVENTS_PER_TRANSACTION, {
      ready: async () => { await this.ready() },
      markAll: (claims, xid) => this.markAll(claims, xid),
      markAllThen: (claims, xid, then) => this.markAllThen(claims, xid, then),
      held: (claims) => this.heldStatement(claims),
      release: async (claims) => { await this.release(claims) },
    }) as unknown as DeliveryTransaction<T>
  }

  async runInTransaction<R> (claim: StoreClaim, work: (tx: T) => Promise<R>): Promise<R> {
    await this.ready()
    if (this.#onPool !== undefined) return await this.#runOnPool(this.#onPool, claim, work as unknown as (tx: PgPoolClientLike) => Promise<R>)
    return await this.#runInYours(claim, work)
  }

  /**
   * `transactional: true`: a client of the pool, `BEGIN` (reading the transaction's id), the
   * handlers on a guarded view of the client, the done mark in that same transaction, `COMMIT`.
   */
  async #runOnPool<R> (pool: PgPoolLike, claim: StoreClaim, work: (tx: PgPoolClientLike) => Promise<R>): Promise<R> {
    const timeout = this.timeout
    const client = await checkOut(pool, timeout)
    // A checked-out client has no pool listener: if the server goes away mid-transaction (or
    // its socket closes just after we hand a broken client back) its 'error' event would crash
    // the process. So every client this store uses keeps a listener for good; the failed query
    // rejects on its own.
    listenForGood(client)
    let broken: Error | undefined
    const onError = (err: Error): void => { broken = err }
    client.on('error', onError)
    const db = new HandlerClient(client, claim.fingerprint, this.handlerTimeout)
    let destroy: boolean | Error = false
    let failed: { error: unknown } | undefined
    let backend: number | undefined
    try {
      // One round trip: the transaction, its id (for the done mark) and the server process (to end
      // it should its connection have to be dropped mid-statement).
      const begun = lastResult(await client.query({ text: BEGIN, query_timeout: timeout })).rows[0] as { xid: string, pid: number } | undefined
      if (begun === undefined) throw new ReplayStoreError('transaction', 'PostgreSQL answered BEGIN without the transaction\'s id.')
      backend = begun.pid
      let result: R
      try {
        result = await this.#deadline(claim.fingerprint, () => { db.close('timeout') }, async () => await work(db.client))
      } catch (error) {
        failed = { error }
        throw error
      } finally {
        db.close('settled')
      }
      // The handler caught a refused COMMIT or ROLLBACK and went on: it meant to end the
      // transaction, so its work is not what it intended. Rolled back, never marked.
      if (db.refused !== undefined) throw db.refused
      const { text, values } = this.markStatement(claim, begun.xid)
      const marked = await client.query({ text, values, query_timeout: timeout })
      if (marked.rows.length !== 1) await unmarked(claim.fingerprint, begun.xid, async (q, v) => await client.query({ text: q, values: v, query_timeout: timeout }))
      // context.db used after the handlers settled, before the commit: a statement the handler
      // meant for this event was refused, so neither is this event's work what it intended.
      if (db.late !== undefined) throw db.late
      await client.query({ text: 'COMMIT', query_timeout: timeout })
      return result
    } catch (err) {
      try {
        // After a handler deadline this waits for any statement of the handler still running on
        // the client (at most `timeout`), then the client is destroyed instead.
        await client.query({ text: 'ROLLBACK', query_timeout: timeout })
      } catch {
        // The connection is gone or stuck (and with it the transaction): never reuse it.
        destroy = true
      }
      throw transactionError(err, failed)
    } finally {
      client.removeListener('error', onError)
      client.release(broken ?? destroy)
      if (destroy !== false && db.timedOut && backend !== undefined) {
        // A handler's statement still runs on the server (a lock wait, a long query): a dropped
        // connection does not stop it, so its locks would stay. End that server process.
        guard('terminate', timeout, async () => await pool.query({ text: 'SELECT pg_terminate_backend($1)', values: [backend], query_timeout: timeout })).catch(() => {})
      }
    }
  }

  /** `transaction: { run, query }`: your library's transaction, with the transaction-id check and the deadline. */
  async #runInYours<R> (claim: StoreClaim, work: (tx: T) => Promise<R>): Promise<R> {
    const { fingerprint } = claim
    const transaction = this.#transaction
    let failed: { error: unknown } | undefined
    let out: R
    let abandon: ReturnType<typeof setTimeout> | undefined
    let timedOut: (() => void) | undefined
    // Past the deadline, your library rolls back when `work` rejects; should that wait behind a
    // statement of the handler, the delivery still gets its answer `timeout` later.
    const abandoned = new Promise<never>((_resolve, reject) => {
      timedOut = () => { abandon = setTimeout(() => { reject(timeoutError(fingerprint, this.handlerTimeout)) }, this.timeout) }
    })
    abandoned.catch(() => {})
    const running = Promise.resolve().then(async () => await transaction.run(async (tx) => {
      const xid = firstRow(await transaction.query(tx, 'SELECT txid_current()::text AS xid', []))?.xid
      if (typeof xid !== 'string') throw new ReplayStoreError('transaction', 'transaction.query answered SELECT txid_current() without its row: it must resolve the statement\'s rows (an array, or an object with rows).')
      let result: R
      try {
        result = await this.#deadline(fingerprint, timedOut!, async () => await work(tx))
      } catch (error) {
        // The handler's own error, passed on as it is once the transaction rolled back.
        failed = { error }
        throw error
      }
      const { text, values } = this.markStatement(claim, xid)
      if (rowCount(await transaction.query(tx, text, values)) !== 1) await unmarked(fingerprint, xid, async (q, v) => await transaction.query(tx, q, v))
      out = result
    }))
    try {
      await Promise.race([running, abandoned])
      return out!
    } catch (err) {
      throw transactionError(err, failed)
    } finally {
      clearTimeout(abandon)
    }
  }

  /** `run()`, or a `HandlerTimeoutError` once `handlerTimeout` passed (after calling `onTimeout`). */
  async #deadline<R> (fingerprint: string, onTimeout: () => void, run: () => Promise<R>): Promise<R> {
    // One promise and one timer per event: settled by the handlers or by the timer, whichever is
    // first. Past the deadline nothing waits for the handlers any more: their failure is nobody's.
    return await new Promise<R>((resolve, reject) => {
      const timer = setTimeout(() => { onTimeout(); reject(timeoutError(fingerprint, this.handlerTimeout)) }, this.handlerTimeout)
      run().then((value) => { clearTimeout(timer); resolve(value) }, (err: unknown) => { clearTimeout(timer); reject(err) })
    })
  }
}

const BEGIN = 'BEGIN; SELECT txid_current()::text AS xid, pg_backend_pid() AS pid'

/**
 * Events per transaction of a delivery, at most: the router commits when a group is this large
 * (and after any failure in it). No savepoints, so no limit from PostgreSQL's subtransaction
 * cache; the bound keeps what a failure runs again, and the time a group's claims go without
 * renewal, small. Measured in docs/benchmarks.md ("Transactional inbox, grouped").
 */
const EVENTS_PER_TRANSACTION = 100
/** division_by_zero: what the done-mark text (`markAllThen`) fails with when it marked fewer rows than it was given. */
const UNMARKED = '22012'

/** What a delivery's transaction needs of its store. */
interface DeliveryStatements {
  ready: () => Promise<void>
  markAll: (claims: readonly StoreClaim[], xid: string) => { text: string, values: unknown[] }
  markAllThen: (claims: readonly StoreClaim[], xid: string, then: string) => string | undefined
  held: (claims: readonly StoreClaim[]) => { text: string, values: unknown[] }
  release: (claims: readonly StoreClaim[]) => Promise<void>
}

/** One event of the open group: what to run again should another event of the group fail. */
interface GroupEvent {
  readonly claim: StoreClaim
  readonly work: (tx: PgPoolClientLike) => Promise<unknown>
  /** Every guarded view of the client its handlers got (one per run): a late call on any of them fails the event. */
  readonly clients: HandlerClient[]
  /** Whether its handlers sent anything on the connection: if not, a rollback undoes nothing of it and it is not run again. */
  used: boolean
  /** Its handlers threw (or ran past their deadline) in their last run. */
  threw: boolean
  /** Its done mark is already written in the current transaction (before a statement the check cannot read, or at once on node-postgres without transaction status). */
  marked: boolean
}

/** Errors that mean the transaction the store opened is over (a handler ended it past the check): nothing of it can be run again or committed. */
const endedErrors = new WeakSet<object>()

/**
 * One transaction of a delivery's events on one client of the pool (`openDelivery`): `BEGIN`,
 * then per event its handlers, with no savepoint and no round trip of the store's; at `commit`,
 * the done marks of every event of the group in one statement (in the transaction the store
 * opened, only while each claim holds) and `COMMIT`, in one round trip. When an event fails (its
 * handler throws, runs past `handlerTimeout`, breaks a rule of `context.db`, or leaves the
 * transaction in error), the group is rolled back and the others' handlers run again in a fresh
 * transaction without it: their first run left nothing behind in the database, so each event's
 * effects still commit once, with its done mark. Each run of an event's handlers gets its own
 * guarded view of the client, closed when they settle, so a late call never runs in a later run.
 */
class PoolDelivery {
  #client: PgPoolClientLike | undefined
  #xid = ''
  #pid: number | undefined
  /** Set once the transaction cannot go on: later events are not run, and `commit` rejects with it. */
  #broken: Error | undefined
  /** The client's own 'error' (the server went away): it is destroyed, not given back. */
  #lost: Error | undefined
  readonly #onError = (err: Error): void => { this.#lost = err }
  /** The events whose handlers resolved in the current transaction, waiting for the commit. */
  #events: GroupEvent[] = []
  /** Events `run` resolved for that failed later (run again after another's failure, or a late call): what `commit` answers. */
  #failures: Map<string, unknown> | undefined
  /** Claims of events whose handlers threw when run again: released after the commit (their effects are rolled back). */
  readonly #toRelease: StoreClaim[] = []
  /** Done marks written before a statement the check cannot read (`#markBefore`); awaited before the group goes on. */
  #flushes: Promise<void>[] = []
  #flushFailed: unknown
  /** A failure was recovered from: commit now, so that a later failure runs fewer events again. */
  #regrouped = false
  #committing = false
  #released = false

  constructor (
    readonly pool: PgPoolLike,
    readonly timeout: number,
    readonly handlerTimeout: number,
    readonly groupSize: number,
    readonly store: DeliveryStatements,
  ) {}

  get full (): boolean { return this.#regrouped || this.#events.length >= this.groupSize }

  async run<R> (claim: StoreClaim, work: (tx: PgPoolClientLike) => Promise<R>): Promise<R> {
    if (this.#committing) throw new ReplayStoreError('transaction', 'This delivery\'s transaction was already committed: open another.')
    if (this.#broken !== undefined) throw this.#broken
    const client = this.#client ?? await this.#open()
    const event: GroupEvent = { claim, work, clients: [], used: false, threw: false, marked: false }
    let result: R
    try {
      result = await this.#attempt(client, event) as R
    } catch (error) {
      if (this.#broken !== undefined) throw endedErrors.has(error as object) ? error : this.#broken
      // Only what the failed event sent is to be undone; an event that sent nothing leaves the group as it is.
      if (event.used) await this.#regroup()
      throw error
    }
    this.#events.push(event)
    return result
  }

  /**
   * Commits the group: the done marks of its events and `COMMIT`, one round trip. Resolves the
   * events `run` resolved for that failed after all (run again after another event's failure, or a
   * late call on `context.db`), by fingerprint, with their errors; the others are committed.
   */
  async commit (): Promise<ReadonlyMap<string, unknown> | undefined> {
    if (this.#committing) return this.#failures
    this.#committing = true
    const client = this.#client
    if (client === undefined || this.#released) {
      if (this.#broken !== undefined) throw this.#broken
      return this.#failures
    }
    let destroy = false
    try {
      for (;;) {
        if (this.#broken !== undefined) throw this.#broken
        await this.#settleFlushes()
        // context.db used after its handlers settled, before this commit: a statement meant for that
        // event was refused, so its work is not what it intended. It fails; the others run again.
        const late = this.#events.filter((e) => e.clients.some((c) => c.late !== undefined))
        if (late.length > 0) {
          for (const e of late) this.#fail(e, e.clients.find((c) => c.late !== undefined)!.late, false)
          this.#events = this.#events.filter((e) => !late.includes(e))
          await this.#regroup()
          continue
        }
        const lost = await this.#commitGroup(client)
        if (lost === undefined) break
        // Claims that expired and were taken by another caller: theirs now (not released); the others run again.
        const error = new ReplayStoreError('complete', 'The claim on this event expired and another caller took it: its transaction was rolled back, the other one decides.')
        for (const e of this.#events) if (lost.has(e.claim.fingerprint)) this.#fail(e, error, false)
        this.#events = this.#events.filter((e) => !lost.has(e.claim.fingerprint))
        await this.#regroup()
      }
    } catch (err) {
      if (!this.#released) {
        try {
          await client.query({ text: 'ROLLBACK', query_timeout: this.timeout })
        } catch {
          destroy = true
        }
      }
      throw transactionError(err, undefined)
    } finally {
      this.#release(destroy)
    }
    if (this.#toRelease.length > 0) await this.store.release(this.#toRelease).catch(() => {})
    return this.#failures
  }

  /** The group's done marks and COMMIT; `undefined` once committed, or the claims that no longer hold (the transaction then rolled back). */
  async #commitGroup (client: PgPoolClientLike): Promise<Set<string> | undefined> {
    const events = this.#events
    // Nothing to commit: nothing to make durable (no fsync).
    if (events.length === 0) {
      await client.query({ text: 'ROLLBACK', query_timeout: this.timeout })
      return undefined
    }
    const claims = events.filter((e) => !e.marked).map((e) => e.claim)
    const text = claims.length === 0 ? 'COMMIT' : this.store.markAllThen(claims, this.#xid, 'COMMIT')
    try {
      let done: PgQueryResultLike & { command?: string }
      if (text !== undefined) {
        done = lastResult(await client.query({ text, query_timeout: this.timeout }) as PgQueryResultLike | PgQueryResultLike[])
      } else {
        const { text: markText, values } = this.store.markAll(claims, this.#xid)
        if ((await client.query({ text: markText, values, query_timeout: this.timeout })).rows.length !== claims.length) throw Object.assign(new Error('unmarked'), { code: UNMARKED })
        done = await client.query({ text: 'COMMIT', query_timeout: this.timeout })
      }
      // A transaction in error commits as a rollback, answered without an error: never take that for a commit.
      if (done.command !== undefined && done.command !== 'COMMIT') {
        throw new ReplayStoreError('complete', `PostgreSQL answered the delivery's COMMIT with ${String(done.command)}: nothing was committed.`)
      }
      return undefined
    } catch (err) {
      if ((err as { code?: string } | null)?.code !== UNMARKED) throw err
    }
    // Fewer marks than events: a claim was lost, or the transaction is not the store's any more.
    await client.query({ text: 'ROLLBACK', query_timeout: this.timeout })
    // On this client, outside any transaction (the pool may have no other client to give).
    const { text: heldText, values: heldValues } = this.store.held(claims)
    const held = new Set((await client.query({ text: heldText, values: heldValues, query_timeout: this.timeout })).rows.map((r) => r.fingerprint as string))
    const lost = new Set(claims.filter((c) => !held.has(c.fingerprint)).map((c) => c.fingerprint))
    if (lost.size === 0) {
      // Every claim holds, yet the marks missed: a handler ended the transaction and opened another past every check.
      throw new ReplayStoreError('complete', 'A handler ended the delivery\'s transaction past the checks of context.db and opened another: none of its events is acknowledged.')
    }
    return lost
  }

  /** Runs `event`'s handlers once on a guarded view of `client`; rejects when the event cannot join the group. */
  async #attempt (client: PgPoolClientLike, event: GroupEvent): Promise<unknown> {
    const { fingerprint } = event.claim
    event.threw = false
    const db = new HandlerClient(client, fingerprint, this.handlerTimeout, () => { this.#markBefore(client) })
    event.clients.push(db)
    let result: unknown
    try {
      result = await withDeadline(fingerprint, this.handlerTimeout, () => { db.close('timeout') }, async () => await event.work(db.client))
    } catch (error) {
      event.threw = true
      throw error
    } finally {
      db.close('settled')
      if (db.used) event.used = true
    }
    // The handler caught a refused COMMIT or ROLLBACK and went on, or a call of its came after it
    // settled: not the work it meant.
    const refused = db.refused ?? db.late
    if (refused !== undefined) throw refused
    await this.#settleFlushes()
    if (!db.used) return result
    // What the connection tells after every statement (node-postgres 8.21 and later): 'I' when a
    // handler ended the transaction past the check, 'E' when a statement failed and it went on.
    // node-postgres rejects a failed statement before the server's ready-for-query (which carries
    // the status) is read: wait for it.
    if (!await drained(client, this.timeout)) {
      throw new ReplayStoreError('complete', `A statement of the handlers of event ${fingerprint} was still running ${this.timeout} ms after they settled: the event's work was rolled back and not acknowledged.`)
    }
    const status = transactionStatus(client)
    if (status === 'I') {
      const error = endedError(fingerprint)
      endedErrors.add(error)
      this.#break(error)
      throw error
    }
    if (status === 'E') {
      throw new ReplayStoreError('complete', `A statement of the handlers of event ${fingerprint} failed and they went on: the event's work was rolled back and not acknowledged.`)
    }
    // Older node-postgres: the event's mark at once, which finds both in the same round trip.
    if (status === undefined) await this.#markNow(client, event)
    return result
  }

  /** Writes `event`'s done mark now (node-postgres without transaction status). */
  async #markNow (client: PgPoolClientLike, event: GroupEvent): Promise<void> {
    const { text, values } = this.store.markAll([event.claim], this.#xid)
    let rows: unknown[]
    try {
      rows = (await client.query({ text, values, query_timeout: this.timeout })).rows
    } catch (err) {
      // The transaction is in error (a statement of the handler failed and it went on), or a deadlock.
      throw transactionError(err, undefined)
    }
    if (rows.length === 1) { event.marked = true; return }
    try {
      await unmarked(event.claim.fingerprint, this.#xid, async (q, v) => await client.query({ text: q, values: v, query_timeout: this.timeout }))
    } catch (err) {
      if (err instanceof InboxTransactionError) {
        endedErrors.add(err)
        this.#break(err)
      }
      throw err
    }
  }

  /**
   * Before a statement the check cannot read (a Submittable: its text may change once read), the
   * done marks of the events already handled, queued on the connection ahead of it: should it end
   * the transaction, a COMMIT takes their marks with their effects, a ROLLBACK both.
   */
  #markBefore (client: PgPoolClientLike): void {
    const unmarkedEvents = this.#events.filter((e) => !e.marked)
    if (unmarkedEvents.length === 0) return
    for (const e of unmarkedEvents) e.marked = true
    const { text, values } = this.store.markAll(unmarkedEvents.map((e) => e.claim), this.#xid)
    this.#flushes.push(client.query({ text, values, query_timeout: this.timeout }).then((r) => {
      if (r.rows.length !== unmarkedEvents.length) this.#flushFailed ??= new Error('a claim no longer held when its done mark was written')
    }, (err: unknown) => { this.#flushFailed ??= err ?? new Error('the done marks failed') }))
  }

  async #settleFlushes (): Promise<void> {
    if (this.#flushes.length === 0) return
    const flushes = this.#flushes
    this.#flushes = []
    await Promise.all(flushes)
    if (this.#flushFailed !== undefined) {
      this.#break(this.#flushFailed)
      throw this.#broken!
    }
  }

  /**
   * After a failure: the group's transaction rolled back, and the handlers of the other events run
   * again, in order, in a new one (those that sent nothing on the connection lost nothing and are
   * not run again). One that fails now is left out and the rest run again, until all succeed.
   */
  async #regroup (): Promise<void> {
    this.#regrouped = true
    let others = this.#events
    for (;;) {
      this.#events = []
      if (!await this.#restart()) return
      let failedAt = -1
      for (let k = 0; k < others.length; k++) {
        const event = others[k]!
        event.marked = false
        if (!event.used) { this.#events.push(event); continue }
        try {
          await this.#attempt(this.#client!, event)
        } catch (error) {
          if (this.#broken !== undefined) return
          // Thrown by its handlers (or their deadline): its effects are gone, its claim is released for a retry.
          this.#fail(event, error, event.threw)
          failedAt = k
          break
        }
        this.#events.push(event)
      }
      if (failedAt === -1) return
      others = this.#events.concat(others.slice(failedAt + 1))
    }
  }

  /** `ROLLBACK` and a new `BEGIN` in one round trip; false (and the transaction given up) when that failed. */
  async #restart (): Promise<boolean> {
    try {
      const results = await this.#client!.query({ text: `ROLLBACK; ${BEGIN}`, query_timeout: this.timeout }) as unknown as PgQueryResultLike[]
      const begun = lastResult(results).rows[0] as { xid: string, pid: number } | undefined
      if (begun === undefined) throw new ReplayStoreError('transaction', 'PostgreSQL answered BEGIN without the transaction\'s id.')
      this.#xid = begun.xid
      return true
    } catch (err) {
      this.#break(err)
      return false
    }
  }

  #fail (event: GroupEvent, error: unknown, release: boolean): void {
    (this.#failures ??= new Map()).set(event.claim.fingerprint, error)
    if (release) this.#toRelease.push(event.claim)
  }

  async #open (): Promise<PgPoolClientLike> {
    try {
      await this.store.ready()
    } catch (err) {
      this.#broken = err instanceof ReplayStoreError ? err : new ReplayStoreError('transaction', 'The store\'s schema could not be created.', { cause: err })
      throw this.#broken
    }
    let client: PgPoolClientLike
    try {
      client = await checkOut(this.pool, this.timeout)
    } catch (err) {
      this.#broken = err as Error
      throw err
    }
    // As in runInTransaction: a checked-out client keeps an 'error' listener for good.
    listenForGood(client)
    client.on('error', this.#onError)
    this.#client = client
    try {
      const begun = lastResult(await client.query({ text: BEGIN, query_timeout: this.timeout })).rows[0] as { xid: string, pid: number } | undefined
      if (begun === undefined) throw new ReplayStoreError('transaction', 'PostgreSQL answered BEGIN without the transaction\'s id.')
      this.#xid = begun.xid
      this.#pid = begun.pid
    } catch (err) {
      this.#break(err)
      throw this.#broken!
    }
    return client
  }

  /**
   * The transaction cannot go on (the connection failed, a statement of a timed-out handler still
   * runs, a handler ended the transaction): the connection is destroyed at once, so the server
   * rolls back whatever is open, and its server process ended (a dropped connection does not stop
   * a running statement, whose locks would stay). Nothing of this transaction is acknowledged.
   */
  #break (err: unknown): void {
    this.#broken ??= new ReplayStoreError('transaction', 'The delivery\'s transaction could not go on and was rolled back: none of its events is acknowledged.', { cause: err })
    this.#release(true)
  }

  #release (destroy: boolean): void {
    if (this.#released) return
    this.#released = true
    const client = this.#client!
    client.removeListener('error', this.#onError)
    client.release(this.#lost ?? destroy)
    if (destroy && this.#pid !== undefined) {
      const timeout = this.timeout
      const pid = this.#pid
      guard('terminate', timeout, async () => await this.pool.query({ text: 'SELECT pg_terminate_backend($1)', values: [pid], query_timeout: timeout })).catch(() => {})
    }
  }
}

/**
 * Resolves true once the connection answered every statement sent on it (node-postgres sets
 * `readyForQuery` and emits 'drain' then), false if that took longer than `ms`.
 */
async function drained (client: PgPoolClientLike, ms: number): Promise<boolean> {
  const events = client as unknown as { readyForQuery?: unknown, on: (event: string, listener: () => void) => unknown, removeListener: (event: string, listener: () => void) => unknown }
  if (events.readyForQuery !== false) return true
  return await new Promise<boolean>((resolve) => {
    const done = (ok: boolean): void => { clearTimeout(timer); events.removeListener('drain', onDrain); resolve(ok) }
    const onDrain = (): void => { done(true) }
    const timer = setTimeout(() => { done(false) }, ms)
    events.on('drain', onDrain)
  })
}

/** The connection's transaction status after its last statement ('I' idle, 'T' in a transaction, 'E' in a failed one), where node-postgres tells it. */
function transactionStatus (client: PgPoolClientLike): string | undefined {
  const status = typeof client.getTransactionStatus === 'function' ? client.getTransactionStatus() : undefined
  return typeof status === 'string' ? status : undefined
}

/** `run()`, or a `HandlerTimeoutError` once `ms` passed (after calling `onTimeout`). */
async function withDeadline<R> (fingerprint: string, ms: number, onTimeout: () => void, run: () => Promise<R>): Promise<R> {
  return await new Promise<R>((resolve, reject) => {
    const timer = setTimeout(() => { onTimeout(); reject(timeoutError(fingerprint, ms)) }, ms)
    run().then((value) => { clearTimeout(timer); resolve(value) }, (err: unknown) => { clearTimeout(timer); reject(err) })
  })
}

/** The transactions `postgresSeenEvents({ transactional: true })` stands for: run by the store itself, on clients of this pool. */
const onPool = new WeakMap<object, PgPoolLike>()

/** What `runInTransaction` rejects with: the handler's own error as it is, the store's, or a `ReplayStoreError`. */
function transactionError (err: unknown, failed: { error: unknown } | undefined): unknown {
  if (failed !== undefined && err === failed.error) return err
  if (err instanceof ReplayStoreError || err instanceof InboxTransactionError) return err
  return new ReplayStoreError('complete', 'The transaction with the event\'s done mark failed; it was not acknowledged.', { cause: err })
}

/** What an event fails with when a handler ended the transaction the store opened. */
function endedError (fingerprint: string): InboxTransactionError {
  return new InboxTransactionError('transaction_ended', fingerprint,
    `A handler ended the transaction the inbox opened for event ${fingerprint} (a COMMIT, ROLLBACK or BEGIN on context.db): ` +
    'its effects may have committed, or rolled back, without the event\'s done mark. The event was neither marked done nor acknowledged, ' +
    'and its claim is left to expire before a retry runs it again. Leave the transaction to the inbox: throw to roll back, and use SAVEPOINT and ROLLBACK TO SAVEPOINT for nested work (docs/inbox.md).')
}

/** The done mark matched no row: the transaction the store opened is no longer the one open (a handler ended it), or the claim was lost. */
async function unmarked (fingerprint: string, xid: string, query: (text: string, values: unknown[]) => Promise<unknown>): Promise<never> {
  const same = firstRow(await query('SELECT txid_current()::text = $1 AS same', [xid]))?.same
  if (same === false) throw endedError(fingerprint)
  throw new ReplayStoreError('complete', 'The claim on this event expired and another caller took it: this transaction was rolled back, the other one decides.')
}

function timeoutError (fingerprint: string, ms: number): HandlerTimeoutError {
  return new HandlerTimeoutError(fingerprint,
    `The handlers of event ${fingerprint} ran past handlerTimeout (${ms} ms): their transaction was rolled back, its connection given back to the pool ` +
    'and the claim released; the delivery is answered 503 and retried. Make the handler finish sooner, or raise handlerTimeout.')
}

function rowCount (result: unknown): number {
  if (Array.isArray(result)) return result.length
  const rows = (result as { rows?: unknown } | null)?.rows
  return Array.isArray(rows) ? rows.length : -1
}

function firstRow (result: unknown): Record<string, unknown> | undefined {
  const rows = Array.isArray(result) ? result : (result as { rows?: unknown } | null)?.rows
  return Array.isArray(rows) ? rows[0] as Record<string, unknown> | undefined : undefined
}

/** The last statement's result of a multi-statement query (node-postgres answers an array of them). */
function lastResult (result: PgQueryResultLike | PgQueryResultLike[]): PgQueryResultLike {
  return Array.isArray(result) ? result[result.length - 1]! : result
}

/** Gives `client` an 'error' listener that stays (once per client). */
function listenForGood (client: PgPoolClientLike): void {
  if (listened.has(client)) return
  listened.add(client)
  client.on('error', () => {})
}

/** A client of `pool`, or a `ReplayStoreError` after `timeout` (a client that still arrives goes straight back). */
async function checkOut (pool: PgPoolLike, timeout: number): Promise<PgPoolClientLike> {
  const connecting = pool.connect()
  try {
    return await guard('transaction', timeout, async () => await connecting)
  } catch (err) {
    connecting.then((late) => { late.release() }, () => {})
    throw err
  }
}

/** The marker `transactional: true` passes for `transaction`: the store runs these itself (`#runOnPool`). */
function poolTransaction (pool: PgPoolLike, timeout: number): PostgresTransaction<PgPoolClientLike> {
  const transaction: PostgresTransaction<PgPoolClientLike> = {
    run: async () => { throw new TypeError('this transaction is run by the store it was made for') },
    query: async (tx, text, values) => await tx.query({ text, values, query_timeout: timeout }),
  }
  onPool.set(transaction, pool)
  return transaction
}

const OPEN = 0
const SETTLED = 1
const TIMED_OUT = 2

/**
 * What handlers get as `context.db` with `transactional: true`: the transaction's client, whose
 * `query` refuses statements that would end the transaction (or open another), and refuses
 * everything once the handlers settled or ran past their deadline (the client then belongs to
 * the pool again, maybe to another event's transaction). Everything else is the client itself.
 */
class HandlerClient {
  readonly client: PgPoolClientLike
  /** The first statement refused for ending the transaction. */
  refused: InboxTransactionError | undefined
  /** The first call refused for coming after the handlers. */
  late: InboxTransactionError | undefined
  /** Whether a handler sent anything on the connection (an event that did not has nothing to undo or release). */
  used = false
  #state = OPEN

  /** `beforeUnchecked`: called just before a statement whose text the check cannot trust (a Submittable) goes to the connection. */
  constructor (target: PgPoolClientLike, readonly fingerprint: string, readonly handlerTimeout: number, beforeUnchecked?: () => void) {
    const query = (...args: unknown[]): unknown => {
      const config = args[0]
      let error: InboxTransactionError | undefined
      if (this.#state !== OPEN) {
        error = this.#lateError()
        this.late ??= error
      } else {
        const text = typeof config === 'string' ? config : typeof config === 'object' && config !== null ? (config as { text?: unknown }).text : undefined
        const control = typeof text === 'string' ? transactionControl(text) : undefined
        if (control !== undefined) {
          error = refusedError(fingerprint, control)
          this.refused ??= error
        }
      }
      if (error === undefined) {
        this.used = true
        if (beforeUnchecked !== undefined && typeof config === 'object' && config !== null && typeof (config as { submit?: unknown }).submit === 'function') beforeUnchecked()
        return (target.query as (...a: unknown[]) => unknown).apply(target, args)
      }
      return refuse(error, args)
    }
    const release = (): never => {
      throw new TypeError(`context.db.release(): the inbox releases the client of event ${fingerprint} itself, after the commit or the rollback. Do not release it in a handler.`)
    }
    this.client = new Proxy(target, {
      get: (t, prop) => prop === 'query' ? query : prop === 'release' ? release : Reflect.get(t, prop),
    })
  }

  get timedOut (): boolean { return this.#state === TIMED_OUT }

  close (how: 'settled' | 'timeout'): void {
    if (this.#state === OPEN) this.#state = how === 'timeout' ? TIMED_OUT : SETTLED
  }

  #lateError (): InboxTransactionError {
    const what = this.#state === TIMED_OUT
      ? `after the handler deadline (handlerTimeout, ${this.handlerTimeout} ms) passed: its transaction was rolled back`
      : 'after the event\'s handlers settled'
    return new InboxTransactionError('used_after_handler', this.fingerprint,
      `context.db of event ${this.fingerprint} was used ${what} and its connection has moved on (to the next event of the delivery, or back to the pool, where it may hold another event's transaction). ` +
      'The call was refused. Await every query before the handler returns.')
  }
}

function refusedError (fingerprint: string, command: string): InboxTransactionError {
  return new InboxTransactionError('transaction_ended', fingerprint,
    `context.db refused ${command} in the handler of event ${fingerprint}: the inbox owns this transaction (BEGIN, your statements, the event's done mark, COMMIT), ` +
    'and ending it or opening another would part your effects from the done mark. Throw from the handler to roll back; ' +
    'use SAVEPOINT, RELEASE SAVEPOINT and ROLLBACK TO SAVEPOINT for nested work (docs/inbox.md). The event fails and is not acknowledged.')
}

/** Refuses a `query` call the way it was made: a callback gets the error, a Submittable throws, else a rejected promise. */
function refuse (error: Error, args: unknown[]): unknown {
  const config = args[0] as { submit?: unknown, callback?: unknown } | null
  const callback = typeof args[1] === 'function' ? args[1] : typeof args[2] === 'function' ? args[2] : typeof config === 'object' && config !== null && typeof config.callback === 'function' ? config.callback : undefined
  if (callback !== undefined) {
    queueMicrotask(() => { (callback as (err: Error) => void)(error) })
    return undefined
  }
  if (typeof config === 'object' && config !== null && typeof config.submit === 'function') throw error
  return Promise.reject(error)
}

async function guard<R> (operation: string, timeoutMs: number, call: () => Promise<R>): Promise<R> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const pending = Promise.resolve().then(call)
  pending.catch(() => {})
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => { reject(new ReplayStoreError(operation, `PostgreSQL did not answer ${operation} within ${timeoutMs} ms.`)) }, timeoutMs)
  })
  try {
    return await Promise.race([pending, late])
  } catch (err) {
    if (err instanceof ReplayStoreError) throw err
    throw new ReplayStoreError(operation, `PostgreSQL failed to ${operation}: ${errorText(err)}`, { cause: err })
  } finally {
    clearTimeout(timer)
  }
}

/** The driver's message (a connection or SQL error; never contains query values), bounded. */
function errorText (err: unknown): string {
  const message = err instanceof Error ? err.message : String(err)
  return message.length > 200 ? message.slice(0, 200) + '…' : message
}

/**
 * A PostgreSQL seen-events store for `WebhookEventRouter`. With `transactional: true`, the
 * router runs each event's handlers in a transaction on your pool, hands them its client as
 * `context.db`, and writes the event's done mark in that transaction: the effects and the mark
 * commit together, or neither does. With `transaction`, the same on your own library's
 * transaction (Kysely, Drizzle, Prisma: docs/inbox.md).
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { WebhookEventRouter } from 'mailchannels-webhooks'
 * import { postgresSeenEvents } from 'mailchannels-webhooks/postgres'
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * const router = new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool, transactional: true }) })
 *   .on('hard-bounced', async (event, { db }) => {
 *     await db.query('INSERT INTO suppressions (email, reason) VALUES ($1, $2) ON CONFLICT DO NOTHING', [event.email, event.status])
 *   })
 * ```
 */
export function postgresSeenEvents<P extends PgPoolLike> (options: PostgresSeenEventsOptions<P> & { transactional: true }): TransactionalPostgresSeenEventsStore<PgTransactionClient<P>>
export function postgresSeenEvents<T> (options: PostgresSeenEventsOptions & { transaction: PostgresTransaction<T> }): TransactionalPostgresSeenEventsStore<T>
export function postgresSeenEvents (options: PostgresSeenEventsOptions & { transactional?: false }): PostgresSeenEventsStore
export function postgresSeenEvents (options: PostgresSeenEventsOptions & { transactional?: boolean, transaction?: PostgresTransaction<unknown> }): PostgresSeenEventsStore {
  if (options === null || typeof options !== 'object') throw new TypeError('postgresSeenEvents options must be an object with a pool')
  const { transactional = false, transaction } = options
  if (typeof transactional !== 'boolean') throw new TypeError('transactional must be true or false')
  if (transactional && transaction !== undefined) throw new TypeError('give transactional: true (a transaction on the node-postgres pool) or transaction (your own library\'s), not both')
  if (transaction !== undefined) return new TransactionalPostgresSeenEventsStore(options, transaction)
  if (transactional) return new TransactionalPostgresSeenEventsStore(options, poolTransaction(options.pool, options.timeout ?? 5000))
  return new PostgresSeenEventsStore(options)
}

// Dead letters, in a file of their own (./dead-letters.ts).
export { postgresDeadLetters, postgresDeadLettersSchema, PostgresDeadLetterStore } from './dead-letters.js'
export type { PostgresDeadLettersOptions, PgQueryableLike } from './dead-letters.js'
