// The claim bookkeeping of one dispatch with a seen-events store: the events' claims taken in one
// call, which of them are still held (what renewal extends while handlers run), and the done marks
// and releases handed back, grouped into few store calls.
import type { Logger } from '../logger.js'
import { ReplayStoreError } from '../replay/errors.js'
import { CLAIMED, DONE, REPEATED, synchronousClaims, type SynchronousClaims } from '../replay/memory-claim-store.js'
import { isTransactionalStore, type StoreClaim, type StoreClaimResult, type ClaimStore } from '../replay/claim-store.js'
import { DEFERRED, SKIPPED, type Outcomes } from './report.js'
import { isDeliveryTransactionStore } from './types.js'
import { errorSummary, storeError } from './store-errors.js'

/** What claim renewal needs of the dispatch it keeps alive. */
export interface Renewable {
  readonly stopped: boolean
  readonly finished: boolean
  /** Gives the dispatch up (a renewal failed). */
  stop (reason: unknown): void
}

/** The claims of one dispatch. Events are named by their index in the dispatch. */
export class Claims {
  /** The memory store's synchronous methods (no promise, no claim object per event), else null. */
  readonly sync: SynchronousClaims | null
  /**
   * By event index: `HELD` while its claim is held and not yet handed to complete or release
   * (what renewal extends), `LAPSED` once renewal found it lost, else 0.
   */
  #holding: Uint8Array | undefined
  #heldCount = 0
  /** By event index, for a store called through its promises: the claims. */
  #claims: (StoreClaim | undefined)[] | undefined
  /** The synchronous store's one claim on this dispatch's events. */
  #syncClaim: object | undefined
  /** Fingerprints handled and not yet marked done in the synchronous store (written in one call). */
  #toMark: string[] = []
  /**
   * Set once the dispatch first waits for a handler: done marks are then written at the end of
   * each synchronous stretch of handlers (a microtask), not only when the dispatch ends.
   */
  #waiting = false
  #completes: Batch | undefined
  #releases: Batch | undefined
  #renewal: ReturnType<typeof setInterval> | undefined

  constructor (
    readonly store: ClaimStore,
    readonly claimLifetime: number,
    readonly outcomes: Outcomes,
    readonly log: Logger,
  ) {
    this.sync = synchronousClaims(store)
  }

  /** Whether the claims were taken through the store's promises (one claim object per event). */
  get viaPromises (): boolean {
    return this.#claims !== undefined
  }

  /** Event `i`'s claim, when the claims were taken through the store's promises. */
  claimOf (i: number): StoreClaim | undefined {
    return this.#claims?.[i]
  }

  /** Whether event `i`'s claim is held: taken, and not yet handed to complete or release. */
  held (i: number): boolean {
    return this.#holding !== undefined && this.#holding[i] === HELD
  }

  /**
   * Whether event `i`'s claim lapsed while its handlers ran: the event has failed (503, retried)
   * and is left to whoever holds it now, whatever its handlers still do.
   */
  lapsed (i: number): boolean {
    return this.#holding !== undefined && this.#holding[i] === LAPSED
  }

  /** Claims every event in one call of the synchronous store; returns the indexes now ours to run. */
  claimSynchronously (indexes: number[]): number[] {
    const { outcomes } = this
    const fps = new Array<string>(indexes.length)
    for (let k = 0; k < indexes.length; k++) fps[k] = outcomes.fingerprints[indexes[k]!]!
    const results = new Uint8Array(indexes.length)
    this.#syncClaim = this.sync!.claim(fps, this.claimLifetime, results)
    const holding = this.#holding = new Uint8Array(outcomes.events.length)
    const mine: number[] = []
    let first: Map<string, number> | undefined
    for (let k = 0; k < indexes.length; k++) {
      const i = indexes[k]!
      const result = results[k]!
      if (result === CLAIMED) { holding[i] = HELD; mine.push(i) } else if (result === REPEATED) {
        // A copy of an event earlier in this delivery: reported as its first copy is.
        if (first === undefined) {
          first = new Map()
          for (let j = indexes.length - 1; j >= 0; j--) first.set(fps[j]!, indexes[j]!)
        }
        outcomes.duplicate(i, first.get(fps[k]!)!)
      } else outcomes.status[i] = result === DONE ? SKIPPED : DEFERRED
    }
    this.#heldCount = mine.length
    return mine
  }

