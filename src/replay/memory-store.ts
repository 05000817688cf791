import { MemoryClaimStore, synchronousClaims, DONE, type SynchronousClaims } from './memory-claim-store.js'
import type { StoreClaim } from './claim-store.js'
import { claimKeyOfDeliveryId, type ClaimState, type DeliveryReplayStore } from './types.js'
import { checkTtl } from './ttl.js'

export interface MemoryReplayStoreOptions {
  /**
   * Most deliveries remembered; when full, the oldest claimed is forgotten first.
   * Size it above the deliveries one process accepts per freshness window.
   * @default 100000
   */
  max?: number
}

let claimsOf: (store: MemoryReplayStore) => MemoryClaimStore

/**
 * The per-delivery face of a `MemoryClaimStore` of its own (one process, bounded to `max`
 * deliveries): what the receivers make by default. Its `claim`, `complete` and `release` take
 * delivery ids (`deliveryId`); the receivers claim through the claim store behind it, at once.
 * Internal, not exported: users pass a `MemoryClaimStore` as `replay`; this one is faster as the default.
 */
export class MemoryReplayStore implements DeliveryReplayStore {
  readonly #max: number
  #store: MemoryClaimStore
  #claims: SynchronousClaims
  /** The last delivery id and its key: a delivery's complete or release follows its claim, mostly with nothing between. */
  #lastId = ''
  #lastKey = ''

  static {
    claimsOf = (store) => store.#store
  }

  constructor (options: MemoryReplayStoreOptions = {}) {
    this.#max = options.max ?? 100_000
    this.#store = new MemoryClaimStore({ max: this.#max })
    this.#claims = synchronousClaims(this.#store)!
  }

  /** Deliveries currently remembered (expired ones may count until read or evicted). */
  get size (): number { return this.#store.size }

  async claim (id: string, ttlSeconds: number): Promise<ClaimState> {
    checkTtl(ttlSeconds)
    const claim = this.#claims.claimKey(this.#keyOf(id), ttlSeconds)
    if (typeof claim === 'number') return claim === DONE ? 'done' : 'processing'
    return 'claimed'
  }

  async complete (id: string, ttlSeconds: number): Promise<void> {
    checkTtl(ttlSeconds)
    // A done mark is written whatever claim held the key: no token needed.
    this.#claims.completeKey({ fingerprint: this.#keyOf(id), token: '' }, ttlSeconds)
  }

  async release (id: string): Promise<void> {
    // By id, as this store always released: whichever request's claim holds it (a done delivery stays done).
    this.#claims.releaseKey(this.#keyOf(id))
  }

  #keyOf (id: string): string {
    if (id !== this.#lastId) {
      this.#lastKey = claimKeyOfDeliveryId(id)
      this.#lastId = id
    }
    return this.#lastKey
  }

  /** Forgets every delivery. */
  clear (): void {
    this.#store = new MemoryClaimStore({ max: this.#max })
    this.#claims = synchronousClaims(this.#store)!
  }
}

/**
 * Remembers `claim` under `id` in `held`, forgetting the oldest beyond `max`. A plain `Map`:
 * with lru-cache 11, a `set` then `delete` (a claim, then its settlement) cost about 250 µs of CPU
 * at 100,000 entries, 490 µs with per-entry TTLs (measured on Node 20).
 */
export function hold (held: Map<string, StoreClaim>, id: string, claim: StoreClaim, max: number): void {
  held.delete(id)
  held.set(id, claim)
  if (held.size > max) held.delete(held.keys().next().value!)
}

const { claim, complete, release } = MemoryReplayStore.prototype

/**
 * The claim store behind a `MemoryReplayStore` whose `claim`, `complete` and `release` are its own
 * (not overridden by a subclass or replaced on the instance, such as a test's spy), which the
 * receivers then claim from at once; null for any other store.
 */
export function claimStoreBehindMemory (store: object): MemoryClaimStore | null {
  if (!(store instanceof MemoryReplayStore) || store.claim !== claim || store.complete !== complete || store.release !== release) return null
  return claimsOf(store)
}
