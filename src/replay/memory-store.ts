import { LRUCache } from 'lru-cache'
import type { ClaimState, ReplayStore } from './types.js'

export interface MemoryReplayStoreOptions {
  /** Most deliveries remembered; the oldest are forgotten first. Default 100,000. */
  max?: number
}

/**
 * The default replay store: one process only, bounded. Entries live for the freshness
 * window (`maxAge + clockSkew`), after which a replay fails the freshness check anyway.
 */
export class MemoryReplayStore implements ReplayStore {
  readonly #entries: LRUCache<string, 'processing' | 'done'>

  constructor (options: MemoryReplayStoreOptions = {}) {
    const max = options.max ?? 100_000
    if (!Number.isSafeInteger(max) || max < 1) throw new TypeError('max must be a positive integer')
    this.#entries = new LRUCache({ max, ttlAutopurge: false, ttl: 1 })
  }

  /** Deliveries currently remembered. */
  get size (): number { return this.#entries.size }

  async claim (id: string, ttlSeconds: number): Promise<ClaimState> {
    const state = this.#entries.get(id)
    if (state !== undefined) return state
    this.#entries.set(id, 'processing', { ttl: ttlSeconds * 1000 })
    return 'claimed'
  }

  async complete (id: string, ttlSeconds: number): Promise<void> {
    this.#entries.set(id, 'done', { ttl: ttlSeconds * 1000 })
  }

  async release (id: string): Promise<void> {
    this.#entries.delete(id)
  }
}
