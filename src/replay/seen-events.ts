import { base64url } from '#crypto'
import type { WebhookEvent } from '../events/types.js'
import { eventFingerprint } from './fingerprint.js'
import { FingerprintTable } from './fingerprint-table.js'
import { checkTtl } from './ttl.js'
import { KeyOperation, assertConnected, checkClient, checkPrefix, checkReplicaWait, checkTimeout, guarded, isSingleRedis, runMultiKey, runScript, type RedisClientLike, type RedisStoreOptions, type ReplicaWait } from './redis-client.js'
import { ReplayStoreError } from './errors.js'

/** Three days: at least the horizon over which a delivery can be resent. */
const DEFAULT_TTL = 3 * 24 * 60 * 60

/** A claim on one event, held while its handler runs: `complete` or `release` it with this token. */
export interface EventClaim {
  /** The event's `eventFingerprint`. */
  readonly fingerprint: string
  /** This claim's own random token: only its holder can release or extend it. */
  readonly token: string
}

/**
 * Where one event stands after `claim`: an `EventClaim` (it is ours to handle now),
 * `'processing'` (another caller holds a live claim on it) or `'done'` (it was handled).
 */
export type EventClaimResult = EventClaim | 'processing' | 'done'

/**
 * Remembers event fingerprints (`eventFingerprint`) that a handler already processed, so it
 * can skip the events of a re-signed resend, which the replay store cannot recognise.
 * Every method takes a batch (about one round trip for Redis).
 *
 * Exactly-once dispatch uses `claim` / `complete` / `release` / `extend`: a claim is a token
 * with a short lifetime, kept alive while the handler runs; `complete` writes a separate done
 * mark, remembered for the store's `ttl`. A claim whose holder died simply expires, so an
 * orphaned or late claim can delay an event, never make it look handled.
 */
export interface SeenEventsStore {
  /** For each fingerprint, whether it is marked done. */
  has (fingerprints: readonly string[]): Promise<boolean[]>
  /** Marks fingerprints done; for each, `true` if this call marked it (atomic: of concurrent callers exactly one gets `true`; a live claim counts as taken). */
  add (fingerprints: readonly string[]): Promise<boolean[]>
  /** Forgets fingerprints (done marks and claims alike). */
  delete (fingerprints: readonly string[]): Promise<void>
  /**
   * Claims each fingerprint for `lifetimeSeconds`, atomically per fingerprint: of concurrent
   * callers at most one gets an `EventClaim`. A done fingerprint answers `'done'`, a live claim
   * of someone else `'processing'`. Rejects (never resolves wrongly) when the store cannot answer.
   */
  claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<EventClaimResult[]>
  /** Writes the done mark of each claimed event (remembered for the store's `ttl`), and drops the claim. */
  complete (claims: readonly EventClaim[]): Promise<void>
  /** Gives up these claims (only where the token still holds), so the next attempt handles the events. */
  release (claims: readonly EventClaim[]): Promise<void>
  /** Keeps these claims alive for another `lifetimeSeconds` (only where the token still holds), while their handlers run. */
  extend (claims: readonly EventClaim[], lifetimeSeconds: number): Promise<void>
}

/**
 * A seen-events store that keeps its done marks in your application's own database, so it can
 * write an event's done mark in the same transaction as the event's effects: both commit, or
 * neither does. `WebhookEventRouter` then runs each claimed event's handlers inside
 * `runInTransaction` and hands them the transaction as `context.db` (`T`).
 */
export interface TransactionalSeenEventsStore<T> extends SeenEventsStore {
  /**
   * Opens a transaction, runs `work` in it, then writes `claim`'s done mark in that same
   * transaction and commits. Rolls back and rejects with `work`'s own error when `work` rejects,
   * and with a `ReplayStoreError` when the claim no longer holds (it expired and another caller
   * took the event: that caller's transaction decides) or the database failed.
   */
  runInTransaction<R> (claim: EventClaim, work: (tx: T) => Promise<R>): Promise<R>
}

