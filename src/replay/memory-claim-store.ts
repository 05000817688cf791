import { base64url } from '#crypto'
import { FingerprintTable } from './fingerprint-table.js'
import { checkTtl } from './ttl.js'
import { DEFAULT_CLAIM_TTL, type StoreClaim, type StoreClaimResult, type ClaimStore, type ClaimStoreOptions } from './claim-store.js'

export interface MemoryClaimStoreOptions extends ClaimStoreOptions {
  /**
   * Most keys remembered (done marks and live claims, of events and deliveries alike); when full,
   * the oldest written is forgotten first. Each takes about 60 bytes.
   * @default 1000000
   */
  max?: number
}

/**
 * A live claim in `MemoryClaimStore`: its token and when it expires (ms since the store was made).
 * The router's synchronous path shares one among all the events of a delivery (their
 * fingerprint and this token tell its claims apart), so a delivery allocates none per event.
 * A one-key claim (`claimKey`) is handed out as the caller's `StoreClaim`: its `fingerprint` is
 * the key ('' for a shared one).
 */
class HeldClaim implements StoreClaim {
  /** Its place in the store's table of claims while records point at it (`refs` of them), else -1. */
  index = -1
  refs = 0
  constructor (readonly token: string, public expires: number, readonly fingerprint: string = '') {}
}

/**
 * `MemoryClaimStore`'s own methods, answering at once: `WebhookEventRouter` (per event) and the
 * receivers' delivery claim (per delivery, one key) call these instead of the promise-returning
 * ones (no promise, no claim object per event). Same semantics, same errors (thrown).
 */
export interface SynchronousClaims {
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
  /**
   * Keeps every fingerprint `claim` still holds alive for another `lifetimeSeconds`; false when
   * the claim had lapsed (nothing is extended then: its fingerprints may be another's now).
   */
  extend (claim: object, lifetimeSeconds: number): boolean
  /** Claims one key (a delivery's): its `StoreClaim`, or `PROCESSING` / `DONE`. */
  claimKey (key: string, lifetimeSeconds: number): StoreClaim | typeof PROCESSING | typeof DONE
  /** Writes the done mark of `claim`'s key (whatever held it), remembered for `doneSeconds`. */
  completeKey (claim: StoreClaim, doneSeconds: number): void
  /**
   * Drops `claim`'s key where `claim` (by its token) still holds it. Given a key instead, drops
   * whatever live claim holds it (a done mark stays): the per-delivery `MemoryReplayStore`'s release by id.
   */
  releaseKey (claim: StoreClaim | string): void
}
export const CLAIMED = 0
export const PROCESSING = 1
export const DONE = 2
export const REPEATED = 3

let synchronousOf: (store: MemoryClaimStore) => SynchronousClaims

/**
 * A bounded, one-process claim store, for events (`WebhookEventRouter`'s `seenEvents`) and
 * deliveries (the receivers' `replay`) alike: a table of fixed-size records (`FingerprintTable`,
 * typed arrays), each a key's 256 bits and its done mark (the time it expires) or live claim.
 * Expired entries are dropped when read; when full, the oldest written is forgotten first. No
 * timer. Entries are written only after a signature verified, so forged requests cannot fill or
 * evict it. Several instances behind a load balancer need `RedisClaimStore`.
 */
export class MemoryClaimStore implements ClaimStore {
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
  /**
   * `Date.now()` at the store's first use: times are kept relative to it. Read then, not at
   * construction: a store made at a Worker's module scope sees a clock stopped at 0 there.
   */
  #epoch = -1
  // A claim token only has to be unique among this store's claims (it never leaves the process):
  // a counter does it, with no random draw per claim (OpenSSL's generator contends with the
  // thread-pool verifies). The store's own random base keeps two stores' tokens apart; it is
  // drawn at the first claim, because Workers refuse random values at module scope, where a
  // handler and its default store are naturally made.
  #tokenBase = ''
  #tokenCount = 0
  readonly #synchronous: SynchronousClaims

  static {
    synchronousOf = (store) => store.#synchronous
  }

