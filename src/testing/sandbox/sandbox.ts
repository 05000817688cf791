import crypto, { type KeyObject } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import type { WebhookEvent } from '../../events/types.js'
import { noopLogger, type Logger } from '../../logger.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook, type WireEvent } from '../sign-webhook.js'
import { filterBatches, parseBatchQuery, type SandboxBatch } from './batch-query.js'
import { parseTarget, postBatch } from './delivery.js'
import { sampleEvents } from './sample-events.js'

/** How `deliver` can spoil a delivery on purpose, to show a receiver rejecting it. */
export type TamperKind =
  /** The body is changed after signing: `digest_mismatch`. */
  | 'body'
  /** Signed with a key the sandbox does not serve, under the current keyid: `signature_invalid`. */
  | 'signature'
  /** Signed an hour ago: `signature_expired`. */
  | 'expired'
  /**
   * The exact bytes and headers of the last accepted delivery sent again (same signature):
   * what an attacker holding a captured delivery does. A receiver with replay protection answers
   * it as a duplicate. MailChannels itself never does this: it signs every retry afresh.
   */
  | 'replay'

const TAMPER_KINDS: readonly TamperKind[] = ['body', 'signature', 'expired', 'replay']
/** What `tamperEvery` cycles through (a replay needs an accepted delivery to copy). */
const PERIODIC_TAMPER_KINDS: readonly TamperKind[] = ['body', 'signature', 'expired']

/** Options of `createSandbox`. Validated once; a bad value throws a TypeError naming the option. */
export interface SandboxOptions {
  /**
   * Where deliveries are POSTed: an `http:` URL on a loopback host, or an `https:` URL.
   * @default none (give it here or to `deliver`)
   */
  target?: string | URL
  /**
   * Port of the sandbox's API server on 127.0.0.1. The server answers only requests whose
   * `Host` is a loopback name (127.0.0.0/8, `localhost`, `[::1]`), so a web page cannot reach
   * it through DNS rebinding.
   * @default 0 (any free port)
   */
  port?: number
  /**
   * Deliveries per second of the periodic sender (`start()`), up to 100.
   * @default 1
   */
  rate?: number
  /**
   * Events per delivery when `deliver` is given none, 1 to 1000.
   * @default 10 (one of each type)
   */
  batchSize?: number
  /**
   * The `customer_handle` of generated events and recorded batches.
   * @default "sandbox"
   */
  customerHandle?: string
  /**
   * The `X-Api-Key` the sandbox's API requires (not the public-key endpoint).
   * @default a random key for each sandbox (read it from `sandbox.apiKey`)
   */
  apiKey?: string
  /**
   * Time limit of one POST, ms; past it the attempt is `no_response`.
   * @default 10000
   */
  deliveryTimeout?: number
  /**
   * Attempts per delivery, including the first; a failed one (non-2xx or no response) is retried
   * after a backoff, signed afresh with a later `created` (a new signature).
   * @default 3
   */
  maxAttempts?: number
  /**
   * Wait before the first retry, ms; it doubles for each further retry.
   * @default 1000
   */
  retryDelay?: number
  /**
   * Make every n-th periodic delivery a tampered one (cycling body, signature, expired), not retried.
   * @default 0 (never)
   */
  tamperEvery?: number
  /**
   * How many signing keys the public-key endpoint serves: the current one and the most recent
   * ones before it, so deliveries signed just before a rotation still verify. A rotation past
   * this drops the oldest key (its id then answers 404). 1 to 100.
   * @default 5
   */
  maxKeys?: number
  /**
   * Periodic deliveries allowed in flight at once; a tick past it is skipped.
   * @default 4
   */
  maxInFlight?: number
  /**
   * Called after each attempt is recorded.
   * @default none
   */
  onAttempt?: (batch: SandboxBatch, detail: AttemptDetail) => void
  /**
   * Where the sandbox logs (object first, message second).
   * @default silent
   */
  logger?: Logger
}