/** Whether `store` can run handlers in a transaction of its own database (`TransactionalSeenEventsStore`). */
export function isTransactionalStore (store: SeenEventsStore): store is TransactionalSeenEventsStore<unknown> {
  return typeof (store as Partial<TransactionalSeenEventsStore<unknown>>).runInTransaction === 'function'
}

export interface SeenEventsStoreOptions {
  /**
   * How long a fingerprint is remembered, in seconds: at least the resend horizon.
   * @default 259200 (seconds: 3 days)
   */
  ttl?: number
}

export interface MemorySeenEventsStoreOptions extends SeenEventsStoreOptions {
  /**
   * Most fingerprints remembered (done marks and live claims); when full, the oldest written is forgotten first.
   * @default 1000000
   */
  max?: number
}

/**
 * Claim tokens for a batch (runtime-neutral): one random 96-bit base per batch, numbered, so a
 * token is unguessable and unique without a random draw per event.
 */
export function claimTokens (count: number): (i: number) => string {
  const base = base64url(crypto.getRandomValues(new Uint8Array(12)))
  return (i) => count === 1 ? base : `${base}.${i.toString(36)}`
}

/**
 * A live claim in `MemorySeenEventsStore`: its token and when it expires (ms since the store was made).
 * The router's synchronous path shares one among all the events of a delivery (their
 * fingerprint and this token tell its claims apart), so a delivery allocates none per event.
 */
class HeldClaim {
  /** Its place in the store's table of claims while records point at it (`refs` of them), else -1. */
  index = -1
  refs = 0
  constructor (readonly token: string, public expires: number) {}
}

/**
 * `MemorySeenEventsStore`'s own methods, answering at once: `WebhookEventRouter` calls these
 * instead of the promise-returning ones (no promise, no claim object per event). Same
 * semantics, same errors (thrown).
 */
export interface SynchronousSeenEvents {
  /**
   * Claims `fingerprints` under one claim; `results[k]` becomes `CLAIMED`, `PROCESSING`, `DONE`
   * or `REPEATED` (the fingerprint came earlier in this same call). Returns the claim, which
   * `complete`, `release` and `extend` take.
   */
  claim (fingerprints: readonly string[], lifetimeSeconds: number, results: Uint8Array): object
  /** Writes the done marks of these fingerprints (whatever held them). */
  complete (fingerprints: readonly string[]): void
  /** Drops these fingerprints where `claim` still holds them. */
  release (claim: object, fingerprints: readonly string[]): void
  /** Keeps every fingerprint `claim` still holds alive for another `lifetimeSeconds`. */
  extend (claim: object, lifetimeSeconds: number): void
}
export const CLAIMED = 0
export const PROCESSING = 1
export const DONE = 2
export const REPEATED = 3

let synchronousOf: (store: MemorySeenEventsStore) => SynchronousSeenEvents

/**
 * A bounded, one-process seen-events store: a table of fixed-size records (`FingerprintTable`,
 * typed arrays), each a fingerprint's 256 bits and its done mark (the time it expires) or live
 * claim. Expired entries are dropped when read; when full, the oldest written is forgotten
 * first. No timer.
 */
export class MemorySeenEventsStore implements SeenEventsStore {
  /**
   * Fingerprint -> its record's value: a done mark's expiry (`#doneUntil`, > 0) or a live claim,
   * `-1 - index` in `#claims`. Write order is kept as a `Map`'s insertion order would be: a
   * fingerprint written again while remembered keeps its place.
   */
  readonly #table: FingerprintTable
  /**
   * The claims records point at; a slot is freed (`#freeClaims`) when no record does. Slot 0 holds
   * a claim no record points at: with no claim left in the table (every delivery done), V8
   * discarded the store's optimised code at each full GC (`--trace-deopt`: "weak objects") and
   * compiled it again on the next delivery.
   */
  readonly #claims: Array<HeldClaim | undefined> = [new HeldClaim('', 0)]
  readonly #freeClaims: number[] = []
  /**
   * The fingerprints of the latest claim call, and where each one it claimed was written
   * (`FingerprintTable.recordIsAt`): the done marks of a delivery come next, in the same order,
   * and find their records there instead of decoding and looking each up again.
   */
  #recent: readonly string[] = []
  #recentAt = new Int32Array(0)
  #recentWrites = new Float64Array(0)
  #recentLayout = -1
  readonly #max: number
  /** The store's `ttl` in tenths of a second. */
  readonly #ttlDs: number
  /** `Date.now()` when the store was made: times are kept relative to it. */
  readonly #epoch = Date.now()
  // A claim token only has to be unique among this store's claims (it never leaves the process):
  // a counter does it, with no random draw per claim (OpenSSL's generator contends with the
  // thread-pool verifies). The store's own random base keeps two stores' tokens apart.
  readonly #tokenBase = base64url(crypto.getRandomValues(new Uint8Array(9))) + '.'
  #tokenCount = 0
  readonly #synchronous: SynchronousSeenEvents

