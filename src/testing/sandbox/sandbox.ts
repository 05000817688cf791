import crypto, { type KeyObject } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { WEBHOOK_EVENT_TYPES, type WebhookEvent } from '../../events/types.js'
import { noopLogger, type Logger } from '../../logger.js'
import { bodyText, classify, curlCommand, describeDigest, describeSignature, eventsAtAGlance, reasonOf, type InspectedDetail, type InspectedSummary } from '../inspector/describe.js'
import { Journal } from '../inspector/journal.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook, type WireEvent } from '../sign-webhook.js'
import { endpointAnswer, type EndpointAnswer } from './answer.js'
import type { SandboxBatch } from './batch-query.js'
import { createAgents, destroyAgents, parseTarget, postBatch, type PostOutcome } from './delivery.js'
import { createApiHandler, TAMPER_KINDS, type SandboxCore, type SandboxResend, type SandboxValidation, type TamperKind } from './routes.js'
import { sampleEvent, sampleEvents } from './sample-events.js'

export { isLoopbackHostHeader } from './routes.js'
export type { EndpointAnswer } from './answer.js'
export type { SandboxResend, SandboxValidation, TamperKind } from './routes.js'

/** What `tamperEvery` cycles through (a replay needs an accepted delivery to copy). */
const PERIODIC_TAMPER_KINDS: readonly TamperKind[] = ['body', 'signature', 'expired']

/** Options of `createSandbox`. Validated once; a bad value throws a TypeError naming the option. */
export interface SandboxOptions {
  /**
   * The first enrolled endpoint, where deliveries are POSTed: an `http:` URL on a loopback
   * host, or an `https:` URL. More endpoints can be enrolled later (`enroll`, or
   * `POST /tx/v1/webhook?endpoint=` on the sandbox's API).
   * @default none (enroll one later, or give `deliver` a target)
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
   * Called after each attempt is recorded (resends included; validation requests are not recorded).
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
  /** True for an attempt made by a resend request (`resend` or the API's resend route). */
  resend: boolean
  /**
   * The error code and message the endpoint gave in a JSON answer (e.g. this library's
   * `{ "code": "key_unavailable", "message": ... }`); `null` when it answered none. Raw text from
   * the endpoint: escape it before printing.
   */
  answer: EndpointAnswer | null
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
  /**
   * Attempts for this delivery, including the first, 1 to 10 (1: no retry).
   * @default the sandbox's `maxAttempts`
   */
  maxAttempts?: number
}

/** Requests the sandbox's API server has answered, by endpoint. */
export interface SandboxStats {
  publicKeyRequests: number
  batchListRequests: number
  /** POSTs of batches made to endpoints (every attempt, resends included). */
  attempts: number
  /** Signed `test` events sent by validation requests (one per endpoint). */
  validations: number
  /** Resend requests served. */
  resends: number
}

/** Options of `Sandbox.start`. */
export interface StartOptions {
  /**
   * Enrolls this endpoint first (if it is not enrolled yet).
   * @default the endpoints already enrolled
   */
  target?: string | URL
  /**
   * Send exactly this many events in all, then stop sending by itself (`finished()` resolves
   * once the last delivery is settled; the API keeps serving until `close()`). The last delivery carries what is left when `count` is not a
   * multiple of `batchSize`.
   * @default no limit (until `stop()` or `close()`)
   */
  count?: number
}

