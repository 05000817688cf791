import { LRUCache } from 'lru-cache'
import type { ClaimState, ReplayStore } from './types.js'
import { checkTtl } from './ttl.js'

export interface MemoryReplayStoreOptions {
  /**
   * Most deliveries remembered; when full, the least recently claimed is forgotten first.
   * Size it above the deliveries one process accepts per freshness window.
   * About 20 MB of heap at the default (86-character delivery ids).
   * @default 100000
   */
  max?: number
}

/**
 * The store's own methods, answering at once: the receiver calls these instead of the
 * promise-returning ones (no promise, no microtask per delivery). Same semantics, same errors (thrown).
 */
export interface SynchronousClaims {
  claim (id: string, ttlSeconds: number): ClaimState
  complete (id: string, ttlSeconds: number): void
  release (id: string): void
}

let claimsOf: (store: MemoryReplayStore) => SynchronousClaims

/**
 * The default replay store: one process only, bounded. Entries live for the freshness
 * window (`maxAge + clockSkew`), after which a replay fails the freshness check anyway.
 * Entries are written only after a signature verified, so forged requests cannot fill
 * or evict it. Several instances behind a load balancer need `RedisReplayStore`.
 */
export class MemoryReplayStore implements ReplayStore {
  readonly #entries: LRUCache<string, 'processing' | 'done'>
  readonly #claims: SynchronousClaims

  static {
    claimsOf = (store) => store.#claims
  }

  constructor (options: MemoryReplayStoreOptions = {}) {
    const max = options.max ?? 100_000
    if (!Number.isSafeInteger(max) || max < 1) throw new TypeError('max must be a positive integer')
    // ttl 1 only enables per-entry TTLs; every set passes its own. Stale entries are
    // dropped on read or evicted by the cap, so no purge timer keeps the process alive.
    const entries = this.#entries = new LRUCache({ max, ttlAutopurge: false, ttl: 1 })
    // Each method runs synchronously to completion, so claim is atomic within the process.
    this.#claims = {
      claim (id, ttlSeconds) {
        checkTtl(ttlSeconds)
        const state = entries.get(id)
        if (state !== undefined) return state
        entries.set(id, 'processing', { ttl: ttlSeconds * 1000 })
        return 'claimed'
      },
      complete (id, ttlSeconds) {
        checkTtl(ttlSeconds)
        entries.set(id, 'done', { ttl: ttlSeconds * 1000 })
      },
      release (id) {
        // A completed delivery stays done: only an unfinished claim is given up.
        if (entries.get(id) === 'processing') entries.delete(id)
      },
    }
  }

  /** Deliveries currently remembered (expired ones may count until read or evicted). */
  get size (): number { return this.#entries.size }

  async claim (id: string, ttlSeconds: number): Promise<ClaimState> {
    return this.#claims.claim(id, ttlSeconds)
  }

  async complete (id: string, ttlSeconds: number): Promise<void> {
    this.#claims.complete(id, ttlSeconds)
  }

  async release (id: string): Promise<void> {
    this.#claims.release(id)
  }

  /** Forgets every delivery. */
  clear (): void { this.#entries.clear() }
}

const { claim, complete, release } = MemoryReplayStore.prototype

/**
 * The synchronous methods of a `MemoryReplayStore` whose `claim`, `complete` and `release` are
 * its own (not overridden by a subclass or replaced on the instance, such as a test's spy);
 * null for any other store, which is then called through its promises.
 */
export function synchronousClaims (store: ReplayStore): SynchronousClaims | null {
  if (!(store instanceof MemoryReplayStore) || store.claim !== claim || store.complete !== complete || store.release !== release) return null
  return claimsOf(store)
}