  static {
    synchronousOf = (store) => store.#synchronous
  }

  constructor (options: MemorySeenEventsStoreOptions = {}) {
    const max = options.max ?? 1_000_000
    if (!Number.isSafeInteger(max) || max < 1) throw new TypeError('max must be a positive integer')
    const ttl = options.ttl ?? DEFAULT_TTL
    checkTtl(ttl, 'ttl')
    this.#max = max
    this.#ttlDs = ttl * 10
    this.#table = new FingerprintTable(max)
    this.#synchronous = {
      claim: (fingerprints, lifetimeSeconds, results) => {
        checkTtl(lifetimeSeconds, 'lifetimeSeconds')
        const now = this.#now()
        const held = new HeldClaim(this.#nextToken(), now + lifetimeSeconds * 1000)
        this.#remember(fingerprints)
        for (let i = 0; i < fingerprints.length; i++) if ((results[i] = this.#claimOne(fingerprints[i]!, held, now)) === CLAIMED) this.#claimedAt(i)
        this.#trim()
        return held
      },
      complete: (fingerprints) => { this.#markDone(fingerprints, (k) => fingerprints[k]!) },
      release: (claim, fingerprints) => {
        const table = this.#table
        for (let i = 0; i < fingerprints.length; i++) {
          const slot = table.locate(fingerprints[i]!)
          if (slot >= 0 && this.#claimOf(table.value(slot)) === claim) this.#forget(slot)
        }
      },
      extend: (claim, lifetimeSeconds) => {
        checkTtl(lifetimeSeconds, 'lifetimeSeconds')
        // Every record still pointing at this claim is still held by it (complete and release replace or drop it).
        ;(claim as HeldClaim).expires = this.#now() + lifetimeSeconds * 1000
      },
    }
  }

  /** Fingerprints currently remembered (done marks and live claims; expired ones count until read or forgotten). */
  get size (): number { return this.#table.size }

  // Each method runs synchronously to completion, so every step is atomic within the process.
  async has (fingerprints: readonly string[]): Promise<boolean[]> {
    const now = this.#now()
    return fingerprints.map((fp) => { const slot = this.#live(fp, now); return slot >= 0 && this.#table.value(slot) > 0 })
  }

  async add (fingerprints: readonly string[]): Promise<boolean[]> {
    const now = this.#now()
    const out = fingerprints.map((fp) => {
      const slot = this.#live(fp, now)
      if (slot >= 0) return false
      this.#table.insert(slot, this.#doneUntil(now))
      return true
    })
    this.#trim()
    return out
  }

  async delete (fingerprints: readonly string[]): Promise<void> {
    for (const fp of fingerprints) {
      const slot = this.#table.locate(fp)
      if (slot >= 0) this.#forget(slot)
    }
  }

  async claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<EventClaimResult[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    const now = this.#now()
    const expires = now + lifetimeSeconds * 1000
    const results: EventClaimResult[] = new Array(fingerprints.length)
    this.#remember(fingerprints)
    for (let i = 0; i < fingerprints.length; i++) {
      const fingerprint = fingerprints[i]!
      // Each claim of this API has its own token (callers may hold and release them one by one).
      const held = new HeldClaim(this.#nextToken(), expires)
      const state = this.#claimOne(fingerprint, held, now)
      if (state === CLAIMED) this.#claimedAt(i)
      results[i] = state === CLAIMED ? { fingerprint, token: held.token } : state === DONE ? 'done' : 'processing'
    }
    this.#trim()
    return results
  }

  async complete (claims: readonly EventClaim[]): Promise<void> {
    this.#markDone(claims, (k) => claims[k]!.fingerprint)
  }

  async release (claims: readonly EventClaim[]): Promise<void> {
    const now = this.#now()
    for (const c of claims) {
      const slot = this.#table.locate(c.fingerprint)
      if (slot < 0) continue
      const held = this.#claimOf(this.#table.value(slot))
      if (held !== undefined && held.token === c.token && held.expires > now) this.#forget(slot)
    }
  }

  async extend (claims: readonly EventClaim[], lifetimeSeconds: number): Promise<void> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    const expires = this.#now() + lifetimeSeconds * 1000
    for (const c of claims) {
      const slot = this.#table.locate(c.fingerprint)
      if (slot < 0) continue
      const held = this.#claimOf(this.#table.value(slot))
      if (held !== undefined && held.token === c.token) held.expires = expires
    }
  }

  /** Milliseconds since the store was made. */
  #now (): number {
    return Date.now() - this.#epoch
  }

  /** A done mark written at `now`: when it expires, in tenths of a second since the store was made (rounded up, so it lives at least `ttl`). */
  #doneUntil (now: number): number {
    return Math.ceil(now / 100) + this.#ttlDs
  }

  #nextToken (): string {
    return this.#tokenBase + (this.#tokenCount++).toString(36)
  }

  /** The claim a record's value points at, if it is one. */
  #claimOf (value: number): HeldClaim | undefined {
    return value < 0 ? this.#claims[-1 - value] : undefined
  }

  /** The record value of one more record held by `held`. */
  #refer (held: HeldClaim): number {
    if (held.refs++ === 0) {
      held.index = this.#freeClaims.pop() ?? this.#claims.length
      this.#claims[held.index] = held
    }
    return -1 - held.index
  }

  /** A record stops holding `value` (a claim: one reference fewer). */
  #unrefer (value: number): void {
    if (value > 0) return
    const held = this.#claims[-1 - value]!
    if (--held.refs === 0) {
      this.#claims[held.index] = undefined
      this.#freeClaims.push(held.index)
      held.index = -1
    }
  }

  #forget (slot: number): void {
    this.#unrefer(this.#table.value(slot))
    this.#table.remove(slot)
  }

