import { offThreadSlots } from '#crypto'
import { DEFAULT_BASE_URL, parseBaseUrl } from '../base-url.js'
import type { WebhookEventRouter } from '../dispatch/router.js'
import type { Enqueuer } from '../dispatch/types.js'
import { KeyStore } from '../keys/key-store.js'
import { noopLogger, type Logger } from '../logger.js'
import { MemoryReplayStore } from '../replay/memory-store.js'
import type { ReplayStore } from '../replay/types.js'
import { readClock, resolveVerifyConfig, VERIFY_OPTIONS, type Clock, type ResolvedVerifyConfig, type VerifyConfig } from '../verify/options.js'
import { SteadyClock } from './clock.js'
import { resolveContentTypes } from './transport.js'

/** Default body limit of the plugin and the middleware: 1 MiB. */
export const DEFAULT_BODY_LIMIT = 1024 * 1024

/** Bodies below this many bytes are verified on the libuv pool with `verifyOnThreadPool: 'auto'` (when it pays). */
export const POOL_BODY_THRESHOLD = 64 * 1024

/**
 * Options shared by the four adapters (the Fastify plugin, the Express middleware, the web
 * handler and the Hono middleware): everything `verify` takes, plus the receiver's own.
 * Validated once, at registration / construction.
 */
export interface WebhookReceiverOptions extends Omit<VerifyConfig, 'customerHandles' | 'logger'> {
  /**
   * Which `customer_handle`s may deliver here: a non-empty list, or a predicate.
   * **Required**: MailChannels signs every customer's webhooks with one key, so without it any
   * MailChannels customer could replay their own signed deliveries to you.
   * `'any'` opts out explicitly and logs a warning at startup. An undefined or empty element
   * (an unset environment variable) is refused at start-up, naming its index.
   */
  customerHandles: readonly (string | undefined)[] | ((customerHandle: string) => boolean) | 'any'
  /**
   * The time to verify at (for tests). The receiver's clock never runs backwards: a step back
   * of the wall clock (or of this clock) is held at the last reading plus the elapsed monotonic
   * time, so it cannot make an already handled, expired delivery fresh again.
   * @default the current time
   */
  now?: Clock
  /**
   * Largest body accepted, in bytes; larger ones are answered 413 (before reading, when `Content-Length` says so).
   * @default 1048576 (1 MiB)
   */
  bodyLimit?: number
  /**
   * Media types accepted, such as `['application/json']` (case-insensitive, parameters such as
   * `charset` ignored); any other `Content-Type`, or none, is answered 415. By default every media
   * type, or none, is accepted: the service does not document the type it sends, and the digest,
   * the signature and the strict JSON checks are what protect the bytes, not their label.
   * @default undefined (any media type, or none)
   */
  contentTypes?: readonly string[]
  /**
   * Where verified deliveries are remembered, so an exact resend is answered
   * `200 { duplicate: true }` without running the handler. `false` disables replay protection.
   * A delivery is a one-key claim, so the router's `seenEvents` store can serve here too. One
   * process only: use a shared store such as `RedisClaimStore` with several instances.
   * @default a new in-memory store of 100,000 deliveries per plugin registration / middleware
   */
  replay?: ReplayStore | false
  /**
   * Run the Ed25519 verify on the libuv thread pool (frees the event loop; uses a second core).
   * `'auto'`, for bodies under 64 KiB on a machine with a second CPU: without the optional
   * `sodium-native`, every verify on the pool; with it, at most two per other CPU at once on the
   * pool and the rest on the event loop with libsodium (whose verify costs less CPU than
   * node:crypto's on the pool plus the round trip). Larger bodies, and one CPU: the event loop
   * (JSON parsing dominates there, and the round trip loses). `true`: always node:crypto on the
   * pool; `false`: always the event loop. Other runtimes verify with WebCrypto whatever this says.
   * @default 'auto'
   */
  verifyOnThreadPool?: boolean | 'auto'
  /**
   * Handle the events here, and answer the delivery without any code of yours: a
   * `WebhookEventRouter`, whose `dispatch(events, { keyId, log })` runs after verification.
   * Answers 200 `{ handled, skipped, unhandled }` when every event was handled, skipped (already
   * handled, per the router's seen-events store) or unhandled; 500 `handler_error` when a
   * handler failed; 503 with `Retry-After` when the seen-events store failed
   * (`replay_store_unavailable`) or another delivery is handling one of the events
   * (`event_in_progress`). MailChannels retries every 5xx, and the router skips the events
   * already handled. Not together with `enqueue`.
   * @default undefined (your handler answers the delivery)
   */
  handlers?: WebhookEventDispatcher
  /**
   * Hand the events to a durable queue and answer the delivery without any code of yours
   * (BullMQ with `bullmqEnqueue` from `mailchannels-webhooks/bullmq`, Cloudflare Queues, SQS...):
   * called after verification with the events and `{ keyId, log }`. Resolved: 200 `{ queued }`
   * (the number of events). Rejected, thrown or slower than `enqueueTimeout`: 503
   * `queue_unavailable` with `Retry-After`, so MailChannels retries. Not together with `handlers`.
   * @default undefined (your handler answers the delivery)
   */
  enqueue?: Enqueuer
  /**
   * Milliseconds `enqueue` has to resolve before the delivery is answered 503 (the queue may
   * still accept the events later: key jobs by `eventFingerprint` so the retry adds no duplicate).
   * @default 10000 (milliseconds)
   */
  enqueueTimeout?: number
}

