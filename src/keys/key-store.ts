import { sameKey } from '#crypto'
import type { VerifyKey } from '../crypto/types.js'
import { DEFAULT_BASE_URL, parseBaseUrl } from '../base-url.js'
import { keyFetchEnded, keyFetchStarted } from '../diagnostics/key-fetch.js'
import { VerificationError } from '../errors.js'
import { noopLogger, type Logger } from '../logger.js'
import { KEY_ID_RULE, isKeyId } from './key-id.js'
import { fetchPublicKey, publicKeyUrl, type KeyFetchError } from './fetch-public-key.js'
import { RecurrenceGate } from './recurrence-gate.js'
import { TtlCache } from './ttl-cache.js'

/** Options of a `KeyStore`. Every value is validated once, at construction. */
export interface KeyStoreOptions {
  /**
   * Where keys are fetched: `<baseUrl>/tx/v1/webhook/public-key?id=<keyId>` (`http:` only for loopback hosts).
   * @default 'https://api.mailchannels.net'
   */
  baseUrl?: string
  /**
   * The fetch implementation. It is called with `redirect: 'manual'`; any redirect is a failed fetch.
   * @default globalThis.fetch
   */
  fetch?: typeof globalThis.fetch
  /**
   * Most keys held.
   * @default 100
   */
  maxKeys?: number
  /**
   * Seconds a fetched key is used before it is fetched again.
   * @default 3600
   */
  keyTtl?: number
  /**
   * Seconds past `keyTtl` a key may still be used while the endpoint is failing (a trade-off against revocation).
   * @default 3600
   */
  maxStale?: number
  /**
   * Seconds an unknown key id (HTTP 404) is remembered, so it is not fetched again.
   * @default 300
   */
  unknownKeyTtl?: number
  /**
   * Seconds a failed fetch (down, slow, garbage) is remembered before trying again.
   * @default 30
   */
  errorTtl?: number
  /**
   * Milliseconds before a key fetch is abandoned.
   * @default 3000
   */
  fetchTimeout?: number
  /**
   * Seconds between forced refreshes of one key id. When a signature fails with a cached key,
   * the key is fetched again (it may have been rotated under the same id), at most once per
   * this many seconds per key id, and never for a key fetched more recently.
   * @default 30
   */
  refreshCooldown?: number
  /**
   * Fetch budget for key ids not cached: at most this many fetches per minute, whatever the
   * ids. Half of it (rounded down) is kept for ids that come back (MailChannels retries every
   * delivery it could not hand over), best first by how many times, at least 5 s apart, they
   * came back; an id seen for the first time may only use the other half. Refreshes of cached
   * ids and the `prefetch` of configured ids are outside the budget.
   * @default 10
   */
  fetchesPerMinute?: number
  /**
   * Most key fetches in flight at once.
   * @default 2
   */
  maxConcurrentFetches?: number
  /**
   * Most remembered failures (the negative cache).
   * @default 1000
   */
  maxFailures?: number
  /**
   * Clock in milliseconds, for tests.
   * @default Date.now
   */
  now?: () => number
  /**
   * Where fetch failures are logged (warn), with the URL, the key id, the cause (`timeout`,
   * `dns`, `connection_refused`, `connection_reset`, `tls`, `http_status`, `not_found`,
   * `redirect`, `invalid_key`, `invalid_response`, `budget`...), the HTTP status and how long
   * until the next try (`retryInSeconds`). A lookup's own logger (`verify`'s `logger` option)
   * takes precedence.
   * @default nowhere
   */
  logger?: Logger
}

/** Counters, for tests, metrics and the soak run. */
export interface KeyStoreStats {
  /** Fetches sent to the key endpoint. */
  fetches: number
  /** Lookups answered from the negative cache. */
  negativeHits: number
  /** Lookups refused because the fetch budget or concurrency cap was spent. */
  budgetRejections: number
  /** Keys held. */
  keys: number
  /** Failures held. */
  failures: number
}

interface Entry { key: VerifyKey, fetchedAt: number }

