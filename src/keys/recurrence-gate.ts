import { TtlCache } from './ttl-cache.js'

/*
 * Why the key-fetch budget ranks key ids, and why by spaced sightings.
 *
 * A forger needs no key to reach the key store: a fresh `created`, a correct digest and a
 * random well-formed key id suffice. With one first-come bucket, a flood of such ids at about
 * one a second spends every token, and a real key id that is not cached yet (a cold start, a
 * rotation to a new id) waits behind it for as long as the flood lasts.
 *
 * What a forger cannot fake cheaply is what MailChannels does for a real id: come back, again
 * and again, over minutes (its retries of an answered-503 delivery, and its steady stream).
 * So: an id seen for the first time may only spend the unreserved half of the bucket; the
 * reserved half goes to ids that recur, best-ranked first; a recurring id may take a token
 * only while more tokens remain than there are live ids ranked above it, so a lower-ranked
 * id never takes the token a better one is waiting for.
 *
 * Rank is the number of sightings, counted at most once per SIGHTING_GAP per id (a burst of
 * copies is one sighting), ties broken by the earlier first sighting. Making a random id
 * "recur" therefore costs time, not just requests: to outrank the real id an attacker must
 * show each of their ids as many times, as far apart, as MailChannels has shown the real one,
 * and the real id's count grows with every retry. An id ranked above it spends a token as
 * soon as it is shown with one available, and is then negatively cached: it stops competing.
 * Sending each random id twice (the cheap counter-move) buys nothing once the real id has been
 * seen three times. What remains: an attacker who keeps many ids, each shown more often than
 * MailChannels retries, can still delay a new key id, at a cost that grows with the delay;
 * configuring `keyIds` or `publicKey` removes the question.
 *
 * Memory is bounded: first sightings live in an LRU (a one-off flood only churns that), ranked
 * ids in a small table where a newcomer replaces the lowest-ranked entry only if it outranks it.
 */

/** Sightings of one id count once per this many ms. */
export const SIGHTING_GAP_MS = 5_000
/** An id not seen for this long stops holding tokens back for itself. */
export const LIVE_MS = 10 * 60_000
/** An id not seen for this long is forgotten. */
export const WINDOW_MS = 60 * 60_000
/** Ids remembered with their sightings (first sightings included). */
export const MAX_SEEN = 4096
/** Recurring ids ranked for the reserved tokens. */
export const MAX_RANKED = 256

interface Sighting {
  first: number
  /** When the count last went up. */
  countedAt: number
  last: number
  count: number
}

/** Higher count first; then the earlier first sighting. */
function outranks (a: Sighting, b: Sighting): boolean {
  return a.count > b.count || (a.count === b.count && a.first < b.first)
}

/** Decides which unknown key ids may spend the fetch budget. Not exported from the package. */
export class RecurrenceGate {
  readonly #reserve: number
  readonly #now: () => number
  readonly #seen: TtlCache<string, Sighting>
  readonly #ranked = new Map<string, Sighting>()

  /** @param budget fetches per minute; half of it (rounded down) is reserved for recurring ids. */
  constructor (budget: number, now: () => number) {
    this.#reserve = Math.floor(budget / 2)
    this.#now = now
    this.#seen = new TtlCache({ max: MAX_SEEN, ttl: WINDOW_MS, now })
  }

  /**
   * Records a sighting of `keyId` (an id neither cached nor negatively cached) and says
   * whether it may take one of the `tokens` left in the bucket now.
   */
  admit (keyId: string, tokens: number): boolean {
    const now = this.#now()
    let s = this.#ranked.get(keyId)
    if (s !== undefined && now - s.last >= WINDOW_MS) {
      this.#ranked.delete(keyId) // forgotten: starts again as a first sighting
      s = undefined
    }
    s ??= this.#seen.get(keyId)
    if (s === undefined) {
      s = { first: now, countedAt: now, last: now, count: 1 }
      this.#seen.set(keyId, s)
    } else {
      s.last = now
      if (now - s.countedAt >= SIGHTING_GAP_MS) {
        s.count++
        s.countedAt = now
      }
      if (!this.#ranked.has(keyId)) this.#seen.set(keyId, s) // refresh its place and TTL
    }
    // Ranked even when no token is left, so that lower-ranked ids leave the next one to it.
    if (s.count >= 2 && (this.#ranked.has(keyId) || this.#rank(keyId, s, now))) {
      if (tokens < 1) return false
      // Leave a token for every live id ranked above this one.
      let above = 0
      for (const other of this.#ranked.values()) {
        if (other !== s && now - other.last < LIVE_MS && outranks(other, s) && ++above > tokens - 1) return false
      }
      return true
    }
    // A first sighting (or an id the ranked table has no room for) gets only the unreserved share.
    return tokens >= 1 + this.#reserve
  }

  /** The fetch of `keyId` gave a final answer (a key, or "not found"): it no longer competes. */
  settled (keyId: string): void {
    this.#ranked.delete(keyId)
    this.#seen.delete(keyId)
  }

  clear (): void {
    this.#ranked.clear()
    this.#seen.clear()
  }

  /** Moves a recurring id into the ranked table, if it has room or the id outranks its lowest entry. */
  #rank (keyId: string, s: Sighting, now: number): boolean {
    if (this.#ranked.size >= MAX_RANKED) {
      let lowestId: string | undefined
      let lowest: Sighting | undefined
      for (const [id, other] of this.#ranked) {
        if (now - other.last >= WINDOW_MS) { // forgotten: its place is free
          lowestId = id
          lowest = undefined
          break
        }
        if (lowest === undefined || outranks(lowest, other)) {
          lowestId = id
          lowest = other
        }
      }
      if (lowest !== undefined && !outranks(s, lowest)) return false
      this.#ranked.delete(lowestId!)
    }
    this.#seen.delete(keyId)
    this.#ranked.set(keyId, s)
    return true
  }
}
