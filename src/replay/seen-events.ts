import { LRUCache } from 'lru-cache'
import type { WebhookEvent } from '../events/types.js'
import { eventFingerprint } from './fingerprint.js'
import { checkTtl } from './ttl.js'
import { LuaScript, assertConnected, checkClient, checkPrefix, checkTimeout, guarded, type RedisClientLike, type RedisStoreOptions } from './redis-client.js'
import { ReplayStoreError } from './errors.js'

/** Three days: at least the horizon over which a delivery can be resent. */
const DEFAULT_TTL = 3 * 24 * 60 * 60

/**
 * Remembers event fingerprints (`eventFingerprint`) that a handler already processed, so it
 * can skip the events of a re-signed resend, which the replay store cannot recognise.
 * Every method takes a batch (one round trip for Redis).
 */
export interface SeenEventsStore {
  /** For each fingerprint, whether it is marked seen. */
  has (fingerprints: readonly string[]): Promise<boolean[]>
  /** Marks fingerprints seen; for each, `true` if this call marked it (atomic: of concurrent callers exactly one gets `true`). */
  add (fingerprints: readonly string[]): Promise<boolean[]>
  /** Forgets fingerprints (e.g. processing failed after `add`). */
  delete (fingerprints: readonly string[]): Promise<void>
}

export interface SeenEventsStoreOptions {
  /**
   * How long a fingerprint is remembered, in seconds: at least the resend horizon.
   * @default 259200 (3 days)
   */
  ttl?: number
}

export interface MemorySeenEventsStoreOptions extends SeenEventsStoreOptions {
  /**
   * Most fingerprints remembered; the least recently used is forgotten first.
   * @default 1000000
   */
  max?: number
}

/** A bounded, one-process seen-events store. */
export class MemorySeenEventsStore implements SeenEventsStore {
  readonly #seen: LRUCache<string, true>

  constructor (options: MemorySeenEventsStoreOptions = {}) {
    const max = options.max ?? 1_000_000
    if (!Number.isSafeInteger(max) || max < 1) throw new TypeError('max must be a positive integer')
    const ttl = options.ttl ?? DEFAULT_TTL
    checkTtl(ttl, 'ttl')
    this.#seen = new LRUCache({ max, ttl: ttl * 1000, ttlAutopurge: false })
  }

  /** Fingerprints currently remembered. */
  get size (): number { return this.#seen.size }

  async has (fingerprints: readonly string[]): Promise<boolean[]> {
    return fingerprints.map((fp) => this.#seen.has(fp))
  }

  async add (fingerprints: readonly string[]): Promise<boolean[]> {
    return fingerprints.map((fp) => {
      if (this.#seen.has(fp)) return false
      this.#seen.set(fp, true)
      return true
    })
  }

  async delete (fingerprints: readonly string[]): Promise<void> {
    for (const fp of fingerprints) this.#seen.delete(fp)
  }
}

export interface RedisSeenEventsStoreOptions extends SeenEventsStoreOptions, RedisStoreOptions {
  /**
   * Key prefix.
   * @default 'mailchannels-webhooks:seen:'
   */
  prefix?: string
}

// SET NX EX per key, all in one atomic step; 1 where this call set the key.
const ADD = new LuaScript(`local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, '1', 'NX', 'EX', ARGV[1]) then out[i] = 1 else out[i] = 0 end
end
return out`)

/**
 * A seen-events store shared by every instance (`SET key 1 NX EX ttl`). Pass your own
 * ioredis client, configured as for `RedisReplayStore`. Failures reject with `ReplayStoreError`.
 */
export class RedisSeenEventsStore implements SeenEventsStore {
  readonly #client: RedisClientLike
  readonly #prefix: string
  readonly #ttl: number
  readonly #timeout: number

  constructor (client: RedisClientLike, options: RedisSeenEventsStoreOptions = {}) {
    checkClient(client, 'RedisSeenEventsStore')
    this.#client = client
    this.#prefix = checkPrefix(options.prefix ?? 'mailchannels-webhooks:seen:')
    this.#ttl = options.ttl ?? DEFAULT_TTL
    checkTtl(this.#ttl, 'ttl')
    this.#timeout = checkTimeout(options.timeout)
  }

  async has (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    const reply = await guarded('has', this.#timeout, async () => await this.#client.mget(...this.#keys(fingerprints)))
    if (!Array.isArray(reply) || reply.length !== fingerprints.length) throw new ReplayStoreError('has', 'Redis answered has with an unexpected reply.')
    return reply.map((v) => v !== null)
  }

  async add (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    // Not queued while disconnected: a late add would mark events seen that were never processed.
    assertConnected(this.#client, 'add')
    const reply = await guarded('add', this.#timeout, async () => await ADD.run(this.#client, this.#keys(fingerprints), [this.#ttl]))
    if (!Array.isArray(reply) || reply.length !== fingerprints.length) throw new ReplayStoreError('add', 'Redis answered add with an unexpected reply.')
    return reply.map((v) => v === 1)
  }

  async delete (fingerprints: readonly string[]): Promise<void> {
    if (fingerprints.length === 0) return
    await guarded('delete', this.#timeout, async () => await this.#client.del(...this.#keys(fingerprints)))
  }

  #keys (fingerprints: readonly string[]): string[] {
    return fingerprints.map((fp) => this.#prefix + fp)
  }
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