/** `prefetch` remembers at most this many key ids. */
const MAX_PREFETCHED = 64
const DONE: Promise<void> = Promise.resolve()
const notFetched = (): VerificationError => new VerificationError('key_unavailable', 'The signing key could not be fetched.', 30)

/** Options with `baseUrl` as `parseBaseUrl` returns it: what the store itself reads (defaults filled in there). */
type Checked = KeyStoreOptions & { baseUrl: string }

/** An option given must be a positive number (or integer); undefined and null mean its default. */
function check (value: unknown, name: string, integer = false): void {
  if (value === undefined || value === null) return
  if (typeof value !== 'number' || !(value > 0) || !Number.isFinite(value) || (integer && !Number.isInteger(value))) {
    throw new TypeError(`${name} must be a positive ${integer ? 'integer' : 'number'}`)
  }
}

/** Validates `KeyStoreOptions` once, at construction: a `TypeError` names the option. */
function checkedOptions (options: KeyStoreOptions): Checked {
  if (options === null || typeof options !== 'object') throw new TypeError('KeyStore options must be an object')
  const baseUrl = parseBaseUrl(options.baseUrl ?? DEFAULT_BASE_URL)
  if (options.fetch !== undefined && typeof options.fetch !== 'function') throw new TypeError('fetch must be a function')
  if (options.now !== undefined && typeof options.now !== 'function') throw new TypeError('now must be a function returning milliseconds')
  for (const name of ['keyTtl', 'maxStale', 'unknownKeyTtl', 'errorTtl', 'fetchTimeout', 'refreshCooldown'] as const) {
    if (name !== 'maxStale' || options.maxStale !== 0) check(options[name], name)
  }
  for (const name of ['fetchesPerMinute', 'maxConcurrentFetches', 'maxKeys', 'maxFailures'] as const) check(options[name], name, true)
  return { ...options, baseUrl }
}

/**
 * Everything of `KeyStore` but the validation of its options: the stores the library makes itself
 * (`keyStoreFor`) are built from settings known to be valid, so a bundle that never calls
 * `new KeyStore(...)` (a Worker that only verifies) leaves the validation and its messages out
 * (docs/design-notes.md, "The edge bundle"). Not exported from the package: every instance a user
 * can hold is a `KeyStore` or one of the library's own.
 */
class KeyCache {
  /** A stale key stays held (not returned) so a failed refresh can fall back to it. */
  readonly #keys: TtlCache<string, Entry>
  readonly #failures: TtlCache<string, VerificationError>
  readonly #baseUrl: string
  readonly #fetch: typeof globalThis.fetch
  readonly #now: () => number
  readonly #log: Logger
  readonly #keyTtl: number
  readonly #maxStale: number
  readonly #unknownKeyTtl: number
  readonly #errorTtl: number
  readonly #fetchTimeout: number
  readonly #budget: number
  readonly #maxConcurrent: number
  readonly #refreshCooldown: number
  /** Key ids refreshed within the cooldown, and the refresh in flight per key id. */
  readonly #refreshedAt: TtlCache<string, number>
  readonly #refreshing = new Map<string, Promise<VerifyKey | undefined>>()
  readonly #gate: RecurrenceGate
  #tokens: number
  #refilledAt: number
  #inFlight = 0
  #budgetLoggedAt = -Infinity
  #budgetLoggedCount = 0
  /** Single flight: the fetch in progress per key id. */
  readonly #pending = new Map<string, Promise<Entry>>()
  /** The fetches in flight, aborted by `clear()` (a key fetched before it must not come back after). */
  readonly #aborts = new Set<AbortController>()
  /** Counts `clear()` calls: a fetch started before one must not put its key back after it. */
  #generation = 0
  /** Key ids `prefetch` already fetched (or tried): it fetches each once. */
  readonly #prefetched = new Set<string>()
  readonly #stats = { fetches: 0, negativeHits: 0, budgetRejections: 0 }

