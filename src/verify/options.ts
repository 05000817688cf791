import type { CryptoKeyLike, KeyObjectLike, VerifyKey } from '../crypto/types.js'
import { DEFAULT_BASE_URL, parseBaseUrl } from '../base-url.js'
import type { CustomerHandlePolicy } from '../events/parse-events.js'
import { isKeyStore, keyStoreFor, type KeyStore } from '../keys/key-store.js'
import { importEd25519KeyObject, importEd25519PublicKey, KeyRejectedError } from '../keys/public-key.js'
import { noopLogger, type Logger } from '../logger.js'
import { KEY_ID_RULE, isKeyId } from '../keys/key-id.js'

export const DEFAULT_MAX_AGE = 300
export const DEFAULT_CLOCK_SKEW = 60
/**
 * The largest `maxAge` accepted: one day. MailChannels signs each attempt afresh (a retry or a
 * resend is re-signed, docs/replay.md), so a signature needs only to outlive its journey; a queued
 * delivery is verified later with its receipt time as `now`. A bigger value is most likely
 * milliseconds given for seconds (`300000` would be 3.5 days).
 */
export const MAX_MAX_AGE = 86_400
/** The largest `clockSkew` accepted: one hour of clock drift (`60000`, milliseconds by mistake, is refused). */
export const MAX_CLOCK_SKEW = 3_600
export const DEFAULT_MAX_EVENTS = 10_000

/** A clock: a `Date`, milliseconds since the epoch, or a function returning either. */
export type Clock = Date | number | (() => Date | number)

/** How a delivery is verified: everything but the delivery itself. Validated once. */
export interface VerifyConfig {
  /**
   * The signing key, as PEM or base64 SPKI DER (what the public-key endpoint serves; a PEM whose
   * line breaks are written `\n`, as in a .env file, and a raw 32-byte key as base64 or 64 hex
   * digits are taken too), a
   * WebCrypto `CryptoKey` (Ed25519, public, with the `verify` usage), or on Node a `KeyObject`.
   * When set, no key is fetched.
   * @default undefined (fetch the key named by `keyid`)
   */
  publicKey?: string | CryptoKeyLike | KeyObjectLike
  /**
   * Keep fetched keys (and failures) in a bounded cache shared by calls with the same `baseUrl`.
   * @default true
   */
  cache?: boolean
  /**
   * Where keys are fetched; `http:` only for loopback hosts.
   * @default 'https://api.mailchannels.net'
   */
  baseUrl?: string
  /**
   * Which `customer_handle`s may deliver here: a list, or a predicate. Every event is
   * checked; one outside it fails the delivery with `customer_not_allowed`. A predicate is asked
   * once per run of consecutive events with the same handle, so it must answer from the handle alone. MailChannels
   * signs every customer's webhooks with one key, so set this: otherwise any MailChannels
   * customer can send you their own signed deliveries.
   * Elements may be typed `string | undefined` so `[process.env.MAILCHANNELS_CUSTOMER_HANDLE]`
   * type-checks: an undefined or empty element is refused at start-up, naming its index.
   * @default undefined (any customer)
   */
  customerHandles?: readonly (string | undefined)[] | ((customerHandle: string) => boolean)
  /**
   * Seconds a signature stays valid after its `created` time, at most 86400 (one day): a bigger
   * value is refused as most likely milliseconds.
   * @default 300 (seconds)
   */
  maxAge?: number
  /**
   * Seconds a `created` time may lie in the future (clock drift), at most 3600 (one hour).
   * @default 60 (seconds)
   */
  clockSkew?: number
  /**
   * Most events one delivery may hold.
   * @default 10000
   */
  maxEvents?: number
  /**
   * Key ids accepted; any other fails with `unknown_key` before any fetch. The listed ids are
   * also fetched once per key store, in the background, when the options are first used
   * (outside the fetch budget), so the first delivery does not wait for its key.
   * @default undefined (any well-formed key id)
   */
  keyIds?: readonly string[]
  /**
   * A key store to use instead of the shared one (to tune its budget, TTLs or fetch).
   * @default undefined (one shared store per `baseUrl`)
   */
  keyStore?: KeyStore
  /**
   * Where key-fetch failures are logged (warn, with the URL, the key id, the cause, the HTTP
   * status and the seconds until the next try).
   * @default nowhere
   */
  logger?: Logger
}

