import type { StoreClaim } from './claim-store.js'
import { ReplayStoreError } from './errors.js'
import { hold } from './memory-store.js'
import { RedisClaimStore } from './redis-claim-store.js'
import type { RedisClientLike, RedisStoreOptions } from './redis-client.js'
import { checkTtl } from './ttl.js'
import type { ClaimState, DeliveryReplayStore } from './types.js'

export interface RedisReplayStoreOptions extends RedisStoreOptions {
  /**
   * Key prefix. Give each deployment (endpoint) its own, so two endpoints sharing one
   * Redis never answer each other's deliveries as duplicates.
   * @default 'mailchannels-webhooks:replay:'
   */
  prefix?: string
}

/**
 * The per-delivery face of a `RedisClaimStore` of its own, under the prefix
 * `'mailchannels-webhooks:replay:'` by default: each delivery is a one-key claim of that store,
 * its key the delivery id (`deliveryId`) as before, with the claim store's guarantees (atomic
 * claims, a failed claim never takes effect, `waitForReplicas`). The values its previous version
 * wrote still read as they did, and that version answers the new ones with 503 (a retry), so a
 * rolling upgrade never handles a delivery twice. Every failure rejects with `ReplayStoreError`.
 * Internal, not exported: users pass a `RedisClaimStore` as `replay`.
 */
export class RedisReplayStore implements DeliveryReplayStore {
  readonly #store: RedisClaimStore
  /** The claim of each delivery id this instance holds through `claim`, oldest first (bounded to 100,000: a forgotten one only makes release a no-op). */
  readonly #held = new Map<string, StoreClaim>()

  constructor (client: RedisClientLike, options: RedisReplayStoreOptions = {}) {
    this.#store = new RedisClaimStore(client, { ...options, prefix: options.prefix ?? 'mailchannels-webhooks:replay:' })
  }

  async claim (id: string, ttlSeconds: number): Promise<ClaimState> {
    checkTtl(ttlSeconds)
    const [result] = await this.#store.claim([id], ttlSeconds)
    if (result === 'processing' || result === 'done') return result
    if (result === undefined) throw new ReplayStoreError('claim', 'Redis answered claim with an unexpected reply.')
    hold(this.#held, id, result, 100_000)
    return 'claimed'
  }

  async complete (id: string, ttlSeconds: number): Promise<void> {
    checkTtl(ttlSeconds)
    this.#held.delete(id)
    await this.#store.complete([{ fingerprint: id, token: '' }], ttlSeconds)
  }

  async release (id: string): Promise<void> {
    const claim = this.#held.get(id)
    if (claim === undefined) return
    this.#held.delete(id)
    await this.#store.release([claim])
  }
}