/** A local stand-in for MailChannels: signs and delivers webhooks, serves its keys, the batch listing and the webhook lifecycle. */
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
  /**
   * The inspector page of this sandbox, with the API key in the fragment
   * (`http://127.0.0.1:39123/#key=…`): open it in a browser on this machine to see every
   * attempt, its headers, body, signature base and the receiver's answer, and to send batches.
   * The fragment never leaves the browser; the page keeps the key for the tab and removes it
   * from the address bar. Not enumerable, like `apiKey`.
   */
  readonly inspectorUrl: string
  readonly customerHandle: string
  /** The first enrolled endpoint: where `deliver` sends by default (`null` while none is enrolled). */
  readonly target: string | null
  /** The enrolled endpoints, in enrolment order: the periodic sender delivers each batch to every one. */
  readonly endpoints: readonly string[]
  /**
   * Every attempt so far, oldest first, as the listing returns them. The retries of a delivery
   * keep its `batch_id`, so a delivery retried twice shows as three rows with one `batch_id`;
   * a resend adds a row with the batch's `batch_id` too.
   */
  readonly batches: readonly SandboxBatch[]
  readonly stats: Readonly<SandboxStats>
  /**
   * Enrolls an endpoint (as `POST /tx/v1/webhook?endpoint=` does): `https:`, or `http:` on a
   * loopback host. Returns false when it was already enrolled. Throws a TypeError for a bad URL
   * or past 10 endpoints.
   */
  enroll (endpoint: string | URL): boolean
  /** Removes every enrolled endpoint (as `DELETE /tx/v1/webhook` does). The periodic sender idles until one is enrolled. */
  removeEndpoints (): void
  /**
   * Sends a signed `test` event (its `request_id` is `requestId`, or a new one) to each enrolled
   * endpoint and reports what each answered, as `POST /tx/v1/webhook/validate` does. Not
   * recorded as batches. With no endpoint enrolled, `results` is empty.
   */
  validate (requestId?: string): Promise<SandboxValidation>
  /**
   * Delivers a recorded batch again, signed afresh with the current key, to the endpoint it was
   * sent to, in one attempt, and records that attempt under the batch's `batch_id` (as
   * `POST /tx/v1/webhook-batch/{id}/resend` does). Resolves `null` for an unknown batch, or one
   * older than the last 100,000 events the sandbox keeps.
   */
  resend (batchId: number): Promise<SandboxResend | null>
  /**
   * Switches to a new signing key with a new random keyid. The previous keys stay served (up to
   * `maxKeys` in all) so deliveries signed before the rotation still verify.
   */
  rotateKey (): { keyId: string, publicKey: string }
  /** Signs events with the current key (fresh `created`). */
  sign (events: ReadonlyArray<WebhookEvent | WireEvent>): SignedWebhook
  /**
   * One delivery (a batch) with retries, to `options.target` or else the first enrolled
   * endpoint; resolves with the last attempt's record. Without `events`, `batchSize` sample
   * events. Rejects if the sandbox closes meanwhile.
   */
  deliver (events?: ReadonlyArray<WebhookEvent | WireEvent>, options?: DeliverOptions): Promise<SandboxBatch>
  /**
   * Starts the periodic sender (`rate` ticks per second): each tick makes a batch and delivers
   * it to every enrolled endpoint (one `batch_id` per endpoint). While no endpoint is enrolled
   * the ticks send nothing and use up no `count`. `target` (optional) enrolls an endpoint
   * first: handy when the receiver listens on a port chosen after the sandbox started.
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

function closedError (): Error {
  return new Error('The sandbox was closed before the delivery finished')
}

const randomKeyId = (): string => `sandbox-${crypto.randomBytes(8).toString('hex')}`

/** Endpoints one sandbox accepts at most. */
const MAX_ENDPOINTS = 10
/** Events kept for resends (the most recent batches' events; older batches answer 404). */
const MAX_KEPT_EVENTS = 100_000
/** What validation keeps of an endpoint's answer. */
const MAX_VALIDATION_BODY_BYTES = 1024

/** What the sandbox keeps of a batch to resend it: its events, where it went, and the `created` of its last signature. */
interface KeptBatch { events: ReadonlyArray<WebhookEvent | WireEvent>, webhook: string, eventCount: number, lastCreated: number, eventTypes: string[] }
/** What the inspector keeps of a receiver's answer (enough for this library's error body). */
const INSPECTED_ANSWER_BYTES = 8 * 1024

/** The `event` of an event, as it goes on the wire. */
const wireType = (event: WebhookEvent | WireEvent): string =>
  event.event === 'unknown' && typeof (event as { eventName?: unknown }).eventName === 'string' ? (event as { eventName: string }).eventName : event.event

/** One attempt as sent and answered, for the inspector. */
interface Capture { signed: SignedWebhook, outcome: PostOutcome, eventTypes: string[] }

