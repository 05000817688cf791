import { base64url } from '#crypto'

// The one claim vocabulary of the library: what the router's per-event exactly-once, the
// receivers' per-delivery replay protection (a delivery is a one-key claim: delivery-claim.ts),
// the stores of this folder and the PostgreSQL and SQLite stores share.

/** Three days: at least the horizon over which a delivery can be resent. */
export const DEFAULT_CLAIM_TTL = 3 * 24 * 60 * 60

/**
 * A claim on one key, held while its handler runs: `complete` or `release` it with this token.
 * The key is an event's `eventFingerprint` (per event) or a delivery's `deliveryClaimKey` (per
 * delivery): the two are SHA-256 values of differently tagged texts, so they never meet.
 */
export interface StoreClaim {
  /** The claimed key: an event's `eventFingerprint`, or a delivery's `deliveryClaimKey`. */
  readonly fingerprint: string
  /** This claim's own random token: only its holder can release or extend it. */
  readonly token: string
}

/**
 * Where one key stands after `claim`: a `StoreClaim` (it is ours to handle now),
 * `'processing'` (another caller holds a live claim on it) or `'done'` (it was handled).
 */
export type StoreClaimResult = StoreClaim | 'processing' | 'done'

/**
 * Remembers which keys were already handled, so their handlers never run twice: each event of a
 * delivery (the router, by `eventFingerprint`: also across a re-signed resend) and each delivery
 * (the receivers' replay protection, by `deliveryClaimKey`: an exact resend). One store can serve
 * both; its keys do not collide. Every method takes a batch (about one round trip for Redis).
 *
 * A claim is a token with a lifetime (`claim`, kept alive with `extend` while the handler runs);
 * `complete` writes a separate done mark, remembered for the store's `ttl`. A claim whose holder
 * died simply expires, so an orphaned or late claim can delay a key, never make it look handled.
 * `has` / `add` / `delete` read, write and forget done marks directly.
 */
export interface ClaimStore {
  /** For each key, whether it is marked done. */
  has (fingerprints: readonly string[]): Promise<boolean[]>
  /** Marks keys done; for each, `true` if this call marked it (atomic: of concurrent callers exactly one gets `true`; a live claim counts as taken). */
  add (fingerprints: readonly string[]): Promise<boolean[]>
  /** Forgets keys (done marks and claims alike). */
  delete (fingerprints: readonly string[]): Promise<void>
  /**
   * Claims each key for `lifetimeSeconds`, atomically per key: of concurrent callers at most one
   * gets a `StoreClaim`. A done key answers `'done'`, a live claim of someone else `'processing'`.
   * Rejects (never resolves wrongly) when the store cannot answer.
   */
  claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<StoreClaimResult[]>
  /**
   * Writes the done mark of each claimed key and drops the claim. The mark is remembered for the
   * store's `ttl`, or for `doneSeconds` when given (a delivery's mark needs only its freshness
   * window): a store may keep it longer, never shorter.
   */
  complete (claims: readonly StoreClaim[], doneSeconds?: number): Promise<void>
  /** Gives up these claims (only where the token still holds), so the next attempt handles the keys. */
  release (claims: readonly StoreClaim[]): Promise<void>
  /**
   * Keeps these claims alive for another `lifetimeSeconds` (only where the token still holds),
   * while their handlers run. Resolves, for each claim, whether it was still held: `false` when
   * it had lapsed (its lifetime ran out: another caller may hold the key now, or may take it at
   * any moment) or was completed, released or taken by another token. A store that resolves
   * nothing (`undefined`) is taken to have kept every claim: the router then cannot tell a lapsed one.
   */
  extend (claims: readonly StoreClaim[], lifetimeSeconds: number): Promise<boolean[] | undefined | void>
}

/**
 * A claim store that keeps its done marks in your application's own database, so it can write
 * an event's done mark in the same transaction as the event's effects: both commit, or neither
 * does. `WebhookEventRouter` then runs each claimed event's handlers inside `runInTransaction`
 * and hands them the transaction as `context.db` (`T`).
 */
export interface TransactionalClaimStore<T> extends ClaimStore {
  /**
   * Opens a transaction, runs `work` in it, then writes `claim`'s done mark in that same
   * transaction and commits. Rolls back and rejects with `work`'s own error when `work` rejects,
   * and with a `ReplayStoreError` when the claim no longer holds (it expired and another caller
   * took the event: that caller's transaction decides) or the database failed.
   */
  runInTransaction<R> (claim: StoreClaim, work: (tx: T) => Promise<R>): Promise<R>
}

/** Whether `store` can run handlers in a transaction of its own database (`TransactionalClaimStore`). */
export function isTransactionalStore (store: ClaimStore): store is TransactionalClaimStore<unknown> {
  return typeof (store as Partial<TransactionalClaimStore<unknown>>).runInTransaction === 'function'
}

/** Whether `value` has every method of a `ClaimStore` (a per-delivery `ReplayStore` has only claim, complete and release). */
export function isClaimStore (value: unknown): value is ClaimStore {
  const s = value as Partial<Record<keyof ClaimStore, unknown>> | null
  return s !== null && typeof s === 'object' && typeof s.has === 'function' && typeof s.add === 'function' && typeof s.delete === 'function' &&
    typeof s.claim === 'function' && typeof s.complete === 'function' && typeof s.release === 'function' && typeof s.extend === 'function'
}

export interface ClaimStoreOptions {
  /**
   * How long a done mark is remembered, in seconds: at least the resend horizon. A delivery's
   * done mark (replay protection) is kept for its freshness window instead.
   * @default 259200 (seconds: 3 days)
   */
  ttl?: number
}

/**
 * Claim tokens for a batch (runtime-neutral): one random 96-bit base per batch, numbered, so a
 * token is unguessable and unique without a random draw per event.
 */
export function claimTokens (count: number): (i: number) => string {
  const base = base64url(crypto.getRandomValues(new Uint8Array(12)))
  return (i) => count === 1 ? base : `${base}.${i.toString(36)}`
}

