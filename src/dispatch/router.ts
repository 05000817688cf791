// Typed dispatch of verified events to handlers, with an optional exactly-once effect per
// event through a seen-events store. Framework-free and runtime-neutral (web-standard APIs only).
import { WEBHOOK_EVENT_TYPES, type WebhookEvent } from '../events/types.js'
import { noopLogger, type Logger } from '../logger.js'
import { HandlerTimeoutError, InboxTransactionError, ReplayStoreError } from '../replay/errors.js'
import { eventFingerprint } from '../replay/fingerprint.js'
import { CLAIMED, DONE, REPEATED, isTransactionalStore, synchronousSeenEvents, type EventClaim, type EventClaimResult, type SeenEventsStore, type SynchronousSeenEvents, type TransactionalSeenEventsStore } from '../replay/seen-events.js'
import type { DeliveryTransaction, DeliveryTransactionStore, DispatchContext, DispatchReport, EventOutcome, WebhookEventHandler, WebhookEventName } from './types.js'

export interface WebhookEventRouterOptions<T = never> {
  /**
   * Where handled events are remembered, for an exactly-once effect per event: each event is
   * claimed before its handlers run, marked done once they resolved and released if one
   * failed, so a retry or a resend of the delivery skips the events already handled.
   * `MemorySeenEventsStore` for one process, `RedisSeenEventsStore` for several instances,
   * `postgresSeenEvents` (`mailchannels-webhooks/postgres`) or `sqliteSeenEvents`
   * (`mailchannels-webhooks/sqlite`) in your own database. A transactional store
   * (`TransactionalSeenEventsStore`) runs each event's handlers in a transaction, handed to
   * them as `context.db`, and writes the done mark in it: effects and mark commit together.
   * Without one, every dispatch runs every handler (at least once: a retried delivery runs
   * its events again).
   * @default undefined (no store: at-least-once)
   */
  seenEvents?: SeenEventsStore | TransactionalSeenEventsStore<T>
  /**
   * How many events of one dispatch are handled at the same time. With 1 they are handled in
   * the order given, one after the other. The handlers of one event always run one after the
   * other, in the order they were registered.
   * @default 1
   */
  concurrency?: number
  /**
   * Seconds a claim on an event lives without renewal (whole seconds). While an event's
   * handlers run, its claim is renewed every third of this, so a crashed instance holds
   * an event back for at most this long. Another dispatch of the same event meanwhile reports
   * it `deferred`. Receivers answer such a delivery 503 with `Retry-After` set to this.
   * Only used with `seenEvents`.
   * @default 30 (seconds)
   */
  claimLifetime?: number
}

/** What `dispatch` takes besides the events: your own fields (`C`), plus an optional signal and logger. */
export type DispatchInput<C extends object = object> = C & {
  /** Aborting it gives the dispatch up: events not started yet fail with its reason, running handlers see `context.signal` aborted. */
  signal?: AbortSignal
  /** Handed to handlers as `context.log`; store problems the report cannot show are logged here. @default a logger that logs nothing */
  log?: Logger
}

type AnyHandler = (event: WebhookEvent, context: DispatchContext<any>) => unknown

const EVENT_NAMES: ReadonlySet<string> = new Set<string>([...WEBHOOK_EVENT_TYPES, 'unknown'])
const NAME_LIST = [...EVENT_NAMES].map((n) => `'${n}'`).join(', ')
const DEFAULT_CLAIM_LIFETIME = 30

/**
 * Runs your handlers for the events of a delivery, each with its event narrowed to its type,
 * and reports what became of every event. Give it to a receiver (`handlers: router`) so a
 * route needs no body, or call `dispatch` yourself (a queue worker, a test).
 *
 * With `seenEvents`, an event's handlers take effect once even when the delivery is retried or
 * resent, concurrently or later (within the store's `ttl`), on one instance or several sharing
 * Redis or a database. With most stores that covers everything but a handler that crashes after
 * its side effect and before the event is marked done: make side effects idempotent, keyed by
 * `context.fingerprint`. A transactional store (`postgresSeenEvents({ pool, transactional: true })`)
 * closes that gap for effects written through `context.db`: they commit with the done mark
 * (docs/inbox.md).
 *
 * @example
 * ```ts
 * import { WebhookEventRouter, MemorySeenEventsStore } from 'mailchannels-webhooks'
 *
 * const router = new WebhookEventRouter({ seenEvents: new MemorySeenEventsStore() })
 *   .on('hard-bounced', async (event) => { await suppress(event.email, event.status) })
 *   .on(['open', 'click'], async (event, { fingerprint }) => { await track(fingerprint, event) })
 *   .on('unknown', (event, { log }) => { log.info({ type: event.eventName }, 'new event type') })
 *
 * const report = await router.dispatch(events, { log })
 * for (const o of report.outcomes) if (o.status === 'failed') log.error({ err: o.error, type: o.event.event }, 'event failed')
 * ```
 * @typeParam C - What the caller of `dispatch` adds to every handler's context.
 */