/** More about a recorded attempt than the listing shows. */
export interface AttemptDetail {
  /** 1 for the first POST of a delivery. */
  attempt: number
  /** Whether another attempt will follow. */
  willRetry: boolean
  /** When another attempt follows: the wait before it, ms; otherwise `null`. */
  retryInMs: number | null
  tamper: TamperKind | null
  /** Why there was no response, when there was none. */
  error: string | null
}

/** Options of one `deliver` call. */
export interface DeliverOptions {
  /**
   * Where this delivery goes instead of the sandbox's `target`.
   * @default the sandbox's `target`
   */
  target?: string | URL
  /**
   * Spoil this delivery on purpose (it is then not retried).
   * @default none
   */
  tamper?: TamperKind
}

/** Requests the sandbox's API server has answered, by endpoint. */
export interface SandboxStats {
  publicKeyRequests: number
  batchListRequests: number
  /** POSTs made to targets (every attempt). */
  attempts: number
}

/** Options of `Sandbox.start`. */
export interface StartOptions {
  /**
   * Sets the sandbox's target first.
   * @default the target given to `createSandbox`
   */
  target?: string | URL
  /**
   * Send exactly this many events in all, then stop by itself (`finished()` resolves once the
   * last delivery is settled). The last delivery carries what is left when `count` is not a
   * multiple of `batchSize`.
   * @default no limit (until `stop()` or `close()`)
   */
  count?: number
}

/** A local stand-in for MailChannels: signs and delivers webhooks, serves its keys and the batch listing. */
export interface Sandbox {
  /** Origin of the API server, e.g. `http://127.0.0.1:39123`: pass it as `baseUrl` to the verifier and the client. */
  readonly baseUrl: string
  /** Current signing key, base64 SPKI DER as the key endpoint serves it. */
  readonly publicKey: string
  /**
   * Current keyid: random for each sandbox and each rotation (`sandbox-` and 16 hex digits), so a
   * receiver that cached the key of an earlier run fetches the new key at once instead of
   * rejecting deliveries signed with it.
   */
  readonly keyId: string
  /**
   * The `X-Api-Key` the sandbox API requires: the `apiKey` option, or a random key for this
   * sandbox. Not enumerable, so it stays out of `util.inspect(sandbox)` output and JSON.
   */
  readonly apiKey: string
  readonly customerHandle: string
  /** Where deliveries go by default (`null` until a `target` is given to `createSandbox` or `start`). */
  readonly target: string | null
  /**
   * Every attempt so far, oldest first, as the listing returns them. The retries of a delivery
   * keep its `batch_id`, so a delivery retried twice shows as three rows with one `batch_id`.
   */
  readonly batches: readonly SandboxBatch[]
  readonly stats: Readonly<SandboxStats>
  /**
   * Switches to a new signing key with a new random keyid. The previous keys stay served (up to
   * `maxKeys` in all) so deliveries signed before the rotation still verify.
   */
  rotateKey (): { keyId: string, publicKey: string }
  /** Signs events with the current key (fresh `created`). */
  sign (events: ReadonlyArray<WebhookEvent | WireEvent>): SignedWebhook
  /**
   * One delivery (a batch) with retries; resolves with the last attempt's record. Without `events`,
   * `batchSize` sample events. Rejects if the sandbox closes meanwhile.
   */
  deliver (events?: ReadonlyArray<WebhookEvent | WireEvent>, options?: DeliverOptions): Promise<SandboxBatch>
  /**
   * Starts the periodic sender (`rate` deliveries per second). `target` (optional) sets the
   * sandbox's target first: handy when the receiver listens on a port chosen after the sandbox started.
   * `count` (optional) stops it after exactly that many events.
   */
  start (options?: StartOptions): void
  /** Stops the periodic sender and waits for its deliveries in flight. */
  stop (): Promise<void>
  /**
   * Resolves once the periodic sender has stopped (its `count` reached, `stop()` or `close()`)
   * and its deliveries, retries included, are settled. Resolves at once when it is not running.
   */
  finished (): Promise<void>
  /** Stops everything, aborts deliveries in flight, closes the server and its keep-alive sockets. */
  close (): Promise<void>
}

