import { hash } from '#crypto'

// Records (a key's 256 bits and its float64 value) sit in a ring, in write order: writes are
// sequential, and the oldest is the ring's head. An index of 8-byte slots (the key's first word
// and its record's place in the ring) finds them: a lookup of a new key reads one slot run of a
// compact array, no record. The garbage collector sees a few buffers, not a string and a map
// entry per key.

/** Load at which an index below its target size grows. */
const LOAD = 0.5
/** Load at which any index grows: a batch may overfill a table at its target size until the caller trims it. */
const MAX_LOAD = 0.75
const MIN_CAPACITY = 32
/** A full ring is compacted in place (not grown) when at least this share of it is dead records. */
const COMPACT_SHARE = 1 / 8

const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
const SEXTET = /* @__PURE__ */ (() => {
  const t = new Int8Array(128).fill(-1)
  for (let i = 0; i < 64; i++) t[BASE64URL.charCodeAt(i)] = i
  return t
})()

/**
 * A table from keys to non-zero float64 values, keeping write order (a key written again in
 * place keeps its place; `touch` makes it the newest). A key is 256 bits: a canonical
 * fingerprint (43 characters of unpadded base64url, as `eventFingerprint` writes them)
 * decoded, any other string the SHA-256 of a prefix and its UTF-16 code units (two keys of
 * different kinds are then a SHA-256 preimage apart). Its first word is its hash: a SHA-256's
 * bits are uniform already.
 *
 * The index is open addressing with linear probing; a removal shifts the rest of its probe run
 * back (no tombstones), so a full table that forgets one record per write stays as fast as a
 * fresh one. A removed record stays in the ring, dead, until the head passes it or a full ring
 * is compacted. A handle (`locate`'s answer) is only valid until the next `insert`, `touch`,
 * `remove` or `oldest`.
 */
export class FingerprintTable {
  /** Ring of records: 8 key words each. */
  #keys: Int32Array
  /** Ring of records: their values, 0 for a dead record. */
  #values: Float64Array
  #ringCapacity: number
  /** Ring capacity the table grows towards: `target` records and some dead ones. */
  readonly #ringTarget: number
  #head = 0
  /** Records in the ring, live and dead. */
  #used = 0
  #dead = 0
  /** Index slots: [key's first word, ring position + 1 (0: empty)]. */
  #index: Int32Array
  #indexCapacity: number
  /** `capacity / 2^32`: a slot's home is `floor(hash * scale)`, any capacity (not only powers of two). */
  #scale: number
  readonly #indexTarget: number
  #growAt: number
  #size = 0
  /** Records written to the ring so far. */
  #writes = 0
  /** Bumped whenever records move or the ring is resized (`recordIsAt` answers false across it). */
  #layout = 0
  /** Where the newest record was written. */
  #newest = -1
  /** The key `locate` read last, kept for `insert`. */
  readonly #key = new Int32Array(8)
  /** `#decode`'s 24-bit groups. */
  readonly #groups = new Int32Array(10)

  /** `target`: the most records the table is expected to hold (it grows beyond when asked to). */
  constructor (target: number) {
    this.#ringTarget = Math.max(MIN_CAPACITY, target + Math.ceil(target * COMPACT_SHARE * 2))
    this.#indexTarget = Math.max(MIN_CAPACITY * 2, Math.ceil(target / LOAD))
    this.#ringCapacity = Math.min(MIN_CAPACITY, this.#ringTarget)
    this.#keys = new Int32Array(this.#ringCapacity * 8)
    this.#values = new Float64Array(this.#ringCapacity)
    this.#indexCapacity = Math.min(MIN_CAPACITY * 2, this.#indexTarget)
    this.#index = new Int32Array(this.#indexCapacity * 2)
    this.#scale = this.#indexCapacity / 4294967296
    this.#growAt = this.#growthPoint()
  }