  /** `fp`'s slot unless it is not remembered or expired (an expired one is dropped): then, negative, where it would go (`FingerprintTable.locate`). */
  #live (fp: string, now: number): number {
    const table = this.#table
    const slot = table.locate(fp)
    if (slot < 0 || this.#expiry(table.value(slot)) > now) return slot
    this.#forget(slot)
    // The table shifted records back into the gap: look again for where `fp` goes.
    return table.locate(fp)
  }

  /** When a record's value expires, in ms since the store was made (a done mark is kept in tenths of a second). */
  #expiry (value: number): number {
    return value > 0 ? value * 100 : this.#claims[-1 - value]!.expires
  }

  #claimOne (fp: string, held: HeldClaim, now: number): number {
    const table = this.#table
    const slot = table.locate(fp)
    if (slot >= 0) {
      const value = table.value(slot)
      if (this.#expiry(value) > now) return value > 0 ? DONE : this.#claims[-1 - value] === held ? REPEATED : PROCESSING
      // Expired: written anew (as if forgotten, then claimed), so it is now the newest.
      this.#unrefer(value)
      table.setValue(slot, this.#refer(held))
      table.touch(slot)
      return CLAIMED
    }
    table.insert(slot, this.#refer(held))
    return CLAIMED
  }

  /** Starts remembering where a claim call writes `fingerprints` (`#claimedAt`). */
  #remember (fingerprints: readonly string[]): void {
    // A copy: the caller may change its array before the done marks.
    this.#recent = fingerprints.slice()
    if (this.#recentAt.length < fingerprints.length) {
      this.#recentAt = new Int32Array(fingerprints.length)
      this.#recentWrites = new Float64Array(fingerprints.length)
    }
    this.#recentAt.fill(-1, 0, fingerprints.length)
    this.#recentLayout = this.#table.layout
  }

  /** `#recent[i]` was just claimed: its record is the table's newest. */
  #claimedAt (i: number): void {
    const table = this.#table
    // A claim that grew or rebuilt the table moved the records remembered before it.
    if (table.layout !== this.#recentLayout) { this.#recentAt.fill(-1, 0, i); this.#recentLayout = table.layout }
    this.#recentAt[i] = table.newest
    this.#recentWrites[i] = table.writes
  }

  #markDone<C> (items: readonly C[], fingerprintOf: (k: number) => string): void {
    const table = this.#table
    const until = this.#doneUntil(this.#now())
    const recent = this.#recent
    let next = 0
    for (let k = 0; k < items.length; k++) {
      const fp = fingerprintOf(k)
      // Done marks follow their claim, in order, perhaps with gaps (released events): look a few ahead.
      let i = next
      const stop = Math.min(recent.length, next + 8)
      while (i < stop && recent[i] !== fp) i++
      if (i < stop) {
        next = i + 1
        const at = this.#recentAt[i]!
        if (at >= 0 && table.recordIsAt(at, this.#recentWrites[i]!, this.#recentLayout)) {
          this.#unrefer(table.valueAt(at))
          table.setValueAt(at, until)
          continue
        }
      }
      const slot = table.locate(fp)
      if (slot < 0) {
        table.insert(slot, until)
      } else {
        // Overwritten in place: it keeps its place in write order.
        this.#unrefer(table.value(slot))
        table.setValue(slot, until)
      }
    }
    this.#trim()
  }

  /** Forgets the oldest written records beyond `max`. */
  #trim (): void {
    const table = this.#table
    while (table.size > this.#max) this.#forget(table.oldest())
  }
}