const WARNINGS = {
  tampered: 'The receiver accepted a delivery spoiled on purpose: it should have rejected it.',
  replay: 'The receiver accepted an exact copy of an earlier delivery as new: with replay protection it answers it as a duplicate.',
} as const

/**
 * Starts a sandbox: an API server on 127.0.0.1 that serves MailChannels' webhook routes in the
 * service's wire format (`GET /tx/v1/webhook/public-key`, `GET /tx/v1/webhook-batch`,
 * `POST|GET|DELETE /tx/v1/webhook`, `POST /tx/v1/webhook/validate`,
 * `POST /tx/v1/webhook-batch/{id}/resend`, plus `POST /sandbox/rotate-key` and
 * `POST /sandbox/deliver`), the inspector page at `/` (open `inspectorUrl`), and a sender that
 * POSTs signed batches to the enrolled endpoints.
 */
export async function createSandbox (options: SandboxOptions = {}): Promise<Sandbox> {
  if (options === null || typeof options !== 'object') throw new TypeError('createSandbox options must be an object')
  const endpoints: string[] = options.target === undefined ? [] : [parseTarget(options.target)]
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
    journal.infoChanged()
    return { keyId: current.id, publicKey: current.publicKey }
  }

  const batches: SandboxBatch[] = []
  const kept = new Map<number, KeptBatch>()
  const journal = new Journal()
  const agents = createAgents()
  rotateKey()
  let keptEvents = 0
  const stats: SandboxStats = { publicKeyRequests: 0, batchListRequests: 0, attempts: 0, validations: 0, resends: 0 }
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
  let lastAccepted: { signed: SignedWebhook, kept: KeptBatch } | null = null
  let lastSent: { signed: SignedWebhook, kept: KeptBatch } | null = null

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

  const enroll = (endpoint: string | URL, option = 'endpoint'): boolean => {
    const href = parseTarget(endpoint, option)
    // Kept as given when it is clean text: the listing's `webhook` filter matches it exactly.
    const url = typeof endpoint === 'string' && !/[\u0000-\u0020\u007f]/.test(endpoint) ? endpoint : href
    if (endpoints.includes(url)) return false
    if (endpoints.length >= MAX_ENDPOINTS) throw new TypeError(`${option}: the sandbox takes at most ${MAX_ENDPOINTS} endpoints; remove them first`)
    endpoints.push(url)
    logger.info({ endpoint: url }, 'sandbox endpoint enrolled')
    journal.infoChanged()
    return true
  }

  /** Keeps a batch's events for resends, forgetting the oldest batches past the event budget. */
  const keep = (batchId: number, batch: KeptBatch): void => {
    kept.set(batchId, batch)
    keptEvents += batch.eventCount
    for (const [id, old] of kept) {
      if (keptEvents <= MAX_KEPT_EVENTS || kept.size === 1) break
      kept.delete(id)
      keptEvents -= old.eventCount
    }
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

  /** What the inspector's detail view shows of an attempt: built only when someone opens it. */
  const inspectedDetail = (summary: InspectedSummary, { signed, outcome }: Capture): InspectedDetail => ({
    ...summary,
    request: {
      method: 'POST',
      url: summary.endpoint,
      headers: outcome.requestHeaders,
      body: bodyText(signed.body, signed.body.length).text,
      bodyBytes: signed.body.length,
      bodyTruncated: false,
    },
    signature: describeSignature(outcome.requestHeaders),
    digest: describeDigest(outcome.requestHeaders, signed.body),
    curl: curlCommand(summary.endpoint, outcome.requestHeaders, signed.body),
    response: outcome.statusCode === null ? null : { headers: outcome.responseHeaders ?? [], body: outcome.body ?? '', truncated: outcome.bodyTruncated },
    remoteAddress: null,
  })

  /** Adds an attempt to the inspector's journal. */
  const inspect = (batch: SandboxBatch, detail: AttemptDetail, capture: Capture): void => {
    const answer = capture.outcome.body
    const outcome = classify(batch.status_code, answer)
    const spoiled = detail.tamper !== null && detail.tamper !== 'replay' && (outcome === 'accepted' || outcome === 'duplicate')
    const warning = spoiled ? WARNINGS.tampered : detail.tamper === 'replay' && outcome === 'accepted' ? WARNINGS.replay : null
    // What the page's search matches, read from the body as sent (a tampered one included).
    const { requestIds, addresses } = eventsAtAGlance(capture.signed.body)
    journal.add({
      at: batch.created_at,
      endpoint: batch.webhook,
      batchId: batch.batch_id,
      attempt: detail.attempt,
      eventCount: batch.event_count,
      eventTypes: capture.eventTypes,
      requestIds,
      addresses,
      statusCode: batch.status_code,
      durationMs: batch.duration.value,
      outcome,
      reason: reasonOf(answer),
      tamper: detail.tamper,
      resend: detail.resend,
      retryInMs: detail.retryInMs,
      error: detail.error,
      warning,
    }, (summary) => inspectedDetail(summary, capture), capture.signed.body.length + (answer?.length ?? 0))
  }

  /** Records one attempt (a listing row and an inspector entry), logs it and tells `onAttempt`. */
  const record = (batch: SandboxBatch, detail: AttemptDetail, capture: Capture): void => {
    batches.push(batch)
    inspect(batch, detail, capture)
    const log = { batchId: batch.batch_id, attempt: detail.attempt, status: batch.status, statusCode: batch.status_code, durationMs: batch.duration.value, tamper: detail.tamper, error: detail.error, resend: detail.resend }
    if (batch.status === '2xx_response') logger.info(log, 'sandbox delivery')
    else logger.warn(log, 'sandbox delivery failed')
    try {
      onAttempt?.({ ...batch, duration: { ...batch.duration } }, detail)
    } catch (err) {
      // A faulty observer must not break the delivery loop.
      logger.error({ err: (err as Error).message }, 'sandbox onAttempt callback threw')
    }
  }

  /** One POST of a signed batch, recorded as a listing row. */
  const attemptOnce = async (batchId: number, target: string, signed: SignedWebhook, keptBatch: KeptBatch): Promise<{ batch: SandboxBatch, error: string | null, capture: Capture }> => {
    const createdAt = new Date()
    stats.attempts++
    const outcome = await postBatch(target, signed, deliveryTimeout, closing.signal, INSPECTED_ANSWER_BYTES, agents)
    if (closing.signal.aborted) throw closedError()
    const batch: SandboxBatch = {
      batch_id: batchId,
      created_at: createdAt.toISOString(),
      customer_handle: customerHandle,
      duration: { unit: 'milliseconds', value: outcome.durationMs },
      event_count: keptBatch.eventCount,
      status: outcome.status,
      status_code: outcome.statusCode,
      webhook: target,
    }
    return { batch, error: outcome.error, capture: { signed, outcome, eventTypes: keptBatch.eventTypes } }
  }

  /** One delivery with its retries: the last attempt's record and what the endpoint said in it. */
  const deliverDetailed = async (events?: ReadonlyArray<WebhookEvent | WireEvent>, opts: DeliverOptions = {}, size = batchSize): Promise<{ batch: SandboxBatch, answer: EndpointAnswer | null, error: string | null }> => {
    if (closing.signal.aborted) throw closedError()
    const target = opts.target !== undefined ? parseTarget(opts.target) : endpoints[0] ?? null
    if (target === null) throw new TypeError('deliver needs a target: createSandbox({ target }), enroll(endpoint) or deliver(events, { target })')
    const tamper = opts.tamper ?? null
    if (tamper !== null && !TAMPER_KINDS.includes(tamper)) throw new TypeError(`tamper must be one of ${TAMPER_KINDS.join(', ')}`)
    const copied = tamper === 'replay' ? lastAccepted ?? lastSent : null
    if (tamper === 'replay' && copied === null) throw new TypeError("tamper 'replay' sends an earlier delivery again: deliver one first")
    let list = events
    if (list === undefined && copied === null) {
      list = sampleEvents(size, { customerHandle, startAt: eventCursor })
      eventCursor = (eventCursor + size) % 10
    }
    const batchEvents = copied?.kept.events ?? list!
    const eventCount = batchEvents.length
    const attemptsAllowed = opts.maxAttempts === undefined ? maxAttempts : number(opts.maxAttempts, 'maxAttempts', maxAttempts, 1, 10)
    const attempts = tamper === null ? attemptsAllowed : 1
    // One batch id for the delivery: its retries are the same batch, signed again.
    const batchId = nextBatchId++
    const keptBatch: KeptBatch = { events: [...batchEvents], webhook: target, eventCount, lastCreated: 0, eventTypes: batchEvents.slice(0, 1000).map(wireType) }
    keep(batchId, keptBatch)
    for (let attempt = 1; ; attempt++) {
      // Each attempt is signed afresh, as the real sender does. `created` always moves on, even
      // when a short test backoff lands in the same second, so every retry has a new signature.
      const created = Math.max(Math.floor(Date.now() / 1000), keptBatch.lastCreated + 1)
      keptBatch.lastCreated = created
      const signed = copied !== null ? copied.signed : tamper === null ? sign(list!, created) : tampered(list!, tamper)
      const { batch, error, capture } = await attemptOnce(batchId, target, signed, keptBatch)
      if (tamper === null) {
        lastSent = { signed, kept: keptBatch }
        if (batch.status === '2xx_response') lastAccepted = lastSent
      }
      const willRetry = batch.status !== '2xx_response' && attempt < attempts
      const retryInMs = willRetry ? retryDelay * 2 ** (attempt - 1) : null
      const answer = batch.status === '2xx_response' ? null : endpointAnswer(capture.outcome.body)
      record(batch, { attempt, willRetry, retryInMs, tamper, error, resend: false, answer }, capture)
      if (retryInMs === null) return { batch, answer, error }
      try {
        await sleep(retryInMs, undefined, { signal: closing.signal })
      } catch {
        throw closedError()
      }
    }
  }

  const deliver = async (events?: ReadonlyArray<WebhookEvent | WireEvent>, opts: DeliverOptions = {}): Promise<SandboxBatch> => (await deliverDetailed(events, opts)).batch

  const resend = async (batchId: number): Promise<SandboxResend | null> => {
    if (closing.signal.aborted) throw closedError()
    const batch = kept.get(batchId)
    if (batch === undefined) return null
    stats.resends++
    // Signed afresh with the current key, as the service signs every delivery; a later `created`
    // than any earlier attempt of the batch, so the signature is new even within the same second.
    const created = Math.max(Math.floor(Date.now() / 1000), batch.lastCreated + 1)
    batch.lastCreated = created
    const { batch: row, error, capture } = await attemptOnce(batchId, batch.webhook, sign(batch.events, created), batch)
    const attempt = batches.filter((b) => b.batch_id === batchId).length + 1
    const answer = row.status === '2xx_response' ? null : endpointAnswer(capture.outcome.body)
    record(row, { attempt, willRetry: false, retryInMs: null, tamper: null, error, resend: true, answer }, capture)
    return {
      batch_id: batchId,
      customer_handle: customerHandle,
      webhook: row.webhook,
      created_at: row.created_at,
      event_count: row.event_count,
      duration_in_ms: row.status_code === null ? null : row.duration.value,
      status_code: row.status_code,
    }
  }

  const validate = async (requestId?: string): Promise<SandboxValidation> => {
    if (closing.signal.aborted) throw closedError()
    const event = sampleEvent('test', customerHandle)
    if (requestId !== undefined) {
      event.request_id = requestId
      event.smtp_id = `<${requestId}@tx.mailchannels.net>`
    }
    const results = await Promise.all([...endpoints].map(async (webhook) => {
      stats.validations++
      const outcome = await postBatch(webhook, sign([event]), deliveryTimeout, closing.signal, MAX_VALIDATION_BODY_BYTES, agents)
      const answered = outcome.statusCode !== null
      const passed = answered && outcome.statusCode! >= 200 && outcome.statusCode! < 300
      logger.info({ webhook, statusCode: outcome.statusCode, error: outcome.error }, 'sandbox validation')
      return {
        result: passed ? 'passed' as const : 'failed' as const,
        webhook,
        response: answered ? { status: outcome.statusCode!, body: outcome.body ?? '' } : null,
      }
    }))
    if (closing.signal.aborted) throw closedError()
    return { all_passed: results.length > 0 && results.every((r) => r.result === 'passed'), results }
  }

  const tick = (): void => {
    if (inFlight.size >= maxInFlight || remaining <= 0 || endpoints.length === 0) return
    periodicCount++
    const tamper = tamperEvery > 0 && periodicCount % tamperEvery === 0
      ? PERIODIC_TAMPER_KINDS[(periodicCount / tamperEvery - 1) % PERIODIC_TAMPER_KINDS.length]
      : undefined
    const size = Math.min(batchSize, remaining)
    remaining -= size
    const events = sampleEvents(size, { customerHandle, startAt: eventCursor })
    eventCursor = (eventCursor + size) % 10
    // The same events to every enrolled endpoint, one batch each, as the service does.
    const p: Promise<void> = Promise.allSettled([...endpoints].map((target) => deliver(events, { target, ...(tamper !== undefined ? { tamper } : {}) })))
      .then((outcomes) => {
        for (const o of outcomes) {
          if (o.status === 'rejected' && !closing.signal.aborted) logger.error({ err: (o.reason as Error).message }, 'sandbox delivery error')
        }
      })
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

  let baseUrl = ''
  const removeEndpoints = (): void => {
    endpoints.length = 0
    journal.infoChanged()
  }
  const core: SandboxCore = {
    apiKey,
    customerHandle,
    get batches () { return batches },
    get endpoints () { return endpoints },
    publicKey: (id) => keys.get(id)?.publicKey ?? null,
    countRequest: (kind) => { if (kind === 'publicKey') stats.publicKeyRequests++; else stats.batchListRequests++ },
    enroll: (endpoint) => enroll(endpoint),
    removeEndpoints,
    validate,
    resend,
    rotateKey,
    deliverOne: async (tamper, types, attempts) => {
      if (endpoints.length === 0) return null
      const events = types?.map((type) => sampleEvent(type, customerHandle))
      return await deliverDetailed(events, { ...(tamper !== undefined ? { tamper } : {}), ...(attempts !== undefined ? { maxAttempts: attempts } : {}) })
    },
    inspector: {
      mode: 'sandbox',
      journal,
      info: () => ({ baseUrl, customerHandle, keyId: current.id, endpoints: [...endpoints], eventTypes: WEBHOOK_EVENT_TYPES, tamperKinds: TAMPER_KINDS }),
    },
  }

  const server = http.createServer(createApiHandler(core, logger))
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address() as AddressInfo
  baseUrl = `http://127.0.0.1:${address.port}`
  let closed: Promise<void> | null = null

  const sandbox: Sandbox = {
    baseUrl,
    get publicKey () { return current.publicKey },
    get keyId () { return current.id },
    apiKey: '',
    inspectorUrl: '',
    customerHandle,
    get target () { return endpoints[0] ?? null },
    get endpoints () { return [...endpoints] },
    get batches () { return batches },
    get stats () { return { ...stats } },
    enroll: (endpoint) => enroll(endpoint),
    removeEndpoints,
    validate: async (requestId) => {
      if (requestId !== undefined && (typeof requestId !== 'string' || requestId === '' || requestId.length > 28)) throw new TypeError('requestId must be a string of 1 to 28 characters')
      return validate(requestId)
    },
    resend: async (batchId) => {
      if (!Number.isSafeInteger(batchId) || batchId < 1) throw new TypeError('batchId must be a positive integer')
      return resend(batchId)
    },
    rotateKey,
    sign: (events) => sign(events),
    deliver,
    start (opts = {}) {
      if (opts === null || typeof opts !== 'object') throw new TypeError('start options must be an object')
      if (opts.count !== undefined && (!Number.isSafeInteger(opts.count) || opts.count < 1)) throw new TypeError('count must be a positive integer')
      if (opts.target !== undefined) enroll(opts.target, 'target')
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
        destroyAgents(agents)
        notifyIdle()
      })()
      return closed
    },
  }
  // Not enumerable: readable where it is needed, absent from inspect output, logs and JSON.
  Object.defineProperty(sandbox, 'apiKey', { value: apiKey, enumerable: false, writable: false })
  Object.defineProperty(sandbox, 'inspectorUrl', { value: `${baseUrl}/#key=${encodeURIComponent(apiKey)}`, enumerable: false, writable: false })
  return sandbox
}