/**
 * The name of every `VerifyConfig` option. The compiler keeps it complete (`satisfies`): a new
 * option fails to compile until it is listed here, and the receivers, which accept these names
 * and pass them through to `resolveVerifyConfig` as they are, then take it with no edit of theirs.
 */
export const VERIFY_OPTIONS = /* @__PURE__ */ Object.freeze({
  publicKey: true,
  cache: true,
  baseUrl: true,
  customerHandles: true,
  maxAge: true,
  clockSkew: true,
  maxEvents: true,
  keyIds: true,
  keyStore: true,
  logger: true,
} as const satisfies Record<keyof VerifyConfig, true>)

/** The options of one `verify` call. */
export interface VerifyOptions extends VerifyConfig {
  /** The exact raw body as received: never re-serialised JSON. */
  payload: string | Uint8Array
  /** The request headers: a plain object (any name case), Node's `IncomingHttpHeaders` or a fetch `Headers`. */
  headers: import('./headers.js').HeadersInput
  /** The time to verify at, e.g. when a queued delivery was received. Default: now. */
  now?: Clock
}

/** `VerifyConfig` after validation. */
export interface ResolvedVerifyConfig {
  publicKey: VerifyKey | null
  keyStore: KeyStore | null
  /** `cache: false`: a store per call. */
  freshStorePerCall: { baseUrl: string } | null
  allowCustomer: CustomerHandlePolicy | null
  keyIds: ReadonlySet<string> | null
  maxAge: number
  clockSkew: number
  maxEvents: number
  logger: Logger
}

const sharedStores = new Map<string, KeyStore>()
const MAX_SHARED_STORES = 16

/** `make(key)`, remembered in `map` (at most `max` entries: the oldest goes first). A throw is not remembered. */
function remembered<K, V> (map: Map<K, V>, key: K, max: number, make: (key: K) => V): V {
  let value = map.get(key)
  if (value === undefined) {
    value = make(key)
    if (map.size >= max) map.delete(map.keys().next().value!)
    map.set(key, value)
  }
  return value
}

/** The process-wide store for a base URL (used by `cache: true`, the default). */
export function sharedKeyStore (baseUrl: string): KeyStore {
  return remembered(sharedStores, baseUrl, MAX_SHARED_STORES, keyStoreFor)
}

const importedKeys = new Map<string, VerifyKey>()
const importedObjects = new WeakMap<object, VerifyKey>()
const MAX_IMPORTED_KEYS = 32

/** Imports a `publicKey` option once per distinct value: an import costs as much as a verify. */
function importConfiguredKey (material: string | CryptoKeyLike | KeyObjectLike): VerifyKey {
  if (typeof material !== 'string') {
    if (material === null || typeof material !== 'object') throw new TypeError('publicKey must be an Ed25519 public key')
    let key = importedObjects.get(material)
    if (key === undefined) {
      try {
        // The same small-order check as for a string key: with such a key forged signatures verify.
        key = importEd25519KeyObject(material)
      } catch (err) {
        const reason = err instanceof KeyRejectedError ? err.message : ''
        throw new TypeError(reason.includes('small-order') ? `publicKey is not usable: ${reason}` : 'publicKey must be an Ed25519 public key')
      }
      importedObjects.set(material, key)
    }
    return key
  }
  return remembered(importedKeys, material, MAX_IMPORTED_KEYS, (text) => {
    try {
      return importEd25519PublicKey(text, { lenient: true })
    } catch (err) {
      throw new TypeError(`publicKey is not usable: ${err instanceof KeyRejectedError ? err.message : 'not an Ed25519 SPKI key'}`)
    }
  })
}

const checkedBaseUrls = new Map<string, string>()

/** `parseBaseUrl`, remembered per string: the static API resolves its options on every call. */
function checkedBaseUrl (value: unknown): string {
  // A bad one throws, and is never remembered.
  return typeof value !== 'string' ? parseBaseUrl(value) : remembered(checkedBaseUrls, value, MAX_SHARED_STORES, parseBaseUrl)
}