  /** Claims every event in one store call; returns the indexes now ours to run. */
  async claim (indexes: number[]): Promise<number[]> {
    const { outcomes } = this
    const fps = indexes.map((i) => outcomes.fingerprints[i]!)
    const holding = this.#holding = new Uint8Array(outcomes.events.length)
    const claims: (StoreClaim | undefined)[] = this.#claims = new Array(outcomes.events.length)
    let results: unknown
    try {
      results = await this.store.claim(fps, this.claimLifetime)
      checkClaimReply(results, fps)
    } catch (err) {
      const error = storeError('claim', err)
      // A malformed reply may still hold real claims: give back whatever looks like one.
      if (Array.isArray(results)) {
        const replies: unknown[] = results
        indexes.forEach((i, k) => {
          const r = replies[k]
          if (isClaim(r) && r.fingerprint === fps[k]) { claims[i] = r; holding[i] = HELD; this.#heldCount++ }
        })
      }
      for (const i of indexes) {
        outcomes.fail(i, error)
        this.release(i)
      }
      return []
    }
    const mine: number[] = []
    for (let k = 0; k < indexes.length; k++) {
      const i = indexes[k]!
      const result = results[k]!
      if (result === 'done') outcomes.status[i] = SKIPPED
      else if (result === 'processing') outcomes.status[i] = DEFERRED
      else { claims[i] = result; holding[i] = HELD; this.#heldCount++; mine.push(i) }
    }
    return mine
  }

  /** Takes event `i`'s claim out of the held ones (no more renewal), to complete or release it; whether it held one. */
  handOff (i: number): boolean {
    const holding = this.#holding
    if (holding === undefined || holding[i] !== HELD) return false
    holding[i] = 0
    this.#heldCount--
    return true
  }

  /** Marks event `i` done, if its claim is held: its handlers resolved. */
  complete (i: number): void {
    if (!this.handOff(i)) return
    if (this.sync !== null) {
      // Marked done in one call when this synchronous stretch of handlers ends: when the dispatch
      // first waits (`renew`), then in a microtask, or when it ends (`cleanUp`).
      if (this.#toMark.push(this.outcomes.fingerprints[i]!) === 1 && this.#waiting) queueMicrotask(() => { this.markDone() })
      return
    }
    (this.#completes ??= new Batch(async (claims, indexes) => { await this.#writeCompletes(claims, indexes) })).add(this.#claims![i]!, i)
  }

  /** Releases event `i`'s claim, if it is held, so a retry handles the event. */
  release (i: number): void {
    if (!this.handOff(i)) return
    if (this.sync !== null) { this.sync.release(this.#syncClaim!, [this.outcomes.fingerprints[i]!]); return }
    (this.#releases ??= new Batch(async (claims) => { await this.#writeReleases(claims) })).add(this.#claims![i]!, i)
  }

  /** Writes the synchronous store's pending done marks. */
  markDone (): void {
    if (this.#toMark.length === 0) return
    const fps = this.#toMark
    this.#toMark = []
    this.sync!.complete(fps)
  }

  /**
   * Called before the dispatch waits for a handler: the done marks of the events handled so far
   * are written, and claims held from now on are renewed.
   */
  renew (dispatch: Renewable): void {
    if (!this.#waiting) {
      this.#waiting = true
      this.markDone()
    }
    if (this.#renewal === undefined && this.#heldCount > 0) this.#renewal = this.#startRenewal(dispatch)
  }

  /** The handlers are done: renewal stops, pending done marks are written. */
  cleanUp (): void {
    if (this.#renewal !== undefined) clearInterval(this.#renewal)
    this.markDone()
  }

  /** Resolves once every done mark and release handed over has been written (or failed). */
  async settled (): Promise<void> {
    if (this.#completes !== undefined) await this.#completes.settled()
    if (this.#releases !== undefined) await this.#releases.settled()
  }

  /**
   * Renews the held claims every third of their lifetime; gives the dispatch up if that fails,
   * or if a claim had lapsed (a pause of the process longer than two thirds of `claimLifetime`).
   */
  #startRenewal (dispatch: Renewable): ReturnType<typeof setInterval> {
    let busy = false
    const holding = this.#holding!
    // A store that runs handlers in its own transactions checks the claim when it commits (the
    // done mark is written only where the claim still holds): that check decides, not renewal,
    // which may answer after the commit and before the event is handed off.
    const commitDecides = isTransactionalStore(this.store) || isDeliveryTransactionStore(this.store)
    const timer = setInterval(() => {
      if (busy || this.#heldCount === 0 || dispatch.stopped) return
      if (this.sync !== null) {
        // Every event still holding the synchronous claim is one not yet handed to complete or release.
        if (!this.sync.extend(this.#syncClaim!, this.claimLifetime)) this.#lapse(heldIndexes(holding), dispatch)
        return
      }
      busy = true
      const indexes = heldIndexes(holding)
      const claims = indexes.map((i) => this.#claims![i]!)
      this.store.extend(claims, this.claimLifetime).then((kept: unknown) => {
        busy = false
        if (dispatch.finished || commitDecides || kept === undefined) return
        if (!Array.isArray(kept) || kept.length !== claims.length || !kept.every((k) => typeof k === 'boolean')) {
          throw new ReplayStoreError('extend', 'The seen-events store answered extend with an unexpected result.')
        }
        // Only claims still held now: one handed to complete or release meanwhile may be gone for that reason.
        const lapsed = indexes.filter((i, k) => kept[k] === false && holding[i] === HELD)
        if (lapsed.length > 0) this.#lapse(lapsed, dispatch)
      }).catch((err: unknown) => {
        busy = false
        if (dispatch.finished) return
        const error = storeError('extend', err)
        this.log.error({ err: errorSummary(error), fingerprints: claims.map((c) => c.fingerprint) },
          'webhook event claims could not be renewed; the dispatch is given up')
        dispatch.stop(error)
      })
    }, (this.claimLifetime * 1000) / 3)
    // Never keep a process alive just to renew claims.
    ;(timer as any).unref?.()
    return timer
  }

  /**
   * These events' claims lapsed while their handlers ran: another caller may hold them now, so
   * the events fail (never acknowledged here, never marked done or released by this dispatch)
   * and the dispatch is given up, its handlers' signal aborted.
   */
  #lapse (indexes: readonly number[], dispatch: Renewable): void {
    const holding = this.#holding!
    const error = new ReplayStoreError('extend', `${indexes.length} webhook event claim${indexes.length === 1 ? '' : 's'} lapsed while the delivery's handlers ran ` +
      '(the process paused for longer than two thirds of claimLifetime): another delivery may be handling those events.')
    for (const i of indexes) {
      holding[i] = LAPSED
      this.#heldCount--
      this.outcomes.fail(i, error)
    }
    this.log.error({ err: errorSummary(error), fingerprints: indexes.map((i) => this.outcomes.fingerprints[i]!) },
      'webhook event claims lapsed while their handlers ran; the dispatch is given up')
    dispatch.stop(error)
  }

  async #writeCompletes (claims: StoreClaim[], indexes: number[]): Promise<void> {
    try {
      await this.store.complete(claims)
    } catch (err) {
      // The handlers ran, but the done mark may not have been written (or not durably, with
      // waitForReplicas): never acknowledge such an event. It fails with the store error, so the
      // delivery is answered 503 and retried; the retry skips it if the mark did land. The claim
      // is kept (not released): it expires on its own, so a retry meanwhile is deferred.
      this.log.error({ err: errorSummary(err), fingerprints: claims.map((c) => c.fingerprint) },
        'webhook events were handled but could not be marked done in the seen-events store')
      const error = storeError('complete', err)
      for (const i of indexes) this.outcomes.fail(i, error)
    }
  }

  async #writeReleases (claims: StoreClaim[]): Promise<void> {
    try {
      await this.store.release(claims)
    } catch (err) {
      this.log.warn({ err: errorSummary(err), fingerprints: claims.map((c) => c.fingerprint) },
        'webhook event claims could not be released; they expire on their own')
    }
  }
}

/** `Claims.#holding` values. */
const HELD = 1
const LAPSED = 2

function heldIndexes (holding: Uint8Array): number[] {
  const indexes: number[] = []
  for (let i = 0; i < holding.length; i++) if (holding[i] === HELD) indexes.push(i)
  return indexes
}

/**
 * Groups store writes: claims added while a call is in flight go together in the next call,
 * so a dispatch of many events costs a few round trips, not one per event.
 */
class Batch {
  #claims: StoreClaim[] = []
  #indexes: number[] = []
  #running: Promise<void> | undefined

  /** `write` never rejects: it handles its own failure. */
  constructor (readonly write: (claims: StoreClaim[], indexes: number[]) => Promise<void>) {}

  add (claim: StoreClaim, index: number): void {
    this.#claims.push(claim)
    this.#indexes.push(index)
    this.#running ??= this.#drain()
  }

  async #drain (): Promise<void> {
    // Let the handlers that resolve in the same tick join this call.
    await Promise.resolve()
    while (this.#claims.length > 0) {
      const claims = this.#claims
      const indexes = this.#indexes
      this.#claims = []
      this.#indexes = []
      await this.write(claims, indexes)
    }
    this.#running = undefined
  }

  /** Resolves once everything added has been written (or failed). */
  async settled (): Promise<void> {
    while (this.#running !== undefined) await this.#running
  }
}

function checkClaimReply (results: unknown, fps: readonly string[]): asserts results is StoreClaimResult[] {
  if (!Array.isArray(results) || results.length !== fps.length) {
    throw new ReplayStoreError('claim', 'The seen-events store answered claim with the wrong number of results.')
  }
  results.forEach((r, k) => {
    if (r !== 'done' && r !== 'processing' && !(isClaim(r) && r.fingerprint === fps[k])) {
      throw new ReplayStoreError('claim', 'The seen-events store answered claim with an unexpected result.')
    }
  })
}

function isClaim (r: unknown): r is StoreClaim {
  return r !== null && typeof r === 'object' && typeof (r as StoreClaim).fingerprint === 'string' && typeof (r as StoreClaim).token === 'string'
}