/**
 * What the receivers add to every event handler's context (`DispatchContext<EventHandlerContext>`):
 * `context.keyId`, the key the delivery was verified with.
 */
export interface EventHandlerContext {
  /** The key id the delivery was verified with. */
  readonly keyId: string
}


/**
 * What the `handlers` option takes: a `WebhookEventRouter` (declare it
 * `new WebhookEventRouter<EventHandlerContext>()` to read `context.keyId` in handlers). The
 * receivers call `dispatch(events, { keyId, log })`.
 */
export type WebhookEventDispatcher = Pick<WebhookEventRouter<EventHandlerContext>, 'dispatch'>

/** Default `enqueueTimeout`, in milliseconds. */
export const DEFAULT_ENQUEUE_TIMEOUT = 10_000
/** Seconds a sender should wait when another delivery holds an event's claim, when the router does not say its claim lifetime. */
const DEFAULT_CLAIM_LIFETIME = 30

/** How a receiver answers a verified delivery itself; validated once (`resolveEventAnswer`). */
export type EventAnswer =
  | { readonly kind: 'handlers', readonly router: WebhookEventDispatcher, readonly retryAfter: number }
  | { readonly kind: 'enqueue', readonly enqueue: Enqueuer, readonly timeout: number }

function isDispatcher (v: unknown): v is WebhookEventDispatcher {
  return v !== null && typeof v === 'object' && typeof (v as WebhookEventDispatcher).dispatch === 'function'
}

/**
 * Validates `handlers`, `enqueue` and `enqueueTimeout` once: at most one of `handlers` and
 * `enqueue`. Null when neither is given (the application's own handler answers). Throws a
 * `TypeError` naming the option.
 */
export function resolveEventAnswer (options: { handlers?: unknown, enqueue?: unknown, enqueueTimeout?: unknown }): EventAnswer | null {
  const { handlers, enqueue, enqueueTimeout } = options
  if (handlers !== undefined && enqueue !== undefined) {
    throw new TypeError('handlers and enqueue cannot both be given: handle events here with handlers (a WebhookEventRouter), or hand them to a queue with enqueue')
  }
  if (enqueueTimeout !== undefined) {
    if (enqueue === undefined) throw new TypeError('enqueueTimeout applies to enqueue only: give enqueue, or leave enqueueTimeout out')
    if (typeof enqueueTimeout !== 'number' || !Number.isSafeInteger(enqueueTimeout) || enqueueTimeout < 1) {
      throw new TypeError('enqueueTimeout must be a positive integer number of milliseconds')
    }
  }
  if (handlers !== undefined) {
    if (!isDispatcher(handlers)) throw new TypeError('handlers must be a WebhookEventRouter (an object with a dispatch method)')
    // Another delivery holds the claim for at most the router's claim lifetime: retry after it.
    const lifetime = (handlers as { claimLifetime?: unknown }).claimLifetime
    const retryAfter = typeof lifetime === 'number' && Number.isFinite(lifetime) && lifetime > 0 ? Math.ceil(lifetime) : DEFAULT_CLAIM_LIFETIME
    return { kind: 'handlers', router: handlers, retryAfter }
  }
  if (enqueue !== undefined) {
    if (typeof enqueue !== 'function') throw new TypeError('enqueue must be a function (events, context) that resolves once the queue accepted the events')
    return { kind: 'enqueue', enqueue: enqueue as Enqueuer, timeout: (enqueueTimeout as number | undefined) ?? DEFAULT_ENQUEUE_TIMEOUT }
  }
  return null
}