interface ServedKey { id: string, publicKey: string, privateKey: KeyObject }

function number (value: unknown, option: string, fallback: number, min: number, max: number, integer = true): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isFinite(value) || (integer && !Number.isInteger(value)) || value < min || value > max) {
    throw new TypeError(`${option} must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}`)
  }
  return value
}

function text (value: unknown, option: string, fallback: string): string {
  if (value === undefined) return fallback
  if (typeof value !== 'string' || value.trim() === '' || value.length > 255) throw new TypeError(`${option} must be a non-empty string of at most 255 characters`)
  return value
}

function sameSecret (a: string, b: string): boolean {
  return crypto.timingSafeEqual(crypto.hash('sha256', a, 'buffer'), crypto.hash('sha256', b, 'buffer'))
}

function sendJson (res: http.ServerResponse, status: number, body: unknown): void {
  const json = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(json) })
  res.end(json)
}

function closedError (): Error {
  return new Error('The sandbox was closed before the delivery finished')
}

const LOOPBACK_HOST = /^(?:localhost|127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})|\[::1\])(?::(\d{1,5}))?$/i

/**
 * True when a request names a loopback host in its one `Host` field (with or without a port).
 * A page that rebinds its own domain to 127.0.0.1 reaches the socket, but its requests still
 * carry that domain as `Host`, so they are refused.
 */
export function isLoopbackHostHeader (rawHeaders: readonly string[]): boolean {
  const hosts: string[] = []
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() === 'host') hosts.push(rawHeaders[i + 1]!)
  }
  if (hosts.length !== 1) return false
  const m = LOOPBACK_HOST.exec(hosts[0]!)
  if (m === null) return false
  const [, a = '0', b = '0', c = '0', port] = m
  return Number(a) <= 255 && Number(b) <= 255 && Number(c) <= 255 && (port === undefined || Number(port) <= 65535)
}

const randomKeyId = (): string => `sandbox-${crypto.randomBytes(8).toString('hex')}`

/**
 * Starts a sandbox: an API server on 127.0.0.1 that serves `GET /tx/v1/webhook/public-key`
 * and `GET /tx/v1/webhook-batch` in the service's wire format (plus `POST /sandbox/rotate-key`
 * and `POST /sandbox/deliver`), and a sender that POSTs signed batches to `target`.
 */