const { claim: ownClaim, complete: ownComplete, release: ownRelease, extend: ownExtend } = MemorySeenEventsStore.prototype

/**
 * The synchronous methods of a `MemorySeenEventsStore` whose claim methods are its own (not
 * overridden by a subclass or replaced on the instance, such as a test's spy); null for any
 * other store, which is then called through its promises.
 */
export function synchronousSeenEvents (store: SeenEventsStore): SynchronousSeenEvents | null {
  if (!(store instanceof MemorySeenEventsStore) || store.claim !== ownClaim || store.complete !== ownComplete || store.release !== ownRelease || store.extend !== ownExtend) return null
  return synchronousOf(store)
}

export interface RedisSeenEventsStoreOptions extends SeenEventsStoreOptions, RedisStoreOptions {
  /**
   * Key prefix.
   * @default 'mailchannels-webhooks:seen:'
   */
  prefix?: string
}

// Layout: one key per fingerprint (a Redis Cluster routes each command by its one key).
// Its value is the done mark '1' (the only value the first version wrote), or a claim
// 'c:<token>' with a short PX lifetime. A claim is never a done mark, so a claim that runs
// late (offline queue, timeout) can delay an event by its lifetime, never make it look done.
const CLAIM_PREFIX = 'c:'

// Each operation is one function of one key, run as a one-key script (a Cluster) or over a
// whole batch in one multi-key script (a single Redis): the same logic per key either way.

// Claims the key unless it holds anything (a done mark or a live claim).
const CLAIM = new KeyOperation(`local function op (key, lifetime, token)
  local v = redis.call('GET', key)
  if not v then
    redis.call('SET', key, token, 'PX', lifetime)
    return 'claimed'
  end
  if string.sub(v, 1, 2) == 'c:' then return 'processing' end
  return 'done'
end`, 1, 1)

// The done mark, whatever the key held (a claim that expired meanwhile is done all the same).
const MARK = new KeyOperation(`local function op (key, ttl)
  return redis.call('SET', key, '1', 'EX', ttl)
end`, 1, 0)

// SET NX EX: 1 where this call marked the key (a live claim counts as taken).
const ADD = new KeyOperation(`local function op (key, ttl)
  if redis.call('SET', key, '1', 'NX', 'EX', ttl) then return 1 end
  return 0
end`, 1, 0)