/** Per-route overrides (Fastify `config.mailchannelsWebhooks`): any receiver option. */
export type WebhookRouteOptions = Partial<WebhookReceiverOptions>

/** Options after validation: what the hot path reads. */
export interface ResolvedReceiver {
  config: ResolvedVerifyConfig
  bodyLimit: number
  replay: ReplayStore | null
  /** Replay TTL in seconds: the freshness window (maxAge + clockSkew) and one second. */
  replayTtl: number
  /** Bodies shorter than this are verified on the pool (0: never; Infinity: always). */
  poolBelow: number
  /** At most this many verifies of this process on the pool at once; the others on the event loop. */
  poolSlots: number
  /** The receiver's clock (never runs backwards). */
  clock: SteadyClock
  /** True when `customerHandles: 'any'` was given. */
  anyCustomer: boolean
  /** Accepted media types; null: any (or none). */
  contentTypes: ReadonlySet<string> | null
  /** How the receiver answers a verified delivery itself (`handlers` or `enqueue`); null: the application's handler answers. */
  answer: EventAnswer | null
}

/**
 * The name of every receiver option (and `logger`, which each adapter resolves its own way). The
 * compiler keeps it complete: the verify options come from `VERIFY_OPTIONS`, so an option added
 * to `VerifyConfig` is known here, and passed through, with no edit in this folder.
 */
const RECEIVER_OPTIONS = Object.freeze({
  ...VERIFY_OPTIONS,
  now: true,
  bodyLimit: true,
  contentTypes: true,
  replay: true,
  verifyOnThreadPool: true,
  handlers: true,
  enqueue: true,
  enqueueTimeout: true,
} as const satisfies Record<keyof WebhookReceiverOptions | 'logger', true>)

/** Throws a TypeError naming the first unknown option (a typo like `customerHandle` must not pass silently). */
export function rejectUnknownOptions (options: object, extra: readonly string[] = []): void {
  for (const key of Object.keys(options)) {
    if (!Object.hasOwn(RECEIVER_OPTIONS, key) && !extra.includes(key)) throw new TypeError(`${key} is not a known option`)
  }
}

/** Validates a `bodyLimit` option (bytes), once for every receiver and `verifyWebhookRequest`. Throws a `TypeError` naming it. */
export function resolveBodyLimit (value: unknown): number {
  if (value === undefined) return DEFAULT_BODY_LIMIT
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) throw new TypeError('bodyLimit must be a positive integer number of bytes')
  return value
}

function isReplayStore (v: unknown): v is ReplayStore {
  const s = v as ReplayStore
  return s !== null && typeof s === 'object' && typeof s.claim === 'function' && typeof s.complete === 'function' && typeof s.release === 'function'
}

/** Validates a `logger` option once: any object with pino's four methods; the default logs nothing. */
export function resolveLogger (logger: unknown): Logger {
  const log = (logger ?? noopLogger) as Logger
  for (const m of ['debug', 'info', 'warn', 'error'] as const) {
    if (typeof log?.[m] !== 'function') throw new TypeError('logger must have debug, info, warn and error methods')
  }
  return log
}

/**
 * A key store per base URL, owned by one plugin registration / middleware, so key-fetch
 * warnings go to that receiver's logger. Used when neither `publicKey` nor `keyStore` is given.
 */
