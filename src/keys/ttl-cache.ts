/**
 * A small least-recently-used map with a time to live per entry, for the key store's handful of
 * keys and failures. A `Map` keeps insertion order, so re-inserting on use keeps the least recently
 * used entry first, where eviction takes it. It replaces lru-cache on these paths because lru-cache
 * is 18.7 KB of a Worker's minified bundle (see bench/bundle-size.mjs) for maps that hold a few
 * entries; docs/design-notes.md says why.
 *
 * An entry is stale once more than its TTL (milliseconds, by `now`) has passed since it was set, as
 * lru-cache counts. A stale entry is not returned by `get` (it is dropped, unless `keepStale`) nor
 * counted by `has`, but `get(key, true)` still returns one kept.
 */
export class TtlCache<K, V> {
  readonly #map = new Map<K, { value: V, expiresAt: number }>()
  readonly #max: number
  readonly #ttl: number
  readonly #now: () => number
  readonly #keepStale: boolean
  /** The most recently used key: a hit on it needs no reordering (the common case of one key in use). */
  #newest: K | undefined

  constructor (options: { max: number, ttl: number, now: () => number, keepStale?: boolean }) {
    this.#max = options.max
    this.#ttl = options.ttl
    this.#now = options.now
    this.#keepStale = options.keepStale ?? false
  }

  get size (): number { return this.#map.size }

  /** The value while fresh (it becomes the most recently used), else `undefined`; with `allowStale` also a kept stale value. */
  get (key: K, allowStale = false): V | undefined {
    const entry = this.#map.get(key)
    if (entry === undefined) return undefined
    if (this.#now() > entry.expiresAt) {
      if (allowStale) return entry.value
      if (!this.#keepStale) this.#drop(key)
      return undefined
    }
    if (key !== this.#newest) {
      this.#map.delete(key)
      this.#map.set(key, entry)
      this.#newest = key
    }
    return entry.value
  }

  /** Whether a fresh value is held (its place in the order is left alone). */
  has (key: K): boolean {
    const entry = this.#map.get(key)
    return entry !== undefined && this.#now() <= entry.expiresAt
  }

  /** Sets the value, fresh for `ttl` milliseconds (the cache's TTL unless given), evicting the least recently used beyond `max`. */
  set (key: K, value: V, ttl = this.#ttl): void {
    this.#map.delete(key)
    this.#map.set(key, { value, expiresAt: this.#now() + ttl })
    this.#newest = key
    if (this.#map.size > this.#max) this.#drop(this.#map.keys().next().value!)
  }

  delete (key: K): void {
    this.#drop(key)
  }

  clear (): void {
    this.#map.clear()
    this.#newest = undefined
  }

  #drop (key: K): void {
    this.#map.delete(key)
    if (key === this.#newest) this.#newest = undefined
  }
}