export class WebhookEventRouter<C extends object = object, T = never> {
  /** Seconds a claim lives without renewal: the `Retry-After` of a delivery with `deferred` events. */
  readonly claimLifetime: number
  readonly #store: SeenEventsStore | undefined
  readonly #concurrency: number
  /** Handlers per event name, in registration order ('*' handlers appended to every name). */
  readonly #handlers = new Map<string, AnyHandler[]>()

  constructor (options: WebhookEventRouterOptions<T> = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('WebhookEventRouter options must be an object')
    const { seenEvents, concurrency = 1, claimLifetime = DEFAULT_CLAIM_LIFETIME } = options
    if (seenEvents !== undefined) checkStore(seenEvents)
    if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
      throw new TypeError(`concurrency must be a positive integer (events of one dispatch handled at once), got ${describe(concurrency)}`)
    }
    if (!Number.isSafeInteger(claimLifetime) || claimLifetime < 1) {
      throw new TypeError(`claimLifetime must be a positive integer number of seconds, got ${describe(claimLifetime)}`)
    }
    this.#store = seenEvents
    this.#concurrency = concurrency
    this.claimLifetime = claimLifetime
    for (const name of EVENT_NAMES) this.#handlers.set(name, [])
  }

  /**
   * Registers `handler` for events of `type` (one name or several), or for every event with
   * `'*'` (unknown types included). `'unknown'` receives event types this version does not know
   * (`event.eventName`, `event.fields`). An event's handlers run one after the other in
   * registration order; it counts as handled once all of them resolved, and as failed at the
   * first that throws (the rest do not run). Returns the router, for chaining.
   *
   * @example
   * ```ts
   * router.on('hard-bounced', async (event) => { await suppress(event.email, event.status) })
   * router.on(['soft-bounced', 'dropped'], (event) => { metrics.inc(event.event) })
   * router.on('*', (event, { fingerprint }) => audit.append(fingerprint, event))
   * ```
   * @throws TypeError when `type` is not an event type name (nor `'*'`) or `handler` is not a function.
   */
  on<N extends WebhookEventName> (type: N | readonly N[], handler: WebhookEventHandler<N, C, T>): this
  on (type: '*', handler: WebhookEventHandler<WebhookEventName, C, T>): this
  on (type: string | readonly string[], handler: WebhookEventHandler<any, C, T>): this {
    let names: string[]
    if (type === '*') {
      names = [...EVENT_NAMES]
    } else if (typeof type === 'string') {
      names = [checkName(type)]
    } else if (Array.isArray(type)) {
      if (type.length === 0) throw new TypeError(`on() needs at least one event type; use '*' for every event`)
      names = [...new Set(type.map((t: unknown) => {
        if (t === '*') throw new TypeError(`on() takes '*' alone, not inside a list of event types`)
        return checkName(t)
      }))]
    } else {
      throw new TypeError(`on() takes an event type name, a list of them or '*', got ${describe(type)}`)
    }
    if (typeof handler !== 'function') throw new TypeError(`on() needs a handler function, got ${describe(handler)}`)
    for (const name of names) this.#handlers.get(name)!.push(handler as AnyHandler)
    return this
  }

  /**
   * Runs the handlers of `events` and reports, per event in the order given, whether it was
   * `handled`, `skipped` (already handled), `unhandled` (no handler for its type), `deferred`
   * (another dispatch is handling it right now) or `failed` (a handler threw, or the
   * seen-events store failed: `error` is then a `ReplayStoreError`). `report.ok` says whether the
   * delivery may be acknowledged.
   *
   * Every handler gets `{ ...context, fingerprint, signal, log }`. Identical events inside
   * one dispatch (same `eventFingerprint`) are handled once: the first copy reports what became
   * of it, a later copy `skipped` when the first was handled or skipped, else the same status.
   *
   * The promise never rejects: handler and store failures are in the report. An event whose
   * handlers succeeded but whose done mark could not be written is reported `failed` with the
   * `ReplayStoreError`, so the delivery is not acknowledged on a mark that may be lost.
   *
   * @example
   * ```ts
   * const report = await router.dispatch(events, { keyId, log: request.log })
   * reply.code(report.ok ? 200 : 500).send({ handled: report.handled, skipped: report.skipped })
   * ```
   * @throws TypeError (synchronously) when `events` is not an array or `context` is malformed.
   */
  dispatch (events: readonly WebhookEvent[], context?: DispatchInput<C>): Promise<DispatchReport> {
    if (!Array.isArray(events)) throw new TypeError(`dispatch() takes an array of events, got ${describe(events)}`)
    if (context !== undefined && (context === null || typeof context !== 'object')) {
      throw new TypeError(`dispatch() context must be an object, got ${describe(context)}`)
    }
    const { signal, log = noopLogger } = (context ?? {}) as DispatchInput
    if (signal !== undefined && !isSignal(signal)) throw new TypeError('dispatch() context.signal must be an AbortSignal')
    if (!isLogger(log)) throw new TypeError('dispatch() context.log must be a logger (debug, info, warn and error methods)')
    const fallback = (err: unknown): DispatchReport => {
      // Unreachable by design; kept so the promise never rejects even on a bug.
      log.error({ err }, 'webhook event dispatch failed unexpectedly')
      return report(events, new Uint8Array(events.length).fill(FAILED), events.map(safeFingerprint), new Array(events.length).fill(err))
    }
    let result: DispatchReport | Promise<DispatchReport>
    try {
      result = new Dispatch(this.#handlers, this.#store, this.#concurrency, this.claimLifetime, events, (context ?? {}) as object, signal, log).run()
    } catch (err) {
      return Promise.resolve(fallback(err))
    }
    return result instanceof Promise ? result.catch(fallback) : Promise.resolve(result)
  }
}