export function keyStoreFactory (logger: Logger): (baseUrl: string) => KeyStore {
  const stores = new Map<string, KeyStore>()
  return (baseUrl) => {
    let store = stores.get(baseUrl)
    if (store === undefined) {
      store = new KeyStore({ baseUrl, logger })
      stores.set(baseUrl, store)
    }
    return store
  }
}

/**
 * Validates receiver options once. Throws a `TypeError` whose message names the option.
 * `defaultReplay` is called only when `replay` is not given (one store per registration).
 * The verify options go to `resolveVerifyConfig` as they are, in one object: only
 * `customerHandles` (`'any'`) and the key store are the receiver's to decide.
 */
export function resolveReceiverOptions (
  options: WebhookReceiverOptions,
  keyStoreFor: (baseUrl: string) => KeyStore,
  // The per-delivery face of a MemoryClaimStore: it keeps the last delivery's key, so settling costs no second hash.
  defaultReplay: () => ReplayStore = () => new MemoryReplayStore(),
): ResolvedReceiver {
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object')
  // `logger` is the adapter's (resolveLogger); everything not taken out here is a verify option.
  const {
    customerHandles: handles, now, bodyLimit: bodyLimitOption, contentTypes: contentTypesOption, replay: replayOption,
    verifyOnThreadPool, handlers, enqueue, enqueueTimeout, logger: _logger, ...verifyOptions
  } = options as WebhookReceiverOptions & { logger?: unknown }
  if (handles === undefined) {
    throw new TypeError("customerHandles is required: list the customer handles allowed to deliver here (or pass customerHandles: 'any' to accept every MailChannels customer)")
  }
  const anyCustomer = handles === 'any'
  if (typeof handles === 'string' && !anyCustomer) throw new TypeError("customerHandles must be a non-empty array of customer handles, a function, or 'any'")

  const bodyLimit = resolveBodyLimit(bodyLimitOption)

  let replay: ReplayStore | null
  if (replayOption === false) replay = null
  else if (replayOption === undefined) replay = defaultReplay()
  else if (isReplayStore(replayOption)) replay = replayOption
  else throw new TypeError('replay must be a ClaimStore (such as MemoryClaimStore or RedisClaimStore), a DeliveryReplayStore (claim, complete, release) or false')

  const { publicKey, keyStore, cache, baseUrl } = verifyOptions
  if (cache === false && publicKey === undefined && keyStore === undefined) {
    // Without a cache every request with a fresh key id would fetch a key, with no budget .
    throw new TypeError('cache: false is not supported by the receivers: every forged request would fetch a key. Pass publicKey, or a keyStore to tune caching')
  }
  const pool = verifyOnThreadPool ?? 'auto'
  if (pool !== 'auto' && typeof pool !== 'boolean') throw new TypeError("verifyOnThreadPool must be true, false or 'auto'")

  if (now !== undefined) readClock(now)
  const contentTypes = resolveContentTypes(contentTypesOption)
  const answer = resolveEventAnswer({ handlers, enqueue, enqueueTimeout })

  const config = resolveVerifyConfig({
    ...verifyOptions,
    customerHandles: anyCustomer ? undefined : handles as VerifyConfig['customerHandles'],
    // The receiver's own key store (with its logger) replaces the process-wide shared one.
    keyStore: publicKey === undefined && keyStore === undefined ? keyStoreFor(parseBaseUrl(baseUrl ?? DEFAULT_BASE_URL)) : keyStore,
  })
  return {
    config,
    bodyLimit,
    replay,
    // Stores keep whole seconds (Redis EX): round up. The freshness check floors "now" to whole
    // seconds, so a delivery stays fresh until a second after its window: one more second, so
    // the entry outlives it even for a delivery claimed at the far end of clockSkew.
    replayTtl: Math.ceil(config.maxAge + config.clockSkew) + 1,
    poolBelow: pool === 'auto' ? POOL_BODY_THRESHOLD : pool ? Infinity : 0,
    poolSlots: pool === 'auto' ? offThreadSlots() : pool ? Infinity : 0,
    clock: new SteadyClock(now),
    anyCustomer,
    contentTypes,
    answer,
  }
}