export async function createSandbox (options: SandboxOptions = {}): Promise<Sandbox> {
  if (options === null || typeof options !== 'object') throw new TypeError('createSandbox options must be an object')
  let defaultTarget = options.target === undefined ? null : parseTarget(options.target)
  const port = number(options.port, 'port', 0, 0, 65535)
  const rate = number(options.rate, 'rate', 1, 0.001, 100, false)
  const batchSize = number(options.batchSize, 'batchSize', 10, 1, 1000)
  const customerHandle = text(options.customerHandle, 'customerHandle', 'sandbox')
  // 192 random bits: a page or a process that cannot read the sandbox's output cannot guess it.
  const apiKey = text(options.apiKey, 'apiKey', crypto.randomBytes(24).toString('base64url'))
  // The same rule as the API client's, so the key works with new MailChannels(apiKey).
  if (!/^[\x21-\x7e]+$/.test(apiKey)) throw new TypeError('apiKey must be printable ASCII without spaces or control characters')
  const deliveryTimeout = number(options.deliveryTimeout, 'deliveryTimeout', 10_000, 1, 600_000)
  const maxAttempts = number(options.maxAttempts, 'maxAttempts', 3, 1, 10)
  const retryDelay = number(options.retryDelay, 'retryDelay', 1000, 0, 600_000)
  const tamperEvery = number(options.tamperEvery, 'tamperEvery', 0, 0, 1_000_000)
  const maxInFlight = number(options.maxInFlight, 'maxInFlight', 4, 1, 100)
  const maxKeys = number(options.maxKeys, 'maxKeys', 5, 1, 100)
  const logger = options.logger ?? noopLogger
  const onAttempt = options.onAttempt
  if (onAttempt !== undefined && typeof onAttempt !== 'function') throw new TypeError('onAttempt must be a function')

  const keys = new Map<string, ServedKey>()
  let current!: ServedKey
  const rotateKey = (): { keyId: string, publicKey: string } => {
    const pair = generateSigningKeyPair()
    current = { id: randomKeyId(), publicKey: pair.publicKey, privateKey: pair.privateKey }
    keys.set(current.id, current)
    // A Map iterates in insertion order: the first key is the oldest.
    while (keys.size > maxKeys) keys.delete(keys.keys().next().value!)
    logger.info({ keyId: current.id }, 'sandbox signing key rotated')
    return { keyId: current.id, publicKey: current.publicKey }
  }
  rotateKey()

  const batches: SandboxBatch[] = []
  const stats: SandboxStats = { publicKeyRequests: 0, batchListRequests: 0, attempts: 0 }
  const closing = new AbortController()
  let nextBatchId = 1
  let eventCursor = 0
  let periodicCount = 0
  /** Events the periodic sender may still send (`Infinity` without a `count`). */
  let remaining = Infinity
  let timer: NodeJS.Timeout | null = null
  const inFlight = new Set<Promise<unknown>>()
  let idleWaiters: Array<() => void> = []
  /** The last genuine attempt that was answered 2xx, and the last genuine attempt at all: what a replay copies. */
  let lastAccepted: { signed: SignedWebhook, eventCount: number } | null = null
  let lastSent: { signed: SignedWebhook, eventCount: number } | null = null

  const notifyIdle = (): void => {
    if (timer !== null || inFlight.size > 0) return
    const waiters = idleWaiters
    idleWaiters = []
    for (const wake of waiters) wake()
  }
  const stopTimer = (): void => {
    if (timer !== null) clearInterval(timer)
    timer = null
    notifyIdle()
  }

  const sign = (events: ReadonlyArray<WebhookEvent | WireEvent>, created?: number, privateKey = current.privateKey): SignedWebhook =>
    signWebhook({ events, privateKey, keyId: current.id, ...(created !== undefined ? { created } : {}) })

  const tampered = (events: ReadonlyArray<WebhookEvent | WireEvent>, kind: TamperKind): SignedWebhook => {
    if (kind === 'signature') return sign(events, undefined, crypto.generateKeyPairSync('ed25519').privateKey)
    if (kind === 'expired') return sign(events, Math.floor(Date.now() / 1000) - 3600)
    const signed = sign(events)
    const wire = JSON.parse(signed.body.toString('utf8')) as WireEvent[]
    if (wire[0] !== undefined) wire[0].email = 'attacker@evil.example'
    else wire.push({ event: 'delivered', customer_handle: customerHandle, timestamp: Math.floor(Date.now() / 1000) })
    return { body: Buffer.from(JSON.stringify(wire), 'utf8'), headers: signed.headers }
  }

  const deliver = async (events?: ReadonlyArray<WebhookEvent | WireEvent>, opts: DeliverOptions = {}, size = batchSize): Promise<SandboxBatch> => {
    if (closing.signal.aborted) throw closedError()
    const target = opts.target !== undefined ? parseTarget(opts.target) : defaultTarget
    if (target === null) throw new TypeError('deliver needs a target: createSandbox({ target }) or deliver(events, { target })')
    const tamper = opts.tamper ?? null
    if (tamper !== null && !TAMPER_KINDS.includes(tamper)) throw new TypeError(`tamper must be one of ${TAMPER_KINDS.join(', ')}`)
    const copied = tamper === 'replay' ? lastAccepted ?? lastSent : null
    if (tamper === 'replay' && copied === null) throw new TypeError("tamper 'replay' sends an earlier delivery again: deliver one first")
    let list = events
    if (list === undefined && copied === null) {
      list = sampleEvents(size, { customerHandle, startAt: eventCursor })
      eventCursor = (eventCursor + size) % 10
    }
    const eventCount = copied?.eventCount ?? list!.length
    const attempts = tamper === null ? maxAttempts : 1
    // One batch id for the delivery: its retries are the same batch, signed again.
    const batchId = nextBatchId++
    let lastCreated = 0
    for (let attempt = 1; ; attempt++) {
      // Each attempt is signed afresh, as the real sender does. `created` always moves on, even
      // when a short test backoff lands in the same second, so every retry has a new signature.
      const created = Math.max(Math.floor(Date.now() / 1000), lastCreated + 1)
      lastCreated = created
      const signed = copied !== null ? copied.signed : tamper === null ? sign(list!, created) : tampered(list!, tamper)
      const createdAt = new Date()
      stats.attempts++
      const outcome = await postBatch(target, signed, deliveryTimeout, closing.signal)
      if (closing.signal.aborted) throw closedError()
      const batch: SandboxBatch = {
        batch_id: batchId,
        created_at: createdAt.toISOString(),
        customer_handle: customerHandle,
        duration: { unit: 'milliseconds', value: outcome.durationMs },
        event_count: eventCount,
        status: outcome.status,
        status_code: outcome.statusCode,
        webhook: target,
      }
      batches.push(batch)
      if (tamper === null) {
        lastSent = { signed, eventCount }
        if (batch.status === '2xx_response') lastAccepted = lastSent
      }
      const willRetry = batch.status !== '2xx_response' && attempt < attempts
      const retryInMs = willRetry ? retryDelay * 2 ** (attempt - 1) : null
      const log = { batchId, attempt, status: batch.status, statusCode: batch.status_code, durationMs: outcome.durationMs, tamper, error: outcome.error }
      if (batch.status === '2xx_response') logger.info(log, 'sandbox delivery')
      else logger.warn(log, 'sandbox delivery failed')
      try {
        onAttempt?.({ ...batch, duration: { ...batch.duration } }, { attempt, willRetry, retryInMs, tamper, error: outcome.error })
      } catch (err) {
        // A faulty observer must not break the delivery loop.
        logger.error({ err: (err as Error).message }, 'sandbox onAttempt callback threw')
      }
      if (retryInMs === null) return batch
      try {
        await sleep(retryInMs, undefined, { signal: closing.signal })
      } catch {
        throw closedError()
      }
    }
  }

  const tick = (): void => {
    if (inFlight.size >= maxInFlight || remaining <= 0) return
    periodicCount++
    const tamper = tamperEvery > 0 && periodicCount % tamperEvery === 0
      ? PERIODIC_TAMPER_KINDS[(periodicCount / tamperEvery - 1) % PERIODIC_TAMPER_KINDS.length]
      : undefined
    const size = Math.min(batchSize, remaining)
    remaining -= size
    const p: Promise<void> = deliver(undefined, tamper !== undefined ? { tamper } : {}, size)
      .then(() => {}, (err: Error) => { if (!closing.signal.aborted) logger.error({ err: err.message }, 'sandbox delivery error') })
      .finally(() => {
        inFlight.delete(p)
        notifyIdle()
      })
    inFlight.add(p)
    if (remaining <= 0) stopTimer()
  }

  const stop = async (): Promise<void> => {
    stopTimer()
    await Promise.allSettled([...inFlight])
  }

  const finished = (): Promise<void> => new Promise<void>((resolve) => {
    idleWaiters.push(resolve)
    notifyIdle()
  })

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    req.resume()
    if (!isLoopbackHostHeader(req.rawHeaders)) {
      return sendJson(res, 421, { errors: ['This sandbox answers only to requests addressed to a loopback host (127.0.0.1, localhost or [::1]).'] })
    }
    const url = new URL(req.url ?? '/', 'http://sandbox.invalid')
    const route = `${req.method} ${url.pathname}`
    if (url.pathname === '/tx/v1/webhook/public-key' && req.method === 'GET') {
      // Public, like the real endpoint: no API key.
      stats.publicKeyRequests++
      const id = url.searchParams.get('id')
      if (id === null || id === '') return sendJson(res, 400, { errors: ['id is required.'] })
      const key = keys.get(id)
      if (key === undefined) return sendJson(res, 404, { errors: ['Key not found.'] })
      return sendJson(res, 200, { id: key.id, key: key.publicKey })
    }
    const known = ['GET /tx/v1/webhook-batch', 'POST /sandbox/rotate-key', 'POST /sandbox/deliver']
    if (!known.includes(route)) {
      const pathKnown = known.some((r) => r.endsWith(` ${url.pathname}`)) || url.pathname === '/tx/v1/webhook/public-key'
      return sendJson(res, pathKnown ? 405 : 404, { errors: [pathKnown ? 'Method not allowed.' : 'Not found.'] })
    }
    const given = req.headers['x-api-key']
    if (typeof given !== 'string' || !sameSecret(given, apiKey)) {
      return sendJson(res, 401, { errors: ['Missing or invalid X-Api-Key header.'] })
    }
    if (route === 'GET /tx/v1/webhook-batch') {
      stats.batchListRequests++
      const parsed = parseBatchQuery(url.searchParams, Date.now())
      if (parsed.errors !== null) return sendJson(res, 400, { errors: parsed.errors })
      return sendJson(res, 200, { webhook_batches: filterBatches(batches, parsed.query) })
    }
    if (route === 'POST /sandbox/rotate-key') {
      const { keyId, publicKey } = rotateKey()
      return sendJson(res, 200, { id: keyId, key: publicKey })
    }
    if (defaultTarget === null) return sendJson(res, 409, { errors: ['The sandbox has no target to deliver to.'] })
    const tamperParam = url.searchParams.get('tamper')
    if (tamperParam !== null && !TAMPER_KINDS.includes(tamperParam as TamperKind)) {
      return sendJson(res, 400, { errors: [`tamper must be one of ${TAMPER_KINDS.join(', ')}.`] })
    }
    let batch: SandboxBatch
    try {
      batch = await deliver(undefined, tamperParam !== null ? { tamper: tamperParam as TamperKind } : {})
    } catch (err) {
      // A replay with nothing to copy yet.
      if (err instanceof TypeError) return sendJson(res, 409, { errors: [`${err.message}.`] })
      throw err
    }
    return sendJson(res, 200, batch)
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      logger.error({ err: err.message }, 'sandbox request failed')
      if (!res.headersSent) sendJson(res, 500, { errors: ['Internal sandbox error.'] })
      else res.destroy()
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address() as AddressInfo
  const baseUrl = `http://127.0.0.1:${address.port}`
  let closed: Promise<void> | null = null

  const sandbox: Sandbox = {
    baseUrl,
    get publicKey () { return current.publicKey },
    get keyId () { return current.id },
    apiKey: '',
    customerHandle,
    get target () { return defaultTarget },
    get batches () { return batches },
    get stats () { return { ...stats } },
    rotateKey,
    sign: (events) => sign(events),
    deliver,
    start (opts = {}) {
      if (opts === null || typeof opts !== 'object') throw new TypeError('start options must be an object')
      if (opts.count !== undefined && (!Number.isSafeInteger(opts.count) || opts.count < 1)) throw new TypeError('count must be a positive integer')
      if (opts.target !== undefined) defaultTarget = parseTarget(opts.target)
      if (defaultTarget === null) throw new TypeError('start needs a target: createSandbox({ target }) or start({ target })')
      if (closing.signal.aborted) throw closedError()
      remaining = opts.count ?? Infinity
      if (timer === null) timer = setInterval(tick, 1000 / rate)
    },
    stop,
    finished,
    close () {
      closed ??= (async () => {
        stopTimer()
        closing.abort()
        await Promise.allSettled([...inFlight])
        await new Promise<void>((resolve) => {
          server.close(() => resolve())
          server.closeAllConnections()
        })
        notifyIdle()
      })()
      return closed
    },
  }
  // Not enumerable: readable where it is needed, absent from inspect output, logs and JSON.
  Object.defineProperty(sandbox, 'apiKey', { value: apiKey, enumerable: false, writable: false })
  return sandbox
}
