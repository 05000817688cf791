import { LRUCache } from 'lru-cache'
import type { ClaimState, ReplayStore } from './types.js'
import { checkTtl } from './ttl.js'

export interface MemoryReplayStoreOptions {
  /**
   * Most deliveries remembered; when full, the least recently claimed is forgotten first.
   * Size it above the deliveries one process accepts per freshness window.
   * About 13 MB of heap at the default.
   * @default 100000
   */
  max?: number
}

/**
 * The default replay store: one process only, bounded. Entries live for the freshness
 * window (`maxAge + clockSkew`), after which a replay fails the freshness check anyway.
 * Entries are written only after a signature verified, so forged requests cannot fill
 * or evict it. Several instances behind a load balancer need `RedisReplayStore`.
 */
export class MemoryReplayStore implements ReplayStore {
  readonly #entries: LRUCache<string, 'processing' | 'done'>

  constructor (options: MemoryReplayStoreOptions = {}) {
    const max = options.max ?? 100_000
    if (!Number.isSafeInteger(max) || max < 1) throw new TypeError('max must be a positive integer')
    // ttl 1 only enables per-entry TTLs; every set passes its own. Stale entries are
    // dropped on read or evicted by the cap, so no purge timer keeps the process alive.
    this.#entries = new LRUCache({ max, ttlAutopurge: false, ttl: 1 })
  }

  /** Deliveries currently remembered (expired ones may count until read or evicted). */
  get size (): number { return this.#entries.size }

  // Each method runs synchronously to completion, so claim is atomic within the process.
  async claim (id: string, ttlSeconds: number): Promise<ClaimState> {
    checkTtl(ttlSeconds)
    const state = this.#entries.get(id)
    if (state !== undefined) return state
    this.#entries.set(id, 'processing', { ttl: ttlSeconds * 1000 })
    return 'claimed'
  }

  async complete (id: string, ttlSeconds: number): Promise<void> {
    checkTtl(ttlSeconds)
    this.#entries.set(id, 'done', { ttl: ttlSeconds * 1000 })
  }

  async release (id: string): Promise<void> {
    // A completed delivery stays done: only an unfinished claim is given up.
    if (this.#entries.get(id) === 'processing') this.#entries.delete(id)
  }

  /** Forgets every delivery. */
  clear (): void { this.#entries.clear() }
}