// Compare-and-delete: only this token's claim.
const RELEASE = new KeyOperation(`local function op (key, token)
  if redis.call('GET', key) == token then return redis.call('DEL', key) end
  return 0
end`, 0, 1)

// Compare-and-expire: only this token's claim.
const EXTEND = new KeyOperation(`local function op (key, lifetime, token)
  if redis.call('GET', key) == token then return redis.call('PEXPIRE', key, lifetime) end
  return 0
end`, 1, 1)

/**
 * A seen-events store shared by every instance, on one Redis or a Redis Cluster, one key per
 * fingerprint. On an ioredis `Redis` a batch is one multi-key command (one round trip). On a
 * `Cluster` (or a client of unknown kind) it is one key per command (so no command spans
 * cluster slots), the commands sent in one pipeline per node: about one round trip per node. Pass
 * your own ioredis `Redis` or `Cluster`, configured to fail fast as for `RedisReplayStore`.
 * With replicas, `waitForReplicas` keeps claims and done marks across a failover.
 * Failures reject with `ReplayStoreError`.
 */
export class RedisSeenEventsStore implements SeenEventsStore {
  readonly #client: RedisClientLike
  readonly #prefix: string
  readonly #ttl: number
  readonly #timeout: number
  readonly #wait: ReplicaWait | null
  /** A single Redis: a batch is one multi-key command. */
  readonly #multiKey: boolean