// Where an event stands while a dispatch runs, one byte per event (outcome objects are built
// only when the report's `outcomes` is read: a receiver that answers 200 never reads them).
// 0: not settled yet.
const HANDLED = 1
const SKIPPED = 2
const UNHANDLED = 3
const DEFERRED = 4
const FAILED = 5
const STATUS_NAMES = [undefined, 'handled', 'skipped', 'unhandled', 'deferred', 'failed'] as const

/** One run of `dispatch`. Most dispatches run quick handlers: nothing is allocated for what they do not use. */
class Dispatch {
  readonly #status: Uint8Array
  /** By event index: the error of a failed event. */
  #errors: unknown[] | undefined
  readonly #fingerprints: string[]
  /** By event index: 1 while its claim is held and not yet handed to complete or release (what renewal extends). */
  #holding: Uint8Array | undefined
  #heldCount = 0
  /** By event index, for a store called through its promises: the claims. */
  #claims: (EventClaim | undefined)[] | undefined
  /** The memory store's synchronous methods (no promise, no claim object per event), else null. */
  readonly #sync: SynchronousSeenEvents | null
  /** The synchronous store's one claim on this dispatch's events. */
  #syncClaim: object | undefined
  /** Fingerprints handled and not yet marked done in the synchronous store (written in one call). */
  #toMark: string[] = []
  /** Made when the first handler runs (a dispatch that runs none needs no signal). */
  #controller: AbortController | undefined
  #completes: Batch | undefined
  #releases: Batch | undefined
  #renewal: ReturnType<typeof setInterval> | undefined
  #onAbort: (() => void) | undefined
  #stopError: unknown = undefined
  #stopped = false
  #finished = false
  /** The handler context of this dispatch with an empty fingerprint, copied for each event. */
  #template: Record<PropertyKey, unknown> | undefined
  /** Duplicates: their index, and the index of their first copy. */
  #duplicates: number[] | undefined
  #originals: number[] | undefined

  constructor (
    readonly handlers: ReadonlyMap<string, AnyHandler[]>,
    readonly store: SeenEventsStore | undefined,
    readonly concurrency: number,
    readonly claimLifetime: number,
    readonly events: readonly WebhookEvent[],
    readonly context: object,
    readonly callerSignal: AbortSignal | undefined,
    readonly log: Logger,
  ) {
    this.#status = new Uint8Array(events.length)
    this.#fingerprints = new Array(events.length).fill('')
    this.#sync = store === undefined ? null : synchronousSeenEvents(store)
  }

