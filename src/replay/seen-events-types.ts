import { base64url } from '#crypto'

// The seen-events stores' contract: what the router, the stores of this folder and the
// PostgreSQL and SQLite stores share.

/** Three days: at least the horizon over which a delivery can be resent. */
export const DEFAULT_SEEN_EVENTS_TTL = 3 * 24 * 60 * 60

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

/**
 * Claim tokens for a batch (runtime-neutral): one random 96-bit base per batch, numbered, so a
 * token is unguessable and unique without a random draw per event.
 */
export function claimTokens (count: number): (i: number) => string {
  const base = base64url(crypto.getRandomValues(new Uint8Array(12)))
  return (i) => count === 1 ? base : `${base}.${i.toString(36)}`
}