  /** The defaults are those `KeyStoreOptions` documents. */
  constructor (o: Checked) {
    this.#baseUrl = o.baseUrl
    this.#fetch = o.fetch ?? ((input, init) => globalThis.fetch(input, init))
    this.#now = o.now ?? Date.now
    this.#log = o.logger ?? noopLogger
    this.#keyTtl = (o.keyTtl ?? 3600) * 1000
    this.#maxStale = (o.maxStale ?? 3600) * 1000
    this.#unknownKeyTtl = (o.unknownKeyTtl ?? 300) * 1000
    this.#errorTtl = (o.errorTtl ?? 30) * 1000
    this.#fetchTimeout = o.fetchTimeout ?? 3000
    this.#budget = o.fetchesPerMinute ?? 10
    this.#maxConcurrent = o.maxConcurrentFetches ?? 2
    this.#refreshCooldown = (o.refreshCooldown ?? 30) * 1000
    this.#tokens = this.#budget
    this.#refilledAt = this.#now()
    this.#gate = new RecurrenceGate(this.#budget, this.#now)
    const now = (): number => this.#now()
    this.#failures = new TtlCache({ max: o.maxFailures ?? 1000, ttl: this.#errorTtl, now })
    this.#refreshedAt = new TtlCache({ max: o.maxKeys ?? 100, ttl: this.#refreshCooldown, now })
    this.#keys = new TtlCache({ max: o.maxKeys ?? 100, ttl: this.#keyTtl, now, keepStale: true })
  }

