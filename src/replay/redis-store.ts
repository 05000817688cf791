import { LRUCache } from 'lru-cache'
import type { StoreClaim } from './claim-store.js'
import { ReplayStoreError } from './errors.js'
import { RedisClaimStore } from './redis-claim-store.js'
import type { RedisClientLike, RedisStoreOptions } from './redis-client.js'
import { checkTtl } from './ttl.js'
import { claimKeyOfDeliveryId, type ClaimState, type DeliveryReplayStore } from './types.js'

export interface RedisReplayStoreOptions extends RedisStoreOptions {
  /**
   * Key prefix. Give each deployment (endpoint) its own, so two endpoints sharing one
   * Redis never answer each other's deliveries as duplicates.
   * @default 'mailchannels-webhooks:replay:'
   */
  prefix?: string
}

let claimsOf: (store: RedisReplayStore) => RedisClaimStore

/**
 * The per-delivery face of a `RedisClaimStore` of its own, under the prefix
 * `'mailchannels-webhooks:replay:'` by default: the receivers claim each delivery through that
 * claim store (one key per delivery, `deliveryClaimKey`), with its guarantees (atomic claims, a
 * failed claim never takes effect, `waitForReplicas`). Its own `claim`, `complete` and `release`
 * take delivery ids (`deliveryId`). Every failure rejects with `ReplayStoreError`.
 * @deprecated Pass a `RedisClaimStore` as `replay` (one store can serve the receivers and `WebhookEventRouter`).
 */
export class RedisReplayStore implements DeliveryReplayStore {
  readonly #store: RedisClaimStore
  /** The claim of each delivery id this instance holds through `claim` (bounded; a forgotten one only makes release a no-op). */
  readonly #held = new LRUCache<string, StoreClaim>({ max: 100_000, ttl: 1, ttlAutopurge: false })

  static {
    claimsOf = (store) => store.#store
  }

  constructor (client: RedisClientLike, options: RedisReplayStoreOptions = {}) {
    this.#store = new RedisClaimStore(client, { ...options, prefix: options.prefix ?? 'mailchannels-webhooks:replay:' })
  }

  async claim (id: string, ttlSeconds: number): Promise<ClaimState> {
    checkTtl(ttlSeconds)
    const [result] = await this.#store.claim([claimKeyOfDeliveryId(id)], ttlSeconds)
    if (result === 'processing' || result === 'done') return result
    if (result === undefined) throw new ReplayStoreError('claim', 'Redis answered claim with an unexpected reply.')
    this.#held.set(id, result, { ttl: ttlSeconds * 1000 })
    return 'claimed'
  }

  async complete (id: string, ttlSeconds: number): Promise<void> {
    checkTtl(ttlSeconds)
    this.#held.delete(id)
    await this.#store.complete([{ fingerprint: claimKeyOfDeliveryId(id), token: '' }], ttlSeconds)
  }

  async release (id: string): Promise<void> {
    const claim = this.#held.get(id)
    if (claim === undefined) return
    this.#held.delete(id)
    await this.#store.release([claim])
  }
}

const { claim, complete, release } = RedisReplayStore.prototype

/**
 * The claim store behind a `RedisReplayStore` whose `claim`, `complete` and `release` are its own
 * (not overridden or replaced on the instance), which the receivers then claim from; null for any other store.
 */
export function claimStoreBehindRedis (store: object): RedisClaimStore | null {
  if (!(store instanceof RedisReplayStore) || store.claim !== claim || store.complete !== complete || store.release !== release) return null
  return claimsOf(store)
}