  constructor (options: MemoryClaimStoreOptions = {}) {
    const max = options.max ?? 1_000_000
    if (!Number.isSafeInteger(max) || max < 1) throw new TypeError('max must be a positive integer')
    const ttl = options.ttl ?? DEFAULT_CLAIM_TTL
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
      complete: (fingerprints) => { this.#markDone(fingerprints, (k) => fingerprints[k]!, this.#ttlDs) },
      release: (claim, fingerprints) => {
        const table = this.#table
        for (let i = 0; i < fingerprints.length; i++) {
          const slot = table.locate(fingerprints[i]!)
          if (slot >= 0 && this.#claimOf(table.value(slot)) === claim) this.#forget(slot)
        }
      },
      extend: (claim, lifetimeSeconds) => {
        checkTtl(lifetimeSeconds, 'lifetimeSeconds')
        // Every record still pointing at this claim is still held by it (complete and release
        // replace or drop it), as long as it has not expired: an expired one may be taken by anyone.
        const held = claim as HeldClaim
        const now = this.#now()
        if (held.expires <= now) return false
        held.expires = now + lifetimeSeconds * 1000
        return true
      },
      claimKey: (key, lifetimeSeconds) => {
        checkTtl(lifetimeSeconds, 'lifetimeSeconds')
        const now = this.#now()
        const held = new HeldClaim(this.#nextToken(), now + lifetimeSeconds * 1000, key)
        const state = this.#claimOne(key, held, now)
        if (state !== CLAIMED) return state === DONE ? DONE : PROCESSING
        this.#trim()
        return held
      },
      completeKey: (claim, doneSeconds) => {
        checkTtl(doneSeconds, 'doneSeconds')
        this.#markOne(claim.fingerprint, Math.ceil(this.#now() / 100) + doneSeconds * 10)
        this.#trim()
      },
      releaseKey: (claim) => {
        const table = this.#table
        const slot = table.locate(typeof claim === 'string' ? claim : claim.fingerprint)
        if (slot < 0) return
        const held = this.#claimOf(table.value(slot))
        if (held !== undefined && (typeof claim === 'string' || held.token === claim.token)) this.#forget(slot)
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

  async claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<StoreClaimResult[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    const now = this.#now()
    const expires = now + lifetimeSeconds * 1000
    const results: StoreClaimResult[] = new Array(fingerprints.length)
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

  async complete (claims: readonly StoreClaim[], doneSeconds?: number): Promise<void> {
    if (doneSeconds !== undefined) checkTtl(doneSeconds, 'doneSeconds')
    this.#markDone(claims, (k) => claims[k]!.fingerprint, doneSeconds === undefined ? this.#ttlDs : doneSeconds * 10)
  }

  async release (claims: readonly StoreClaim[]): Promise<void> {
    const now = this.#now()
    for (const c of claims) {
      const slot = this.#table.locate(c.fingerprint)
      if (slot < 0) continue
      const held = this.#claimOf(this.#table.value(slot))
      if (held !== undefined && held.token === c.token && held.expires > now) this.#forget(slot)
    }
  }

  async extend (claims: readonly StoreClaim[], lifetimeSeconds: number): Promise<boolean[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    const now = this.#now()
    const expires = now + lifetimeSeconds * 1000
    const kept = new Array<boolean>(claims.length).fill(false)
    for (let i = 0; i < claims.length; i++) {
      const c = claims[i]!
      const slot = this.#table.locate(c.fingerprint)
      if (slot < 0) continue
      const held = this.#claimOf(this.#table.value(slot))
      if (held !== undefined && held.token === c.token && held.expires > now) {
        held.expires = expires
        kept[i] = true
      }
    }
    return kept
  }

  /** Milliseconds since the store was made. */
  #now (): number {
    if (this.#epoch < 0) this.#epoch = Date.now()
    return Date.now() - this.#epoch
  }

  /** A done mark written at `now`: when it expires, in tenths of a second since the store was made (rounded up, so it lives at least `ttl`). */
  #doneUntil (now: number): number {
    return Math.ceil(now / 100) + this.#ttlDs
  }

  #nextToken (): string {
    if (this.#tokenBase === '') this.#tokenBase = base64url(crypto.getRandomValues(new Uint8Array(9))) + '.'
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

  /** Writes done marks that live `forDs` tenths of a second. */
  #markDone<C> (items: readonly C[], fingerprintOf: (k: number) => string, forDs: number): void {
    const table = this.#table
    const until = Math.ceil(this.#now() / 100) + forDs
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
      this.#markOne(fp, until)
    }
    this.#trim()
  }

  /** Writes `fp`'s done mark (expiring at `until`, in tenths of a second), whatever held it. */
  #markOne (fp: string, until: number): void {
    const table = this.#table
    const slot = table.locate(fp)
    if (slot < 0) {
      table.insert(slot, until)
    } else {
      // Overwritten in place: it keeps its place in write order.
      this.#unrefer(table.value(slot))
      table.setValue(slot, until)
    }
  }

  /** Forgets the oldest written records beyond `max`. */
  #trim (): void {
    const table = this.#table
    while (table.size > this.#max) this.#forget(table.oldest())
  }
}

const { claim: ownClaim, complete: ownComplete, release: ownRelease, extend: ownExtend } = MemoryClaimStore.prototype

/**
 * The synchronous methods of a `MemoryClaimStore` whose claim methods are its own (not
 * overridden by a subclass or replaced on the instance, such as a test's spy); null for any
 * other store, which is then called through its promises.
 */
export function synchronousClaims (store: ClaimStore): SynchronousClaims | null {
  if (!(store instanceof MemoryClaimStore) || store.claim !== ownClaim || store.complete !== ownComplete || store.release !== ownRelease || store.extend !== ownExtend) return null
  return synchronousOf(store)
}