  /** The base URL keys are fetched from. */
  get baseUrl (): string { return this.#baseUrl }

  /**
   * A fresh cached key, synchronously, or `undefined`. The verify hot path uses this so
   * a cached key costs no promise.
   */
  peek (keyId: string): VerifyKey | undefined {
    return this.#keys.get(keyId)?.key
  }

  /**
   * The key for `keyId`, fetched at most once at a time. Rejects with a `VerificationError`
   * (`unknown_key` or `key_unavailable`). `logger`, when given, receives this lookup's
   * fetch-failure lines instead of the store's own logger.
   */
  async get (keyId: string, logger?: Logger): Promise<VerifyKey> {
    const cached = this.peek(keyId)
    if (cached !== undefined) return cached
    const failure = this.#failures.get(keyId)
    if (failure !== undefined) {
      this.#stats.negativeHits++
      throw failure
    }
    const log = this.#logger(logger)
    let pending = this.#pending.get(keyId)
    if (pending === undefined) {
      // Spend the budget before fetching: a flood of random key ids must not reach the endpoint.
      // A key id already known (a stale real key) refreshes outside the budget: the budget
      // guards against unknown ids, and a flood of them must not starve the real key.
      const known = this.#keys.get(keyId, true) !== undefined
      if (!known && !this.#takeToken(keyId)) {
        this.#stats.budgetRejections++
        const err = new VerificationError('key_unavailable', 'The signing key could not be fetched now: the key-fetch budget is spent. MailChannels will retry the delivery.', 60)
        // Under a flood this happens on every request: log it once per 10 s, with a count.
        const now = this.#now()
        if (now - this.#budgetLoggedAt >= 10_000) {
          log.warn({
            url: publicKeyUrl(this.#baseUrl, keyId).href,
            keyId,
            cause: 'budget',
            // Nothing is remembered: the budget refills one fetch every this many seconds.
            retryInSeconds: Math.ceil(60 / this.#budget),
            rejectedSinceLastLog: this.#stats.budgetRejections - this.#budgetLoggedCount,
          }, `mailchannels-webhooks: a key fetch was refused: the key-fetch budget is spent (a flood of unknown key ids?); next try in ${Math.ceil(60 / this.#budget)} s`)
          this.#budgetLoggedAt = now
          this.#budgetLoggedCount = this.#stats.budgetRejections
        }
        throw err
      }
      pending = this.#startFetch(keyId, log)
    }
    try {
      return (await pending).key
    } catch (err) {
      // e.g. the abort when clear() runs during a fetch: still a typed, retryable failure.
      throw err instanceof VerificationError ? err : notFetched()
    }
  }

  /**
   * Called when a signature did not verify with `failed`, the cached key of `keyId`: fetches
   * the key again in case it was rotated under the same id. At most one
   * fetch per key id per `refreshCooldown`, never for a key younger than that, and within
   * the global budget, so bad signatures cannot flood the endpoint. Resolves the new key
   * when it differs from `failed`, else `undefined`. Never rejects.
   */
  refresh (keyId: string, failed: VerifyKey, logger?: Logger): Promise<VerifyKey | undefined> {
    const inFlight = this.#refreshing.get(keyId)
    if (inFlight !== undefined) return inFlight
    const entry = this.#keys.get(keyId, true)
    const now = this.#now()
    // Outside the global budget (so a flood of unknown ids cannot block a rotation): bounded by
    // the cooldown per known key id, and known ids only come from keys the endpoint served.
    // A key other than `failed` was refreshed meanwhile: that one.
    if (entry === undefined || entry.key !== failed || now - entry.fetchedAt < this.#refreshCooldown || this.#refreshedAt.has(keyId)) {
      return Promise.resolve(entry?.key === failed ? undefined : entry?.key)
    }
    this.#refreshedAt.set(keyId, now)
    const refreshing = this.#refetch(keyId, failed, this.#logger(logger))
    this.#refreshing.set(keyId, refreshing)
    const done = (): void => { this.#refreshing.delete(keyId) }
    refreshing.then(done, done)
    return refreshing
  }

  async #refetch (keyId: string, failed: VerifyKey, log: Logger): Promise<VerifyKey | undefined> {
    try {
      const key = await this.#request(keyId, true)
      if (sameKey(key, failed)) {
        this.#keys.set(keyId, { key: failed, fetchedAt: this.#now() })
        return undefined
      }
      log.info({ keyId }, 'mailchannels-webhooks: the signing key changed under the same key id; using the new key')
      this.#keys.set(keyId, { key, fetchedAt: this.#now() })
      return key
    } catch (err) {
      // Keep the cached key: the endpoint failing is no reason to drop a key that worked.
      this.#logFailure(log, keyId, err, Math.ceil(this.#refreshCooldown / 1000), 'refreshing the signing key failed; the cached key stays in use')
      return undefined
    }
  }

  /**
   * One request to the endpoint (a fetch or a refresh), counted and published, abandoned after
   * `fetchTimeout` (`controller` is aborted with a `TimeoutError`, as `AbortSignal.timeout` does)
   * or when `controller` is aborted (by `clear()`). One controller for both, so no signal is chained
   * to another (`AbortSignal.any` is missing from Vercel's edge-runtime).
   */
  async #request (keyId: string, refresh: boolean, controller = new AbortController()): Promise<VerifyKey> {
    this.#inFlight++
    this.#stats.fetches++
    const timer = setTimeout(() => { controller.abort(new DOMException('The key fetch timed out.', 'TimeoutError')) }, this.#fetchTimeout)
    const startedAt = keyFetchStarted()
    try {
      const key = await fetchPublicKey(keyId, { baseUrl: this.#baseUrl, fetch: this.#fetch, signal: controller.signal })
      if (startedAt >= 0) keyFetchEnded(startedAt, keyId, this.#baseUrl, refresh, null)
      return key
    } catch (err) {
      if (startedAt >= 0) keyFetchEnded(startedAt, keyId, this.#baseUrl, refresh, err)
      throw err
    } finally {
      clearTimeout(timer)
      this.#inFlight--
    }
  }

  /**
   * Fetches the given key ids now, so the first delivery signed with one of them does not wait
   * for a fetch (and no flood of unknown ids can be ahead of it). Outside the fetch budget: these
   * ids come from your configuration (`keyIds`), not from requests. Each id is fetched once per
   * store; a failure is remembered and logged like any other, and later lookups retry as usual.
   * The promise resolves when every fetch has settled (also one an earlier call started) and
   * never rejects; a malformed key id throws a `TypeError` at once.
   */
  prefetch (keyIds: Iterable<string>, logger?: Logger): Promise<void> {
    let started: Array<Promise<unknown>> | undefined
    for (const keyId of keyIds) {
      if (!isKeyId(keyId)) throw new TypeError(`prefetch expects key ids of ${KEY_ID_RULE}`)
      let fetching = this.#pending.get(keyId)
      if (!this.#prefetched.has(keyId)) {
        if (this.#prefetched.size >= MAX_PREFETCHED) this.#prefetched.delete(this.#prefetched.values().next().value!)
        this.#prefetched.add(keyId)
        if (fetching === undefined && this.peek(keyId) === undefined && !this.#failures.has(keyId)) {
          fetching = this.#startFetch(keyId, this.#logger(logger))
          // A failed advance fetch is not remembered: it may have failed only because it ran
          // outside a request (Cloudflare Workers refuse I/O there), and the first delivery must
          // not inherit that failure for errorTtl. The next prefetch or lookup fetches again.
          fetching.catch(() => {
            this.#failures.delete(keyId)
            this.#prefetched.delete(keyId)
          })
        }
      }
      if (fetching !== undefined) (started ??= []).push(fetching.catch(() => {}))
    }
    // The common case (every id already warmed) costs no promise chain: it runs on every static verify.
    return started === undefined ? DONE : Promise.all(started).then(() => {})
  }

  /** Forgets every key and failure (e.g. after a known rotation). */
  clear (): void {
    this.#generation++
    for (const controller of this.#aborts) controller.abort(new DOMException('The key store was cleared.', 'AbortError'))
    this.#aborts.clear()
    this.#keys.clear()
    this.#failures.clear()
    this.#gate.clear()
    this.#prefetched.clear()
  }

  stats (): KeyStoreStats {
    return { ...this.#stats, keys: this.#keys.size, failures: this.#failures.size }
  }

  /**
   * Token bucket: `fetchesPerMinute` tokens, refilled continuously. Which unknown id may take
   * one is the recurrence gate's decision (first sightings only get the unreserved half).
   */
  #takeToken (keyId: string): boolean {
    const now = this.#now()
    this.#tokens = Math.min(this.#budget, this.#tokens + ((now - this.#refilledAt) * this.#budget) / 60_000)
    this.#refilledAt = now
    // The gate sees every sighting, even when no token could be taken now: that is how it learns what recurs.
    if (!this.#gate.admit(keyId, this.#tokens) || this.#inFlight >= this.#maxConcurrent) return false
    this.#tokens -= 1
    return true
  }

  /**
   * Starts the single-flight fetch of `keyId` (the caller has taken a budget token, or needs none).
   * A fetched key is held for `keyTtl` (or the shorter time a stale fallback sets); a failed
   * fetch drops the stale key it could not stand in for. `log` is the logger of the call that
   * started the fetch.
   */
  #startFetch (keyId: string, log: Logger): Promise<Entry> {
    const controller = new AbortController()
    this.#aborts.add(controller)
    const stale = this.#keys.get(keyId, true)
    const setOptions: { ttl?: number } = {}
    const generation = this.#generation
    const settled = (): void => { this.#aborts.delete(controller) }
    const pending = this.#load(keyId, stale, controller, setOptions, log).then((entry) => {
      settled()
      // Cleared meanwhile (the fetch was aborted, or had already ended): nothing comes back.
      if (this.#generation !== generation) throw controller.signal.reason
      this.#keys.set(keyId, entry, setOptions.ttl)
      return entry
    }, (err: unknown) => {
      settled()
      if (this.#generation === generation && this.#keys.get(keyId, true) === stale) this.#keys.delete(keyId)
      throw err
    })
    this.#pending.set(keyId, pending)
    const done = (): void => { this.#pending.delete(keyId) }
    pending.then(done, done)
    return pending
  }

  #logger (logger: Logger | undefined): Logger {
    return logger === undefined || logger === noopLogger ? this.#log : logger
  }

  /** The fetch itself; `setOptions.ttl` is how long to hold what it returns, when not `keyTtl`. */
  async #load (keyId: string, stale: Entry | undefined, controller: AbortController, setOptions: { ttl?: number }, log: Logger | undefined): Promise<Entry> {
    let key: VerifyKey
    try {
      key = await this.#request(keyId, false, controller)
    } catch (err) {
      /* c8 ignore next */
      const error = err instanceof VerificationError ? err : notFetched()
      // "Not found" is final for this id; after a transient failure it keeps its rank for the retry.
      if (error.type === 'unknown_key') this.#gate.settled(keyId)
      return this.#fallback(log ?? this.#log, keyId, stale, error, setOptions)
    }
    this.#gate.settled(keyId)
    return { key, fetchedAt: this.#now() }
  }

  /** After a failed fetch: serve a stale key within `maxStale`, else remember the failure and throw. */
  #fallback (log: Logger, keyId: string, stale: Entry | undefined, err: VerificationError, setOptions: { ttl?: number }): Entry {
    if (stale !== undefined && err.type === 'key_unavailable' && this.#now() - stale.fetchedAt < this.#keyTtl + this.#maxStale) {
      // Keep the stale key, and look again once errorTtl has passed.
      setOptions.ttl = Math.max(1, Math.min(this.#errorTtl, stale.fetchedAt + this.#keyTtl + this.#maxStale - this.#now()))
      this.#logFailure(log, keyId, err, Math.ceil(setOptions.ttl / 1000), 'fetching the signing key failed; the previous key stays in use until the next try', true)
      return stale
    }
    const ttl = err.type === 'unknown_key' ? this.#unknownKeyTtl : this.#errorTtl
    this.#failures.set(keyId, err, ttl)
    this.#logFailure(log, keyId, err, Math.ceil(ttl / 1000), err.type === 'unknown_key' ? 'the key id is unknown to MailChannels' : 'fetching the signing key failed')
    throw err
  }

  /** One warn line per failed fetch: where, why, and when the next try happens. Never a secret: the URL holds only the base URL and the key id. */
  #logFailure (log: Logger, keyId: string, err: unknown, retryInSeconds: number, what: string, servingStaleKey = false): void {
    // A failed fetch's error carries the log's fields; any other VerificationError does not.
    const f = err instanceof VerificationError ? err as Partial<KeyFetchError> : undefined
    const fields: Record<string, unknown> = {
      url: f?.url ?? publicKeyUrl(this.#baseUrl, keyId).href,
      keyId,
      cause: f?.reason ?? (err instanceof VerificationError ? err.type : 'network'),
      retryInSeconds,
    }
    if (f?.status !== undefined) fields.status = f.status
    if (servingStaleKey) fields.servingStaleKey = true
    log.warn(fields, `mailchannels-webhooks: ${what}: ${f?.detail ?? (err instanceof Error ? err.message : 'unknown error')}; next try in ${retryInSeconds} s`)
  }
}

/**
 * Fetches Ed25519 signing keys by key id, once, and keeps them safely:
 * a bounded LRU with TTL and single-flight fetches, a bounded negative cache, a global fetch
 * budget and concurrency cap, a fetch timeout, and a bounded stale window when the endpoint
 * fails. Keys are imported once and reused (a `KeyObject` on Node, a `CryptoKey` elsewhere).
 */
export class KeyStore extends KeyCache {
  constructor (options: KeyStoreOptions = {}) {
    super(checkedOptions(options))
  }
}

/**
 * A key store with the default settings, for `baseUrl` (as `parseBaseUrl` returns it) and
 * `logger`: what the library makes itself, without `KeyStore`'s validation of options it does not take.
 */
export function keyStoreFor (baseUrl: string, logger?: Logger): KeyStore {
  return new KeyCache({ baseUrl, logger })
}

/** Whether `value` is a key store (a `KeyStore`, or one `keyStoreFor` made). */
export function isKeyStore (value: unknown): value is KeyStore {
  return value instanceof KeyCache
}