  /** The signal handlers see: aborted when the dispatch is given up. */
  get #signal (): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController()
      if (this.#stopped) this.#controller.abort(this.#stopError)
    }
    return this.#controller.signal
  }

  /** The report, synchronously when no handler returned a promise and the store answers synchronously. */
  run (): DispatchReport | Promise<DispatchReport> {
    const toRun = this.#prepare()
    const { callerSignal } = this
    if (callerSignal !== undefined) {
      if (callerSignal.aborted) this.#stop(callerSignal.reason)
      else {
        this.#onAbort = () => { this.#stop(callerSignal.reason) }
        callerSignal.addEventListener('abort', this.#onAbort, { once: true })
      }
    }
    let pending: Promise<void> | undefined
    try {
      pending = this.#claimAndRun(toRun)
    } catch (err) {
      this.#cleanUp()
      throw err
    }
    if (pending === undefined) {
      this.#cleanUp()
      this.#finished = true
      return this.#report()
    }
    return this.#settle(pending)
  }

  async #settle (pending: Promise<void>): Promise<DispatchReport> {
    try {
      await pending
    } finally {
      this.#cleanUp()
      if (this.#completes !== undefined) await this.#completes.settled()
      if (this.#releases !== undefined) await this.#releases.settled()
      this.#finished = true
    }
    return this.#report()
  }

  #cleanUp (): void {
    if (this.#renewal !== undefined) clearInterval(this.#renewal)
    if (this.#onAbort !== undefined) this.callerSignal!.removeEventListener('abort', this.#onAbort)
    this.#markDone()
  }

  /** Fingerprints every event, sets aside the unhandled and the copies; returns the indexes to run. */
  #prepare (): number[] {
    const { events } = this
    // Deduplicated by fingerprint: `first` maps a fingerprint to its first index. The synchronous
    // store's claim finds the copies itself (one lookup per event instead of two).
    const first = this.#sync === null ? new Map<string, number>() : undefined
    const toRun: number[] = []
    for (let i = 0; i < events.length; i++) {
      const event = events[i]!
      let fp: string
      try {
        fp = eventFingerprint(event)
      } catch (err) {
        this.#fail(i, err)
        continue
      }
      this.#fingerprints[i] = fp
      if (this.#handlersOf(event).length === 0) { this.#status[i] = UNHANDLED; continue }
      const original = first?.get(fp)
      if (original !== undefined) {
        (this.#duplicates ??= []).push(i)
        ;(this.#originals ??= []).push(original)
        continue
      }
      first?.set(fp, i)
      toRun.push(i)
    }
    return toRun
  }

  #claimAndRun (toRun: number[]): Promise<void> | undefined {
    if (this.store === undefined || toRun.length === 0 || this.#stopped) return this.#runAll(toRun)
    if (this.#sync !== null) return this.#runAll(this.#claimSynchronously(toRun))
    return this.#claim(toRun).then((runnable) => this.#runAll(runnable))
  }

  #runAll (runnable: readonly number[]): Promise<void> | undefined {
    // A store that runs a delivery in one transaction (a savepoint per event, one commit).
    const delivery = this.#claims !== undefined && runnable.length > 0 ? openDelivery(this.store!) : undefined
    if (delivery !== undefined) {
      this.#goingAsync()
      return this.#runDelivery(runnable, delivery)
    }
    if (this.concurrency === 1 || runnable.length < 2) return this.#runInOrder(runnable, 0)
    this.#goingAsync()
    return this.#runConcurrently(runnable)
  }

  #report (): DispatchReport {
    const duplicates = this.#duplicates
    if (duplicates !== undefined) {
      for (let d = 0; d < duplicates.length; d++) {
        const i = duplicates[d]!
        const o = this.#originals![d]!
        const status = this.#status[o]!
        if (status === FAILED) this.#fail(i, this.#errors![o])
        else this.#status[i] = status === HANDLED ? SKIPPED : status
      }
    }
    return report(this.events, this.#status, this.#fingerprints, this.#errors)
  }

  #handlersOf (event: WebhookEvent): AnyHandler[] {
    return this.handlers.get(event.event) ?? NO_HANDLERS
  }

  /** Claims every event in one call of the synchronous store; returns the indexes now ours to run. */
  #claimSynchronously (indexes: number[]): number[] {
    const fps = new Array<string>(indexes.length)
    for (let k = 0; k < indexes.length; k++) fps[k] = this.#fingerprints[indexes[k]!]!
    const results = new Uint8Array(indexes.length)
    this.#syncClaim = this.#sync!.claim(fps, this.claimLifetime, results)
    const holding = this.#holding = new Uint8Array(this.events.length)
    const mine: number[] = []
    let first: Map<string, number> | undefined
    for (let k = 0; k < indexes.length; k++) {
      const i = indexes[k]!
      const result = results[k]!
      if (result === CLAIMED) { holding[i] = 1; mine.push(i) } else if (result === REPEATED) {
        // A copy of an event earlier in this delivery: reported as its first copy is (#report).
        if (first === undefined) {
          first = new Map()
          for (let j = indexes.length - 1; j >= 0; j--) first.set(fps[j]!, indexes[j]!)
        }
        ;(this.#duplicates ??= []).push(i)
        ;(this.#originals ??= []).push(first.get(fps[k]!)!)
      } else this.#status[i] = result === DONE ? SKIPPED : DEFERRED
    }
    this.#heldCount = mine.length
    return mine
  }

  /** Claims every event in one store call; returns the indexes now ours to run. */
  async #claim (indexes: number[]): Promise<number[]> {
    const fps = indexes.map((i) => this.#fingerprints[i]!)
    const holding = this.#holding = new Uint8Array(this.events.length)
    const claims: (EventClaim | undefined)[] = this.#claims = new Array(this.events.length)
    let results: unknown
    try {
      results = await this.store!.claim(fps, this.claimLifetime)
      checkClaimReply(results, fps)
    } catch (err) {
      const error = storeError('claim', err)
      // A malformed reply may still hold real claims: give back whatever looks like one.
      if (Array.isArray(results)) {
        const replies: unknown[] = results
        indexes.forEach((i, k) => {
          const r = replies[k]
          if (isClaim(r) && r.fingerprint === fps[k]) { claims[i] = r; holding[i] = 1; this.#heldCount++ }
        })
      }
      for (const i of indexes) this.#giveBack(i, error)
      return []
    }
    const mine: number[] = []
    for (let k = 0; k < indexes.length; k++) {
      const i = indexes[k]!
      const result = results[k]!
      if (result === 'done') this.#status[i] = SKIPPED
      else if (result === 'processing') this.#status[i] = DEFERRED
      else { claims[i] = result; holding[i] = 1; this.#heldCount++; mine.push(i) }
    }
    return mine
  }

  /** Called before the dispatch first waits for a handler: claims held from now on are renewed. */
  #goingAsync (): void {
    if (this.#renewal === undefined && this.#heldCount > 0) this.#renewal = this.#startRenewal()
  }

  /** Renews the held claims every third of their lifetime; gives the dispatch up if that fails. */
  #startRenewal (): ReturnType<typeof setInterval> {
    let busy = false
    const timer = setInterval(() => {
      if (busy || this.#heldCount === 0 || this.#stopped) return
      if (this.#sync !== null) {
        // Every event still holding the synchronous claim is one not yet handed to complete or release.
        this.#sync.extend(this.#syncClaim!, this.claimLifetime)
        return
      }
      busy = true
      const claims: EventClaim[] = []
      const holding = this.#holding!
      for (let i = 0; i < holding.length; i++) if (holding[i] === 1) claims.push(this.#claims![i]!)
      this.store!.extend(claims, this.claimLifetime).then(() => { busy = false }, (err: unknown) => {
        busy = false
        if (this.#finished) return
        const error = storeError('extend', err)
        this.log.error({ err: errorSummary(error), fingerprints: claims.map((c) => c.fingerprint) },
          'webhook event claims could not be renewed; the dispatch is given up')
        this.#stop(error)
      })
    }, (this.claimLifetime * 1000) / 3)
    // Never keep a process alive just to renew claims.
    ;(timer as any).unref?.()
    return timer
  }

  /** Gives the dispatch up: events not started yet fail with `reason`; running handlers see the signal aborted. */
  #stop (reason: unknown): void {
    if (this.#stopped) return
    this.#stopped = true
    this.#stopError = reason
    this.#controller?.abort(reason)
  }

  /** Runs `indexes` from `from` on, one after the other; synchronously as long as the handlers return no promise. */
  #runInOrder (indexes: readonly number[], from: number): Promise<void> | undefined {
    for (let k = from; k < indexes.length; k++) {
      const i = indexes[k]!
      if (this.#stopped) { this.#giveBack(i, this.#stopError); continue }
      const pending = this.#runOne(i)
      if (pending !== undefined) {
        this.#goingAsync()
        return pending.then(() => this.#runInOrder(indexes, k + 1))
      }
    }
    return undefined
  }

  async #runConcurrently (indexes: readonly number[]): Promise<void> {
    let next = 0
    const worker = async (): Promise<void> => {
      while (next < indexes.length) {
        const i = indexes[next++]!
        if (this.#stopped) { this.#giveBack(i, this.#stopError); continue }
        await this.#runOne(i)
      }
    }
    const workers: Promise<void>[] = []
    for (let w = 0; w < Math.min(this.concurrency, indexes.length); w++) workers.push(worker())
    await Promise.all(workers)
  }

  /**
   * Runs the handlers of event `i` one after the other. Returns nothing when they all returned
   * without a promise (most quick handlers), else a promise of the rest: no tick per handler.
   */
  #runOne (i: number): Promise<void> | undefined {
    const event = this.events[i]!
    const handlers = this.#handlersOf(event)
    const handlerContext = this.#handlerContext(i)
    if (this.#claims !== undefined && this.#holding![i] === 1 && isTransactionalStore(this.store!)) {
      return this.#runInTransaction(i, this.store, handlers, handlerContext)
    }
    for (let h = 0; h < handlers.length; h++) {
      let result: unknown
      try {
        result = handlers[h]!(event, handlerContext)
      } catch (err) {
        this.#giveBack(i, err)
        return undefined
      }
      if (isThenable(result)) return this.#finishOne(i, result, handlers, h + 1, handlerContext)
    }
    this.#handled(i)
    return undefined
  }

  /**
   * `{ ...context, fingerprint, signal, log }`: a copy of one template per dispatch, built by
   * assignment (V8 adds properties to a spread copy slowly), whose fingerprint is then set.
   */
  #handlerContext (i: number): DispatchContext {
    let template = this.#template
    if (template === undefined) {
      template = this.#template = {}
      const source = this.context as Record<PropertyKey, unknown>
      const keys: PropertyKey[] = Object.keys(source)
      for (const key of Object.getOwnPropertySymbols(source)) if (Object.prototype.propertyIsEnumerable.call(source, key)) keys.push(key)
      for (let k = 0; k < keys.length; k++) {
        const key = keys[k]!
        // Assigning '__proto__' would set the prototype; spread makes it an own property.
        if (key === '__proto__') Object.defineProperty(template, key, { value: source[key], writable: true, enumerable: true, configurable: true })
        else template[key] = source[key]
      }
      template.fingerprint = ''
      template.signal = this.#signal
      template.log = this.log
    }
    const handlerContext = { ...template }
    handlerContext.fingerprint = this.#fingerprints[i]!
    return handlerContext as unknown as DispatchContext
  }

  async #finishOne (i: number, pending: PromiseLike<unknown>, handlers: AnyHandler[], from: number, handlerContext: DispatchContext): Promise<void> {
    const event = this.events[i]!
    try {
      await pending
      for (let h = from; h < handlers.length; h++) await handlers[h]!(event, handlerContext)
    } catch (err) {
      this.#giveBack(i, err)
      return
    }
    this.#handled(i)
  }

  /**
   * Runs event `i`'s handlers in a transaction of the store's database, handed to them as
   * `context.db`; the store writes the done mark in it before the commit. The claim is renewed
   * meanwhile like any other.
   */
  async #runInTransaction (i: number, store: TransactionalSeenEventsStore<unknown>, handlers: AnyHandler[], handlerContext: DispatchContext): Promise<void> {
    const claim = this.#claims![i]!
    if (!await this.#runTransactional(i, async (work) => await store.runInTransaction(claim, work), handlers, handlerContext)) return
    // Committed: the effects and the done mark are in, together.
    this.#status[i] = HANDLED
  }

  /**
   * Runs event `i`'s handlers inside `run` (a transaction of its own, or the event's savepoint in
   * a delivery's transaction) with `context.db` that transaction's. True when they resolved and
   * the done mark is written. False when the event failed: a handler failed (its effects undone)
   * or the transaction could not start, and the claim is given back so a retry handles the event;
   * or the handlers ran but the done mark or the transaction failed (or they broke a rule of
   * `context.db`): never acknowledged, the claim kept to expire on its own, so a retry finds the
   * event done (skipped) or runs it, never both.
   */
  async #runTransactional (i: number, run: (work: (db: unknown) => Promise<void>) => Promise<unknown>, handlers: AnyHandler[], handlerContext: DispatchContext): Promise<boolean> {
    const event = this.events[i]!
    let started = false
    let ran = false
    try {
      await run(async (db) => {
        started = true
        ;(handlerContext as { db?: unknown }).db = db
        for (let h = 0; h < handlers.length; h++) await handlers[h]!(event, handlerContext)
        ran = true
      })
    } catch (err) {
      if (!ran) {
        this.#giveBack(i, started ? err : storeError('transaction', err))
        // Past the store's handler deadline the handler may still run: its signal tells it to stop.
        if (err instanceof HandlerTimeoutError) this.#stop(err)
        return false
      }
      this.#handOff(i)
      this.log.error({ err: errorSummary(err), fingerprints: [this.#fingerprints[i]!] },
        'webhook event handlers ran but their transaction with the done mark did not commit')
      // A handler that ended the store's transaction itself fails its event as a handler error.
      this.#fail(i, err instanceof InboxTransactionError ? err : storeError('complete', err))
      return false
    }
    // Marked done: the effects and the mark commit together. In a delivery's transaction the
    // row's lock keeps every other claimer waiting until the commit, so no renewal is needed.
    this.#handOff(i)
    return true
  }

  /**
   * Runs the claimed events in transactions of a `DeliveryTransactionStore`: `concurrency` lanes
   * (one connection each), each running its events one after the other in a transaction, each
   * event in a savepoint, committing when the transaction is `full` and at the end. An event whose
   * handlers fail is undone alone and its claim released; the others commit together with their
   * done marks, and only once that commit succeeded are they handled. A failed commit
   * acknowledges none of them: their claims are left to expire, so a retry finds each event done
   * (skipped) or runs it, never both.
   */
  async #runDelivery (indexes: readonly number[], first: DeliveryTransaction<unknown>): Promise<void> {
    let next = 0
    const lane = async (tx: DeliveryTransaction<unknown>): Promise<void> => {
      let ran: number[] = []
      while (next < indexes.length) {
        const i = indexes[next++]!
        if (this.#stopped) { this.#giveBack(i, this.#stopError); continue }
        if (await this.#runInDelivery(i, tx)) ran.push(i)
        if (tx.full && next < indexes.length) {
          await this.#commitDelivery(tx, ran)
          ran = []
          tx = openDelivery(this.store!)!
        }
      }
      await this.#commitDelivery(tx, ran)
    }
    const lanes: Promise<void>[] = [lane(first)]
    for (let w = 1; w < Math.min(this.concurrency, indexes.length); w++) lanes.push(lane(openDelivery(this.store!)!))
    await Promise.all(lanes)
  }

  /** Commits `tx`: its events `ran` are handled, or, when the commit fails, failed and left to expire. */
  async #commitDelivery (tx: DeliveryTransaction<unknown>, ran: readonly number[]): Promise<void> {
    let failed: ReadonlyMap<string, unknown> | undefined | void
    try {
      failed = await tx.commit()
    } catch (err) {
      if (ran.length === 0) return
      this.log.error({ err: errorSummary(err), fingerprints: ran.map((i) => this.#fingerprints[i]!) },
        'webhook event handlers ran but their transaction with the done marks did not commit')
      for (const i of ran) {
        this.#handOff(i)
        // The event that broke a rule of context.db fails with its own error; the others with the store's (503).
        this.#fail(i, err instanceof InboxTransactionError && err.fingerprint === this.#fingerprints[i] ? err : storeError('complete', err))
      }
      return
    }
    // Committed: these events' effects and done marks are in, together; those the store names
    // failed after all (rolled back when another event failed and run again, or a late call).
    for (const i of ran) {
      this.#handOff(i)
      const fp = this.#fingerprints[i]!
      if (failed !== undefined && failed.has(fp)) this.#fail(i, failed.get(fp))
      else this.#status[i] = HANDLED
    }
  }

  /** Runs event `i`'s handlers in a savepoint of `tx`; whether they resolved and it is marked done (it then commits with `tx`). */
  async #runInDelivery (i: number, tx: DeliveryTransaction<unknown>): Promise<boolean> {
    const claim = this.#claims![i]!
    return await this.#runTransactional(i, async (work) => await tx.run(claim, work), this.#handlersOf(this.events[i]!), this.#handlerContext(i))
  }

  #handled (i: number): void {
    this.#status[i] = HANDLED
    if (!this.#handOff(i)) return
    if (this.#sync !== null) {
      // Marked done in one call when this synchronous stretch of handlers ends (or the dispatch does).
      if (this.#toMark.push(this.#fingerprints[i]!) === 1) queueMicrotask(() => { this.#markDone() })
      return
    }
    (this.#completes ??= new Batch(async (claims, indexes) => { await this.#writeCompletes(claims, indexes) })).add(this.#claims![i]!, i)
  }

  /** Writes the synchronous store's pending done marks. */
  #markDone (): void {
    if (this.#toMark.length === 0) return
    const fps = this.#toMark
    this.#toMark = []
    this.#sync!.complete(fps)
  }

  /** Records event `i` as failed and releases its claim, if any, so a retry handles it. */
  #giveBack (i: number, error: unknown): void {
    this.#fail(i, error)
    if (!this.#handOff(i)) return
    if (this.#sync !== null) { this.#sync.release(this.#syncClaim!, [this.#fingerprints[i]!]); return }
    (this.#releases ??= new Batch(async (claims) => { await this.#writeReleases(claims) })).add(this.#claims![i]!, i)
  }

  /** Takes event `i`'s claim out of the held ones (no more renewal), to complete or release it; whether it held one. */
  #handOff (i: number): boolean {
    const holding = this.#holding
    if (holding === undefined || holding[i] !== 1) return false
    holding[i] = 0
    this.#heldCount--
    return true
  }

  async #writeCompletes (claims: EventClaim[], indexes: number[]): Promise<void> {
    try {
      await this.store!.complete(claims)
    } catch (err) {
      // The handlers ran, but the done mark may not have been written (or not durably, with
      // waitForReplicas): never acknowledge such an event. It fails with the store error, so the
      // delivery is answered 503 and retried; the retry skips it if the mark did land. The claim
      // is kept (not released): it expires on its own, so a retry meanwhile is deferred.
      this.log.error({ err: errorSummary(err), fingerprints: claims.map((c) => c.fingerprint) },
        'webhook events were handled but could not be marked done in the seen-events store')
      const error = storeError('complete', err)
      for (const i of indexes) this.#fail(i, error)
    }
  }

  async #writeReleases (claims: EventClaim[]): Promise<void> {
    try {
      await this.store!.release(claims)
    } catch (err) {
      this.log.warn({ err: errorSummary(err), fingerprints: claims.map((c) => c.fingerprint) },
        'webhook event claims could not be released; they expire on their own')
    }
  }

  #fail (i: number, error: unknown): void {
    this.#status[i] = FAILED
    ;(this.#errors ??= [])[i] = error
  }
}

const NO_HANDLERS: AnyHandler[] = []

/** A new delivery transaction of `store`, if it runs deliveries in one transaction (`DeliveryTransactionStore`). */
function openDelivery (store: SeenEventsStore): DeliveryTransaction<unknown> | undefined {
  const open = (store as Partial<DeliveryTransactionStore<unknown>>).openDelivery
  return typeof open === 'function' ? open.call(store) : undefined
}

function isThenable (value: unknown): value is PromiseLike<unknown> {
  return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as PromiseLike<unknown>).then === 'function'
}

/**
 * Groups store writes: claims added while a call is in flight go together in the next call,
 * so a dispatch of many events costs a few round trips, not one per event.
 */
class Batch {
  #claims: EventClaim[] = []
  #indexes: number[] = []
  #running: Promise<void> | undefined

  /** `write` never rejects: it handles its own failure. */
  constructor (readonly write: (claims: EventClaim[], indexes: number[]) => Promise<void>) {}

  add (claim: EventClaim, index: number): void {
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

/**
 * The report of a dispatch, its counts taken now; `outcomes` is an enumerable property built on
 * first read (one object per event) and kept.
 */
function report (events: readonly WebhookEvent[], status: Uint8Array, fingerprints: readonly string[], errors: unknown[] | undefined): DispatchReport {
  let handled = 0
  let skipped = 0
  let unhandled = 0
  let deferred = 0
  let failed = 0
  for (let i = 0; i < status.length; i++) {
    switch (status[i]) {
      case HANDLED: handled++; break
      case SKIPPED: skipped++; break
      case UNHANDLED: unhandled++; break
      case DEFERRED: deferred++; break
      default: failed++
    }
  }
  let outcomes: EventOutcome[] | undefined
  // `outcomes` is an own enumerable getter, built on first read: a receiver that answers 200
  // never reads it. Written in the literal (defineProperty on a built object cost ~2 µs a delivery).
  const result: DispatchReport = {
    get outcomes () {
      return (outcomes ??= Array.from(events, (event, i): EventOutcome => {
        const s = status[i]!
        // A status never set is a bug caught by dispatch's fallback; reported failed, never lost.
        return s === HANDLED || s === SKIPPED || s === UNHANDLED || s === DEFERRED
          ? { status: STATUS_NAMES[s], event, fingerprint: fingerprints[i]! }
          : { status: 'failed', event, fingerprint: fingerprints[i]!, error: errors?.[i] }
      }))
    },
    handled,
    skipped,
    unhandled,
    deferred,
    failed,
    ok: deferred === 0 && failed === 0,
  }
  return result
}

function checkName (name: unknown): string {
  if (typeof name === 'string' && EVENT_NAMES.has(name)) return name
  throw new TypeError(`on() got an unknown event type ${describe(name)}: use one of ${NAME_LIST}, or '*' for every event`)
}

function checkStore (store: unknown): void {
  const s = store as Partial<Record<keyof SeenEventsStore, unknown>> | null
  const missing = s === null || typeof s !== 'object'
    ? ['claim', 'complete', 'release', 'extend']
    : (['claim', 'complete', 'release', 'extend'] as const).filter((m) => typeof s[m] !== 'function')
  if (missing.length > 0) {
    throw new TypeError(`seenEvents must be a SeenEventsStore with claim, complete, release and extend methods (missing: ${missing.join(', ')}); ` +
      'use MemorySeenEventsStore, RedisSeenEventsStore, postgresSeenEvents or sqliteSeenEvents')
  }
}

function checkClaimReply (results: unknown, fps: readonly string[]): asserts results is EventClaimResult[] {
  if (!Array.isArray(results) || results.length !== fps.length) {
    throw new ReplayStoreError('claim', 'The seen-events store answered claim with the wrong number of results.')
  }
  results.forEach((r, k) => {
    if (r !== 'done' && r !== 'processing' && !(isClaim(r) && r.fingerprint === fps[k])) {
      throw new ReplayStoreError('claim', 'The seen-events store answered claim with an unexpected result.')
    }
  })
}

function isClaim (r: unknown): r is EventClaim {
  return r !== null && typeof r === 'object' && typeof (r as EventClaim).fingerprint === 'string' && typeof (r as EventClaim).token === 'string'
}

/** A store failure as the `ReplayStoreError` receivers answer 503 for (a custom store may reject with anything). */
function storeError (operation: string, err: unknown): ReplayStoreError {
  if (err instanceof ReplayStoreError) return err
  return new ReplayStoreError(operation, `The seen-events store failed to ${operation} events.`, { cause: err })
}

/** What is logged of a store error: its name and message (no stack of someone else's client, no payload). */
function errorSummary (err: unknown): { type: string, message: string } {
  return err instanceof Error ? { type: err.name, message: err.message } : { type: typeof err, message: String(err) }
}

function safeFingerprint (event: WebhookEvent): string {
  try { return eventFingerprint(event) } catch { return '' }
}

function isSignal (s: unknown): s is AbortSignal {
  return s !== null && typeof s === 'object' && typeof (s as AbortSignal).aborted === 'boolean' && typeof (s as AbortSignal).addEventListener === 'function'
}

function isLogger (l: unknown): l is Logger {
  if (l === null || typeof l !== 'object') return false
  const x = l as Record<string, unknown>
  return typeof x.debug === 'function' && typeof x.info === 'function' && typeof x.warn === 'function' && typeof x.error === 'function'
}

function describe (value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value)
  if (typeof value === 'function') return 'a function'
  if (Array.isArray(value)) return 'an array'
  if (value === null) return 'null'
  return typeof value === 'object' ? 'an object' : String(value)
}
