import { ReplayStoreError } from './errors.js'
import {
  afterCursor, checkFingerprint, checkQuery, encodeCursor, eventJson, newestFirst, retryToken, toDeadLetter,
  type DeadLetter, type DeadLetterError, type DeadLetterFailure, type DeadLetterPage, type DeadLetterQuery,
  type DeadLetterRetry, type DeadLetterStore, type RecordedFailure, type StoredLetter,
} from './dead-letters-types.js'
import { DEFAULT_CLAIM_TTL } from './claim-store.js'
import { checkTtl } from './ttl.js'

export interface MemoryDeadLetterStoreOptions {
  /**
   * How long the failed attempts of an event not (yet) parked are remembered after its last
   * failure, in seconds. Parked events are kept until retried or discarded.
   * @default 259200 (seconds: 3 days)
   */
  ttl?: number
  /**
   * The most events kept (failing and parked together). Past it the oldest failing event is
   * forgotten; when only parked events are left, parking fails with `ReplayStoreError` (the event
   * then fails its delivery as without dead letters), so no dead letter is ever dropped silently.
   * @default 10000
   */
  max?: number
}

interface Entry extends StoredLetter {
  parked: boolean
  retryToken: string | null
  retryUntil: number
}

/**
 * Dead letters in this process's memory: for tests and a single instance whose seen events are in
 * memory too (`MemoryClaimStore`). Lost with the process, like those seen events.
 */
export class MemoryDeadLetterStore implements DeadLetterStore {
  readonly #entries = new Map<string, Entry>()
  readonly #ttlMs: number
  readonly #max: number

  constructor (options: MemoryDeadLetterStoreOptions = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('MemoryDeadLetterStore options must be an object')
    const ttl = options.ttl ?? DEFAULT_CLAIM_TTL
    checkTtl(ttl, 'ttl')
    const max = options.max ?? 10_000
    if (!Number.isSafeInteger(max) || max < 1) throw new TypeError('max must be a positive integer (events kept)')
    this.#ttlMs = ttl * 1000
    this.#max = max
  }

  async recordFailure (failure: DeadLetterFailure): Promise<RecordedFailure> {
    const now = Date.now()
    const fp = checkFingerprint(failure.fingerprint)
    let entry = this.#entries.get(fp)
    if (entry !== undefined && !entry.parked && entry.lastFailedAt + this.#ttlMs <= now) {
      this.#entries.delete(fp)
      entry = undefined
    }
    if (entry === undefined) {
      this.#makeRoom(now)
      entry = {
        fingerprint: fp,
        type: failure.event.event,
        event: eventJson(failure.event, fp),
        attempts: 0,
        firstFailedAt: now,
        lastFailedAt: now,
        parkedAt: 0,
        errorName: '',
        errorMessage: '',
        retryRequestedAt: null,
        source: failure.source ?? 'router',
        parked: false,
        retryToken: null,
        retryUntil: 0,
      }
      this.#entries.set(fp, entry)
    }
    entry.attempts++
    entry.lastFailedAt = now
    entry.errorName = failure.error.name
    entry.errorMessage = failure.error.message
    if (!entry.parked && entry.attempts >= failure.parkAfter) {
      entry.parked = true
      entry.parkedAt = now
    }
    return { attempts: entry.attempts, parked: entry.parked }
  }

  async clearFailures (fingerprints: readonly string[]): Promise<void> {
    for (const fp of fingerprints) {
      const entry = this.#entries.get(fp)
      if (entry !== undefined && !entry.parked) this.#entries.delete(fp)
    }
  }

  async list (query?: DeadLetterQuery): Promise<DeadLetterPage> {
    const q = checkQuery(query)
    const matching = [...this.#entries.values()].filter((e) => e.parked &&
      (q.type === undefined || e.type === q.type) &&
      (q.before === undefined || e.parkedAt < q.before) &&
      (q.after === undefined || e.parkedAt >= q.after) &&
      (!q.requested || e.retryRequestedAt !== null) &&
      afterCursor(e.parkedAt, e.fingerprint, q.cursor))
    matching.sort(newestFirst)
    const page = matching.slice(0, q.limit)
    const last = page[page.length - 1]
    return { items: page.map(toDeadLetter), ...(matching.length > q.limit && last !== undefined ? { next: encodeCursor(last.parkedAt, last.fingerprint) } : {}) }
  }

  async get (fingerprint: string): Promise<DeadLetter | undefined> {
    const entry = this.#entries.get(checkFingerprint(fingerprint))
    return entry?.parked === true ? toDeadLetter(entry) : undefined
  }

  async discard (fingerprint: string): Promise<boolean> {
    const fp = checkFingerprint(fingerprint)
    const entry = this.#entries.get(fp)
    if (entry?.parked !== true) return false
    this.#entries.delete(fp)
    return true
  }

  async requestRetry (fingerprint: string): Promise<boolean> {
    const entry = this.#entries.get(checkFingerprint(fingerprint))
    if (entry?.parked !== true) return false
    entry.retryRequestedAt = Date.now()
    return true
  }

  async claimRetry (fingerprint: string, lifetimeSeconds: number): Promise<DeadLetterRetry | 'missing' | 'busy'> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    const entry = this.#entries.get(checkFingerprint(fingerprint))
    if (entry?.parked !== true) return 'missing'
    const now = Date.now()
    if (entry.retryToken !== null && entry.retryUntil > now) return 'busy'
    entry.retryToken = retryToken()
    entry.retryUntil = now + lifetimeSeconds * 1000
    return { fingerprint: entry.fingerprint, token: entry.retryToken, letter: toDeadLetter(entry) }
  }

  async resolveRetry (retry: DeadLetterRetry): Promise<void> {
    const entry = this.#entries.get(retry.fingerprint)
    if (entry !== undefined && entry.retryToken === retry.token) this.#entries.delete(retry.fingerprint)
  }

  async failRetry (retry: DeadLetterRetry, error: DeadLetterError): Promise<void> {
    const entry = this.#entries.get(retry.fingerprint)
    if (entry === undefined || entry.retryToken !== retry.token) return
    const now = Date.now()
    entry.attempts++
    entry.lastFailedAt = now
    entry.parkedAt = now
    entry.errorName = error.name
    entry.errorMessage = error.message
    entry.retryRequestedAt = null
    entry.retryToken = null
    entry.retryUntil = 0
  }

  /** Forgets expired failing events, then the oldest failing one if still full; refuses when only dead letters fill it. */
  #makeRoom (now: number): void {
    if (this.#entries.size < this.#max) return
    for (const [fp, e] of this.#entries) if (!e.parked && e.lastFailedAt + this.#ttlMs <= now) this.#entries.delete(fp)
    if (this.#entries.size < this.#max) return
    for (const [fp, e] of this.#entries) {
      if (!e.parked) { this.#entries.delete(fp); return }
    }
    throw new ReplayStoreError('park', `The memory dead-letter store holds its maximum of ${this.#max} dead letters: retry or discard some.`)
  }
}
