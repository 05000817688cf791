import crypto, { type KeyObject } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { WebhookEvent } from '../../events/types.js'
import type { Journal } from '../inspector/journal.js'
import { signWebhook, type SignedWebhook, type WireEvent } from '../sign-webhook.js'
import { endpointAnswer, type EndpointAnswer } from './answer.js'
import { journalAttempt, type Capture } from './attempt-journal.js'
import type { SandboxBatch } from './batch-query.js'
import { createAgents, destroyAgents, parseTarget, postBatch } from './delivery.js'
import { number, type ResolvedSandboxOptions } from './options.js'
import { TAMPER_KINDS, type SandboxResend, type SandboxValidation, type TamperKind } from './routes.js'
import { sampleEvent, sampleEvents } from './sample-events.js'
import type { AttemptDetail, DeliverOptions, SandboxStats } from './types.js'

// The sandbox's delivery loop: signing, one delivery with its retries, resends, validation
// requests and the periodic sender, each attempt recorded (a listing row, an inspector entry).
// The HTTP API (routes.ts) and the `Sandbox` object (sandbox.ts) drive it.

/** What `tamperEvery` cycles through (a replay needs an accepted delivery to copy). */
const PERIODIC_TAMPER_KINDS: readonly TamperKind[] = ['body', 'signature', 'expired']

/** Events kept for resends (the most recent batches' events; older batches answer 404). */
const MAX_KEPT_EVENTS = 100_000
/** What validation keeps of an endpoint's answer. */
const MAX_VALIDATION_BODY_BYTES = 1024
/** What the inspector keeps of a receiver's answer (enough for this library's error body). */
const INSPECTED_ANSWER_BYTES = 8 * 1024

/** What the sandbox keeps of a batch to resend it: its events, where it went, and the `created` of its last signature. */
interface KeptBatch { events: ReadonlyArray<WebhookEvent | WireEvent>, webhook: string, eventCount: number, lastCreated: number, eventTypes: string[] }

/** The `event` of an event, as it goes on the wire. */
const wireType = (event: WebhookEvent | WireEvent): string =>
  event.event === 'unknown' && typeof (event as { eventName?: unknown }).eventName === 'string' ? (event as { eventName: string }).eventName : event.event

export function closedError (): Error {
  return new Error('The sandbox was closed before the delivery finished')
}

/** What the sender shares with the rest of the sandbox. */
export interface SenderParts {
  /** The enrolled endpoints, in enrolment order (enrolment is the sandbox's). */
  readonly endpoints: readonly string[]
  readonly journal: Journal
  readonly stats: SandboxStats
  /** The current signing key. */
  signingKey (): { readonly id: string, readonly privateKey: KeyObject }
}

/** One delivery's last attempt and what the endpoint said in it. */
export interface DeliveryResult { batch: SandboxBatch, answer: EndpointAnswer | null, error: string | null }

export interface Sender {
  /** Every attempt so far, oldest first. */
  readonly batches: readonly SandboxBatch[]
  /** Whether `abort` was called. */
  readonly closed: boolean
  sign (events: ReadonlyArray<WebhookEvent | WireEvent>): SignedWebhook
  /** One delivery with its retries (`size` sample events when given no events). */
  deliverDetailed (events?: ReadonlyArray<WebhookEvent | WireEvent>, opts?: DeliverOptions, size?: number): Promise<DeliveryResult>
  deliver (events?: ReadonlyArray<WebhookEvent | WireEvent>, opts?: DeliverOptions): Promise<SandboxBatch>
  resend (batchId: number): Promise<SandboxResend | null>
  validate (requestId?: string): Promise<SandboxValidation>
  /** Starts the periodic sender (if not running), with `count` events left to send. */
  start (count: number | undefined): void
  stop (): Promise<void>
  finished (): Promise<void>
  /** Stops the periodic sender, aborts the deliveries in flight and waits for them. */
  abort (): Promise<void>
  /** Closes the keep-alive sockets and wakes `finished()`: the last step of closing. */
  dispose (): void
}

export function createSender (settings: ResolvedSandboxOptions, parts: SenderParts): Sender {
  const { customerHandle, batchSize, deliveryTimeout, maxAttempts, retryDelay, tamperEvery, maxInFlight, rate, logger, onAttempt } = settings
  const { endpoints, journal, stats } = parts
  const batches: SandboxBatch[] = []
  const kept = new Map<number, KeptBatch>()
  const agents = createAgents()
  let keptEvents = 0
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

  const sign = (events: ReadonlyArray<WebhookEvent | WireEvent>, created?: number, privateKey = parts.signingKey().privateKey): SignedWebhook =>
    signWebhook({ events, privateKey, keyId: parts.signingKey().id, ...(created !== undefined ? { created } : {}) })

  const tampered = (events: ReadonlyArray<WebhookEvent | WireEvent>, kind: TamperKind): SignedWebhook => {
    if (kind === 'signature') return sign(events, undefined, crypto.generateKeyPairSync('ed25519').privateKey)
    if (kind === 'expired') return sign(events, Math.floor(Date.now() / 1000) - 3600)
    const signed = sign(events)
    const wire = JSON.parse(signed.body.toString('utf8')) as WireEvent[]
    if (wire[0] !== undefined) wire[0].email = 'attacker@evil.example'
    else wire.push({ event: 'delivered', customer_handle: customerHandle, timestamp: Math.floor(Date.now() / 1000) })
    return { body: Buffer.from(JSON.stringify(wire), 'utf8'), headers: signed.headers }
  }

  /** Records one attempt (a listing row and an inspector entry), logs it and tells `onAttempt`. */
  const record = (batch: SandboxBatch, detail: AttemptDetail, capture: Capture): void => {
    batches.push(batch)
    journalAttempt(journal, batch, detail, capture)
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
  const deliverDetailed = async (events?: ReadonlyArray<WebhookEvent | WireEvent>, opts: DeliverOptions = {}, size = batchSize): Promise<DeliveryResult> => {
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

  return {
    batches,
    get closed () { return closing.signal.aborted },
    sign: (events) => sign(events),
    deliverDetailed,
    deliver,
    resend,
    validate,
    start (count) {
      if (closing.signal.aborted) throw closedError()
      remaining = count ?? Infinity
      if (timer === null) timer = setInterval(tick, 1000 / rate)
    },
    stop,
    finished,
    async abort () {
      stopTimer()
      closing.abort()
      await Promise.allSettled([...inFlight])
    },
    dispose () {
      destroyAgents(agents)
      notifyIdle()
    },
  }
}