  constructor (client: RedisClientLike, options: RedisSeenEventsStoreOptions = {}) {
    checkClient(client, 'RedisSeenEventsStore')
    this.#client = client
    this.#prefix = checkPrefix(options.prefix ?? 'mailchannels-webhooks:seen:')
    this.#ttl = options.ttl ?? DEFAULT_TTL
    checkTtl(this.#ttl, 'ttl')
    this.#timeout = checkTimeout(options.timeout)
    this.#wait = checkReplicaWait(client, options, this.#timeout)
    this.#multiKey = isSingleRedis(client)
  }

  async has (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    const keys = fingerprints.map((fp) => this.#prefix + fp)
    const client = this.#client
    const replies: unknown = await guarded('has', this.#timeout, async () => this.#multiKey && typeof client.mget === 'function'
      ? await client.mget(...keys)
      : await Promise.all(keys.map(async (key) => await client.get(key))))
    if (!Array.isArray(replies) || replies.length !== keys.length) throw new ReplayStoreError('has', 'Redis answered has with an unexpected reply.')
    return replies.map((v) => {
      if (v !== null && typeof v !== 'string') throw new ReplayStoreError('has', 'Redis answered has with an unexpected reply.')
      return v !== null && !v.startsWith(CLAIM_PREFIX)
    })
  }

  async add (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    // Not queued while disconnected: a late add would mark events seen that were never processed.
    assertConnected(this.#client, 'add')
    const replies = await this.#each('add', ADD, fingerprints, [this.#ttl], noArgs, true)
    return replies.map((v) => {
      if (v !== 0 && v !== 1) throw new ReplayStoreError('add', 'Redis answered add with an unexpected reply.')
      return v === 1
    })
  }

  async delete (fingerprints: readonly string[]): Promise<void> {
    if (fingerprints.length === 0) return
    const keys = fingerprints.map((fp) => this.#prefix + fp)
    await guarded('delete', this.#timeout, async () => this.#multiKey
      ? await this.#client.del(...keys)
      : await Promise.all(keys.map(async (key) => await this.#client.del(key))))
  }

  async claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<EventClaimResult[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (fingerprints.length === 0) return []
    // Not queued while disconnected; one that still runs late holds the event for its lifetime at most.
    assertConnected(this.#client, 'claim')
    const tokenOf = claimTokens(fingerprints.length)
    const mine: EventClaim[] = fingerprints.map((fingerprint, i) => ({ fingerprint, token: tokenOf(i) }))
    let replies: unknown[]
    try {
      replies = await this.#each('claim', CLAIM, fingerprints, [lifetimeSeconds * 1000], (i) => [CLAIM_PREFIX + mine[i]!.token], true)
    } catch (err) {
      // Some claims may have been taken (or may still be): give them back, best effort.
      this.#releaseQuietly(mine)
      throw err
    }
    if (!replies.every((v) => v === 'claimed' || v === 'processing' || v === 'done')) {
      this.#releaseQuietly(mine)
      throw new ReplayStoreError('claim', 'Redis answered claim with an unexpected reply.')
    }
    return replies.map((v, i) => v === 'claimed' ? mine[i]! : v as 'processing' | 'done')
  }

  async complete (claims: readonly EventClaim[]): Promise<void> {
    if (claims.length === 0) return
    const replies = await this.#each('complete', MARK, claims.map((c) => c.fingerprint), [this.#ttl], noArgs, true)
    if (!replies.every(isOk)) throw new ReplayStoreError('complete', 'Redis answered complete with an unexpected reply.')
  }

  async release (claims: readonly EventClaim[]): Promise<void> {
    if (claims.length === 0) return
    await this.#each('release', RELEASE, claims.map((c) => c.fingerprint), [], (i) => [CLAIM_PREFIX + claims[i]!.token], false)
  }

  async extend (claims: readonly EventClaim[], lifetimeSeconds: number): Promise<void> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (claims.length === 0) return
    // Not waited for: a lost extension leaves the replicated claim with most of its lifetime, renewed again soon.
    await this.#each('extend', EXTEND, claims.map((c) => c.fingerprint), [lifetimeSeconds * 1000], (i) => [CLAIM_PREFIX + claims[i]!.token], false)
  }

  /**
   * Runs `op` for every fingerprint: one multi-key script on a single Redis, else one one-key
   * script per fingerprint, all sent in the same tick. A `durable` write also waits for
   * `waitForReplicas` replicas.
   */
  async #each (operation: string, op: KeyOperation, fingerprints: readonly string[], shared: Array<string | number>, own: (i: number) => Array<string | number>, durable: boolean): Promise<unknown[]> {
    // Once the caller gave up, a NOSCRIPT is not retried with EVAL, so nothing runs late.
    let abandoned = false
    const keys = fingerprints.map((fp) => this.#prefix + fp)
    const wait = durable ? this.#wait : null
    const run = this.#multiKey
      ? async () => await runMultiKey(this.#client, operation, op, keys, shared, own, wait, () => abandoned)
      : async () => await runScript(this.#client, operation, op.perKey, keys, (i) => [...shared, ...own(i)], wait, () => abandoned)
    try {
      return await guarded(operation, this.#timeout, run, () => { abandoned = true })
    } catch (err) {
      abandoned = true
      throw err
    }
  }

  #releaseQuietly (claims: EventClaim[]): void {
    this.release(claims).catch(() => {})
  }
}

const noArgs = (): [] => []

function isOk (reply: unknown): boolean {
  return reply === 'OK' || (typeof reply === 'object' && reply !== null && (reply as { ok?: unknown }).ok === 'OK')
}

/** The events whose fingerprints `store` has not seen (order kept). Read-only: call `markSeen` once they are processed. */
export async function filterUnseen<E extends WebhookEvent> (events: readonly E[], store: SeenEventsStore): Promise<E[]> {
  const seen = await store.has(events.map(eventFingerprint))
  return events.filter((_event, i) => seen[i] !== true)
}

/** Records events as processed, so a resend's copies are skipped by `filterUnseen`. */
export async function markSeen (events: readonly WebhookEvent[], store: SeenEventsStore): Promise<void> {
  await store.add(events.map(eventFingerprint))
}

/**
 * Atomically claims the events no other caller has claimed and returns them (order kept):
 * safe when two resends of the same events are handled at once. If processing then fails,
 * `store.delete(claimed.map(eventFingerprint))` gives them back so the next resend handles them.
 */
export async function claimUnseen<E extends WebhookEvent> (events: readonly E[], store: SeenEventsStore): Promise<E[]> {
  const fresh = await store.add(events.map(eventFingerprint))
  return events.filter((_event, i) => fresh[i] === true)
}