function seconds (value: unknown, name: string, fallback: number, allowZero: boolean, max: number): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (!allowZero && value === 0)) {
    throw new TypeError(`${name} must be a ${allowZero ? 'non-negative' : 'positive'} number of seconds`)
  }
  if (value > max) {
    const ms = value >= 1000 && value / 1000 <= max ? ` (${value / 1000} s if ${value} was meant as milliseconds)` : ''
    throw new TypeError(`${name} is ${value} seconds, more than the ${max} s allowed: ${name} is in seconds, not milliseconds${ms}; the default is ${fallback} s`)
  }
  return value
}

/** Validates a `VerifyConfig`. Throws a `TypeError` naming the option. */
export function resolveVerifyConfig (config: VerifyConfig): ResolvedVerifyConfig {
  if (config === null || typeof config !== 'object') throw new TypeError('options must be an object')
  const publicKey = config.publicKey === undefined ? null : importConfiguredKey(config.publicKey)
  if (config.cache !== undefined && typeof config.cache !== 'boolean') throw new TypeError('cache must be a boolean')
  const baseUrl = checkedBaseUrl(config.baseUrl ?? DEFAULT_BASE_URL)
  if (config.keyStore !== undefined && !isKeyStore(config.keyStore)) throw new TypeError('keyStore must be a KeyStore')

  let allowCustomer: CustomerHandlePolicy | null = null
  const handles = config.customerHandles
  if (typeof handles === 'function') {
    allowCustomer = (h) => handles(h) === true
  } else if (handles !== undefined) {
    if (!Array.isArray(handles) || handles.length === 0) {
      throw new TypeError('customerHandles must be a non-empty array of customer handles, or a function')
    }
    const bad = handles.findIndex((h) => typeof h !== 'string' || h.length === 0)
    if (bad !== -1) {
      const what = handles[bad] === undefined ? 'undefined' : typeof handles[bad] === 'string' ? 'an empty string' : `a ${typeof handles[bad]}`
      // The usual cause is `[process.env.MAILCHANNELS_CUSTOMER_HANDLE]` with the variable unset.
      throw new TypeError(`customerHandles[${bad}] is ${what}: each element must be a customer handle; if it comes from an environment variable, that variable may be unset or empty`)
    }
    // Checked once per event: one handle (the usual case) is a plain comparison.
    const only = handles.length === 1 ? handles[0] as string : undefined
    const set = new Set(handles)
    allowCustomer = only !== undefined ? (h) => h === only : (h) => set.has(h)
  }

  let keyIds: Set<string> | null = null
  if (config.keyIds !== undefined) {
    if (!Array.isArray(config.keyIds) || config.keyIds.length === 0 || !config.keyIds.every(isKeyId)) {
      throw new TypeError(`keyIds must be a non-empty array of key ids (${KEY_ID_RULE})`)
    }
    keyIds = new Set(config.keyIds)
  }
  const maxEvents = config.maxEvents ?? DEFAULT_MAX_EVENTS
  if (!Number.isSafeInteger(maxEvents) || maxEvents < 1) throw new TypeError('maxEvents must be a positive integer')
  const logger = config.logger ?? noopLogger
  if (typeof logger?.warn !== 'function') throw new TypeError('logger must have debug, info, warn and error methods')

  const cache = config.cache ?? true
  const keyStore = publicKey !== null ? null : config.keyStore ?? (cache ? sharedKeyStore(baseUrl) : null)
  // Warm-up: the configured ids are fetched once per store (later calls find them remembered).
  if (keyIds !== null && keyStore !== null) void keyStore.prefetch(keyIds, logger) // never rejects
  return {
    publicKey,
    keyStore,
    freshStorePerCall: publicKey === null && config.keyStore === undefined && !cache ? { baseUrl } : null,
    allowCustomer,
    keyIds,
    maxAge: seconds(config.maxAge, 'maxAge', DEFAULT_MAX_AGE, false, MAX_MAX_AGE),
    clockSkew: seconds(config.clockSkew, 'clockSkew', DEFAULT_CLOCK_SKEW, true, MAX_CLOCK_SKEW),
    maxEvents,
    logger,
  }
}

/** Reads a `Clock` as Unix milliseconds. Throws a `TypeError` naming `now`. */
export function readClock (now: Clock | undefined): number {
  if (now === undefined) return Date.now()
  const v = typeof now === 'function' ? now() : now
  const ms = v instanceof Date ? v.getTime() : v
  if (typeof ms !== 'number' || !Number.isFinite(ms)) throw new TypeError('now must be a Date, a number of milliseconds, or a function returning one')
  return ms
}