  /** Live records. */
  get size (): number { return this.#size }

  /**
   * The handle of `key` (>= 0), or where it would go, as `~slot` (< 0), to pass to `insert`
   * before any other call changes the table.
   */
  locate (key: string): number {
    const k = this.#key
    if (key.length !== 43 || !this.#decode(key)) this.#hashed(key)
    const k0 = k[0]!
    const index = this.#index
    const keys = this.#keys
    const capacity = this.#indexCapacity
    let s = Math.floor((k0 >>> 0) * this.#scale)
    for (;;) {
      const at = index[2 * s + 1]!
      if (at === 0) return ~s
      if (index[2 * s] === k0) {
        const b = (at - 1) * 8
        if (keys[b + 1] === k[1] && keys[b + 2] === k[2] && keys[b + 3] === k[3] &&
          keys[b + 4] === k[4] && keys[b + 5] === k[5] && keys[b + 6] === k[6] && keys[b + 7] === k[7]) return s
      }
      if (++s === capacity) s = 0
    }
  }

  value (handle: number): number { return this.#values[this.#index[2 * handle + 1]! - 1]! }

  setValue (handle: number, value: number): void { this.#values[this.#index[2 * handle + 1]! - 1] = value }

  /** Writes the key `locate` just read, with `value` (non-zero), as the newest record. `at` is what `locate` returned. */
  insert (at: number, value: number): void {
    let s = ~at
    if (this.#size >= this.#growAt || this.#used === this.#ringCapacity) {
      this.#grow()
      s = this.#emptySlot(this.#key[0]!)
    }
    const pos = this.#append(this.#key, 0, value)
    this.#index[2 * s] = this.#key[0]!
    this.#index[2 * s + 1] = pos + 1
    this.#size++
  }

  /** Where the newest record was written, as `recordIsAt` takes it: its ring position. */
  get newest (): number { return this.#newest }
  /** Stamps a record's position with, for `recordIsAt`. */
  get writes (): number { return this.#writes }
  get layout (): number { return this.#layout }

  /**
   * Whether the record written at `position` when `writes` and `layout` were as given is still
   * there and live: then it is the same key's, and `valueAt` / `setValueAt` read and write it
   * without decoding the key again. A live record never moves within one layout, and a dead
   * one's position is written again only after the tail has gone all round the ring.
   */
  recordIsAt (position: number, writes: number, layout: number): boolean {
    return layout === this.#layout && this.#writes - writes < this.#ringCapacity && this.#values[position] !== 0
  }

  valueAt (position: number): number { return this.#values[position]! }

  setValueAt (position: number, value: number): void { this.#values[position] = value }

  /** Makes `handle`'s record the newest written (a handle `locate` just returned). */
  touch (handle: number): void {
    let s = handle
    if (this.#used === this.#ringCapacity) {
      this.#grow()
      s = this.#find(this.#key[0]!, this.#key)
    }
    const from = this.#index[2 * s + 1]! - 1
    const pos = this.#append(this.#keys, from * 8, this.#values[from]!)
    this.#values[from] = 0
    this.#dead++
    this.#index[2 * s + 1] = pos + 1
    this.#dropDeadHead()
  }

  /** Forgets `handle`'s record: the index slots after it in its probe run shift back into the gap. */
  remove (handle: number): void {
    const index = this.#index
    this.#values[index[2 * handle + 1]! - 1] = 0
    this.#dead++
    this.#size--
    const capacity = this.#indexCapacity
    const scale = this.#scale
    let gap = handle
    let s = handle
    for (;;) {
      if (++s === capacity) s = 0
      if (index[2 * s + 1] === 0) break
      const home = Math.floor((index[2 * s]! >>> 0) * scale)
      // Move the slot back unless its home lies after the gap (cyclically, in (gap, s]).
      if ((s - home + capacity) % capacity >= (s - gap + capacity) % capacity) {
        index[2 * gap] = index[2 * s]!
        index[2 * gap + 1] = index[2 * s + 1]!
        gap = s
      }
    }
    index[2 * gap + 1] = 0
    this.#dropDeadHead()
  }

  /** The handle of the oldest written live record (the table must not be empty). */
  oldest (): number {
    const index = this.#index
    const at = this.#head + 1
    let s = Math.floor((this.#keys[this.#head * 8]! >>> 0) * this.#scale)
    while (index[2 * s + 1] !== at) if (++s === this.#indexCapacity) s = 0
    return s
  }

  /** Decodes a 43-character key into `#key` (big-endian words); false unless it is canonical base64url (its last 2 bits 0). */
  #decode (key: string): boolean {
    // 24-bit groups of 4 characters, in one function (V8 did not always inline a helper per
    // character). A character outside base64url makes its group negative: a table entry of -1,
    // or a code above 127, which makes (127 - c) >> 31 all ones.
    const g = this.#groups
    let bad = 0
    for (let j = 0, i = 0; j < 10; j++, i += 4) {
      const c0 = key.charCodeAt(i); const c1 = key.charCodeAt(i + 1); const c2 = key.charCodeAt(i + 2); const c3 = key.charCodeAt(i + 3)
      const n = (SEXTET[c0 & 127]! << 18) | (SEXTET[c1 & 127]! << 12) | (SEXTET[c2 & 127]! << 6) | SEXTET[c3 & 127]! | ((127 - (c0 | c1 | c2 | c3)) >> 31)
      g[j] = n
      bad |= n
    }
    const c0 = key.charCodeAt(40); const c1 = key.charCodeAt(41); const c2 = key.charCodeAt(42)
    const last = (SEXTET[c0 & 127]! << 12) | (SEXTET[c1 & 127]! << 6) | SEXTET[c2 & 127]! | ((127 - (c0 | c1 | c2)) >> 31)
    if ((bad | last) < 0 || (last & 3) !== 0) return false
    const k = this.#key
    k[0] = (g[0]! << 8) | (g[1]! >>> 16)
    k[1] = (g[1]! << 16) | (g[2]! >>> 8)
    k[2] = (g[2]! << 24) | g[3]!
    k[3] = (g[4]! << 8) | (g[5]! >>> 16)
    k[4] = (g[5]! << 16) | (g[6]! >>> 8)
    k[5] = (g[6]! << 24) | g[7]!
    k[6] = (g[8]! << 8) | (g[9]! >>> 16)
    k[7] = (g[9]! << 16) | (last >>> 2)
    return true
  }

  /** Reads a key that is not a canonical fingerprint into `#key`: its `hashedKey`, as big-endian words. */
  #hashed (key: string): void {
    const b = hashedKey(key)
    const k = this.#key
    for (let j = 0; j < 8; j++) k[j] = (b[4 * j]! << 24) | (b[4 * j + 1]! << 16) | (b[4 * j + 2]! << 8) | b[4 * j + 3]!
  }

  /** The index slot of the live record whose key is `key` (it must be there); `k0` is its first word. */
  #find (k0: number, key: Int32Array): number {
    const index = this.#index
    const keys = this.#keys
    let s = Math.floor((k0 >>> 0) * this.#scale)
    for (;;) {
      const at = index[2 * s + 1]!
      if (index[2 * s] === k0 && at !== 0) {
        const b = (at - 1) * 8
        if (keys[b + 1] === key[1] && keys[b + 2] === key[2] && keys[b + 3] === key[3] &&
          keys[b + 4] === key[4] && keys[b + 5] === key[5] && keys[b + 6] === key[6] && keys[b + 7] === key[7]) return s
      }
      if (++s === this.#indexCapacity) s = 0
    }
  }

  #emptySlot (k0: number): number {
    const index = this.#index
    let s = Math.floor((k0 >>> 0) * this.#scale)
    while (index[2 * s + 1] !== 0) if (++s === this.#indexCapacity) s = 0
    return s
  }

  /** Writes a record at the ring's tail (there is room): the key from `from[offset..+8]`. Returns its position. */
  #append (from: Int32Array, offset: number, value: number): number {
    let pos = this.#head + this.#used
    if (pos >= this.#ringCapacity) pos -= this.#ringCapacity
    const keys = this.#keys
    const b = pos * 8
    for (let i = 0; i < 8; i++) keys[b + i] = from[offset + i]!
    this.#values[pos] = value
    this.#used++
    this.#writes++
    this.#newest = pos
    return pos
  }

  /** Moves the head past dead records, so the head is the oldest live record. */
  #dropDeadHead (): void {
    const values = this.#values
    while (this.#used > 0 && values[this.#head] === 0) {
      if (++this.#head === this.#ringCapacity) this.#head = 0
      this.#used--
      this.#dead--
    }
  }

  #growthPoint (): number {
    return Math.floor(this.#indexCapacity * (this.#indexCapacity < this.#indexTarget ? LOAD : MAX_LOAD))
  }

  /**
   * Makes room for one more record: compacts the ring or grows it, and grows the index when it
   * is as full as it may be. While the ring has not wrapped (no record was forgotten yet, as a
   * filling store's), growing keeps every record where it is: a copy, and the index stays valid.
   */
  #grow (): void {
    const ring = this.#ringCapacity
    const full = this.#used === ring
    const bigger = ring < this.#ringTarget ? Math.min(ring * 2, this.#ringTarget) : ring * 2
    let index = this.#indexCapacity
    if (this.#size >= this.#growAt) index = index < this.#indexTarget ? Math.min(index * 2, this.#indexTarget) : index * 2
    if (full && (this.#dead >= ring * COMPACT_SHARE || this.#head !== 0)) {
      this.#rebuild(this.#dead >= ring * COMPACT_SHARE ? ring : bigger, index)
      return
    }
    if (full) {
      const keys = new Int32Array(bigger * 8)
      keys.set(this.#keys)
      const values = new Float64Array(bigger)
      values.set(this.#values)
      this.#keys = keys
      this.#values = values
      this.#ringCapacity = bigger
      this.#layout++
    }
    if (index !== this.#indexCapacity) this.#reindex(index)
  }

  /**
   * A bigger index over the same records. The old one is read in slot order: a slot's home is
   * monotone in its hash at any capacity, so the new one is written about in order too.
   */
  #reindex (capacity: number): void {
    const old = this.#index
    const oldCapacity = this.#indexCapacity
    const index = this.#index = new Int32Array(capacity * 2)
    this.#indexCapacity = capacity
    this.#scale = capacity / 4294967296
    this.#growAt = this.#growthPoint()
    for (let s = 0; s < oldCapacity; s++) {
      const at = old[2 * s + 1]!
      if (at === 0) continue
      const to = this.#emptySlot(old[2 * s]!)
      index[2 * to] = old[2 * s]!
      index[2 * to + 1] = at
    }
  }

  /** Copies the live records, oldest first, into a ring of `ringCapacity` from position 0, and indexes them anew. */
  #rebuild (ringCapacity: number, indexCapacity: number): void {
    const oldKeys = this.#keys
    const oldValues = this.#values
    const oldCapacity = this.#ringCapacity
    const keys = this.#keys = new Int32Array(ringCapacity * 8)
    const values = this.#values = new Float64Array(ringCapacity)
    const index = this.#index = new Int32Array(indexCapacity * 2)
    this.#ringCapacity = ringCapacity
    this.#indexCapacity = indexCapacity
    this.#scale = indexCapacity / 4294967296
    this.#growAt = this.#growthPoint()
    let from = this.#head
    let to = 0
    for (let n = this.#used; n > 0; n--) {
      const value = oldValues[from]!
      if (value !== 0) {
        const b = from * 8
        for (let i = 0; i < 8; i++) keys[to * 8 + i] = oldKeys[b + i]!
        values[to] = value
        const s = this.#emptySlot(oldKeys[b]!)
        index[2 * s] = oldKeys[b]!
        index[2 * s + 1] = to + 1
        to++
      }
      if (++from === oldCapacity) from = 0
    }
    this.#head = 0
    this.#layout++
    this.#used = to
    this.#dead = 0
  }
}

const HASHED_PREFIX = 'mailchannels-webhooks seen-events key\n'

/** The 256 bits of a key that is not a canonical fingerprint: SHA-256 of a prefix and its UTF-16 code units (two strings are never the same input). */
function hashedKey (key: string): Uint8Array {
  const text = HASHED_PREFIX + key
  const units = new Uint8Array(text.length * 2)
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    units[2 * i] = c
    units[2 * i + 1] = c >> 8
  }
  return hash('sha256', units)
}
