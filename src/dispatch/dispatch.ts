// One run of `WebhookEventRouter.dispatch`: the events fingerprinted, claimed, their handlers run
// (in order, concurrently, or on the transactional path) and the report built. Events are named by
// their index in the delivery throughout.
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import { eventFingerprint } from '../replay/fingerprint.js'
import { isTransactionalStore, type ClaimStore } from '../replay/claim-store.js'
import { Claims } from './claims.js'
import { FailureDecisions } from './dead-letters.js'
import { FAILED, HANDLED, Outcomes, UNHANDLED, report } from './report.js'
import { openDelivery, runDelivery, runInTransaction, type TransactionalDispatch } from './transaction.js'
import type { AnyHandler, DispatchContext, DispatchReport } from './types.js'

/**
 * Runs a dispatch to its report. The promise never rejects: a failure that escapes the
 * dispatch (a bug) is logged and every event reported failed with it.
 */
export function runDispatch (
  handlers: ReadonlyMap<string, AnyHandler[]>,
  store: ClaimStore | undefined,
  concurrency: number,
  claimLifetime: number,
  events: readonly WebhookEvent[],
  context: object,
  callerSignal: AbortSignal | undefined,
  log: Logger,
  decisions?: FailureDecisions,
): Promise<DispatchReport> {
  let result: DispatchReport | Promise<DispatchReport>
  try {
    result = new Dispatch(handlers, store, concurrency, claimLifetime, events, context, callerSignal, log, decisions).run()
  } catch (err) {
    return Promise.resolve(failedReport(events, log, err))
  }
  return result instanceof Promise ? result.catch((err: unknown) => failedReport(events, log, err)) : Promise.resolve(result)
}

/** Every event failed with `err`: a failure that escaped the dispatch (unreachable by design; kept so the promise never rejects even on a bug). */
function failedReport (events: readonly WebhookEvent[], log: Logger, err: unknown): DispatchReport {
  log.error({ err }, 'webhook event dispatch failed unexpectedly')
  return report(events, new Uint8Array(events.length).fill(FAILED), events.map(safeFingerprint), new Array(events.length).fill(err))
}

const NO_HANDLERS: AnyHandler[] = []

/** Dispatches of at most this many events make their signal only when a handler reads it (`handlerContext`). */
const LAZY_SIGNAL_EVENTS = 16

/**
 * The signal of one dispatch's handlers, made on first read: aborted when the dispatch is given
 * up, also when first read only after that. Kept apart from the dispatch, so a context a handler
 * keeps holds this and not the dispatch's events.
 */
class DispatchSignal {
  #controller: AbortController | undefined
  #stopped = false
  #reason: unknown = undefined

  get signal (): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController()
      if (this.#stopped) this.#controller.abort(this.#reason)
    }
    return this.#controller.signal
  }

  /** Whether `signal` was read. */
  get made (): boolean {
    return this.#controller !== undefined
  }

  abort (reason: unknown): void {
    if (this.#stopped) return
    this.#stopped = true
    this.#reason = reason
    this.#controller?.abort(reason)
  }
}

/** Returns the object it is given, so that a subclass can add a private field to any object. */
class Returning {
  constructor (o: object) {
    return o
  }
}

/**
 * A handler context whose `signal` is an own, enumerable accessor: its first read makes the
 * dispatch's signal and turns the accessor into a plain property holding it. The dispatch's
 * `DispatchSignal` is kept in a private field: invisible to spread, `Object.keys` and symbols,
 * so the context's own keys are those of the plain object it is. One getter for every context,
 * so V8 shares their shape. (Its accessor copied to another object with
 * `Object.getOwnPropertyDescriptors` before its first read reads `undefined` there.)
 */
class LazyContext extends Returning {
  readonly #source: DispatchSignal

  private constructor (o: Record<PropertyKey, unknown>, source: DispatchSignal) {
    super(o)
    this.#source = source
  }

  static readonly #SIGNAL: PropertyDescriptor = {
    get (this: object) {
      if (!(#source in this)) return undefined
      const signal = (this as LazyContext).#source.signal
      Object.defineProperty(this, 'signal', { value: signal, writable: true, enumerable: true, configurable: true })
      return signal
    },
    // Writable as a plain property: an assignment makes it one.
    set (this: object, value: unknown) { Object.defineProperty(this, 'signal', { value, writable: true, enumerable: true, configurable: true }) },
    enumerable: true,
    configurable: true,
  }

  /**
   * A copy of `template` (the dispatch's context, `keys` its keys in order) with `fingerprint`
   * and the `signal` accessor. Built key by key: V8 adds a property to a spread copy slowly, and
   * an accessor is one.
   */
  static make (template: Record<PropertyKey, unknown>, keys: readonly PropertyKey[], fingerprint: string, source: DispatchSignal): Record<PropertyKey, unknown> {
    const o: Record<PropertyKey, unknown> = {}
    for (let k = 0; k < keys.length; k++) {
      const key = keys[k]!
      if (key === 'signal') Object.defineProperty(o, key, LazyContext.#SIGNAL)
      else if (key === 'fingerprint') o.fingerprint = fingerprint
      else if (key === '__proto__') Object.defineProperty(o, key, { value: template[key], writable: true, enumerable: true, configurable: true })
      else o[key] = template[key]
    }
    new LazyContext(o, source) // eslint-disable-line no-new
    return o
  }
}
const lazyContext = (template: Record<PropertyKey, unknown>, keys: readonly PropertyKey[], fingerprint: string, source: DispatchSignal): Record<PropertyKey, unknown> =>
  LazyContext.make(template, keys, fingerprint, source)

/** One run of `dispatch`. Most dispatches run quick handlers: nothing is allocated for what they do not use. */
class Dispatch implements TransactionalDispatch {
  readonly outcomes: Outcomes
  /** With a seen-events store: the claims of this dispatch. */
  readonly claims: Claims | undefined
  /** Given up: events not started yet fail with `stopError`. */
  stopped = false
  stopError: unknown = undefined
  /** Every handler and store write is done (a renewal failing now changes nothing). */
  finished = false
  /** The handlers' signal: made when the first handler runs, or in a dispatch of few events when one reads it. */
  readonly #signal = new DispatchSignal()
  #onAbort: (() => void) | undefined
  /** The handler context of this dispatch with an empty fingerprint, copied for each event. */
  #template: Record<PropertyKey, unknown> | undefined
  /** The template's keys, in order (a dispatch of few events builds each context from them). */
  #templateKeys: PropertyKey[] = []

  constructor (
    readonly handlers: ReadonlyMap<string, AnyHandler[]>,
    readonly store: ClaimStore | undefined,
    readonly concurrency: number,
    readonly claimLifetime: number,
    readonly events: readonly WebhookEvent[],
    readonly context: object,
    readonly callerSignal: AbortSignal | undefined,
    readonly log: Logger,
    /** With `deadLetters`: how a handler failure is decided (counted, parked). */
    readonly decisions: FailureDecisions | undefined,
  ) {
    this.outcomes = new Outcomes(events)
    this.claims = store === undefined ? undefined : new Claims(store, claimLifetime, this.outcomes, log)
  }

  /** The report, synchronously when no handler returned a promise and the store answers synchronously. */
  run (): DispatchReport | Promise<DispatchReport> {
    const toRun = this.#prepare()
    const { callerSignal } = this
    if (callerSignal !== undefined) {
      if (callerSignal.aborted) this.stop(callerSignal.reason)
      else {
        this.#onAbort = () => { this.stop(callerSignal.reason) }
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
    // A failure being recorded in the dead-letter store: waited for like a handler.
    if (pending === undefined && this.decisions?.busy === true) pending = Promise.resolve()
    if (pending === undefined) {
      this.#cleanUp()
      this.finished = true
      return this.outcomes.report()
    }
    return this.#settle(pending)
  }

  async #settle (pending: Promise<void>): Promise<DispatchReport> {
    try {
      await pending
      // Every failure decided (parked or given back) before the claims are written.
      if (this.decisions !== undefined) await this.decisions.settled()
    } finally {
      this.#cleanUp()
      if (this.claims !== undefined) await this.claims.settled()
      this.finished = true
    }
    return this.outcomes.report()
  }

  #cleanUp (): void {
    if (this.#onAbort !== undefined) this.callerSignal!.removeEventListener('abort', this.#onAbort)
    this.claims?.cleanUp()
  }

  /** Fingerprints every event, sets aside the unhandled and the copies; returns the indexes to run. */
  #prepare (): number[] {
    const { events, outcomes } = this
    // Deduplicated by fingerprint: `first` maps a fingerprint to its first index. The synchronous
    // store's claim finds the copies itself (one lookup per event instead of two).
    const first = this.claims?.sync == null ? new Map<string, number>() : undefined
    const toRun: number[] = []
    for (let i = 0; i < events.length; i++) {
      const event = events[i]!
      let fp: string
      try {
        fp = eventFingerprint(event)
      } catch (err) {
        outcomes.fail(i, err)
        continue
      }
      outcomes.fingerprints[i] = fp
      if (this.handlersOf(event).length === 0) { outcomes.status[i] = UNHANDLED; continue }
      const original = first?.get(fp)
      if (original !== undefined) {
        outcomes.duplicate(i, original)
        continue
      }
      first?.set(fp, i)
      toRun.push(i)
    }
    return toRun
  }

  #claimAndRun (toRun: number[]): Promise<void> | undefined {
    const { claims } = this
    if (claims === undefined || toRun.length === 0 || this.stopped) return this.#runAll(toRun)
    if (claims.sync !== null) return this.#runAll(claims.claimSynchronously(toRun))
    return claims.claim(toRun).then((runnable) => this.#runAll(runnable))
  }

  #runAll (runnable: readonly number[]): Promise<void> | undefined {
    // A store that runs a delivery in few transactions (groups of events, one commit each).
    const delivery = this.claims?.viaPromises === true && runnable.length > 0 ? openDelivery(this.store!) : undefined
    if (delivery !== undefined) {
      this.#goingAsync()
      return runDelivery(this, runnable, delivery)
    }
    if (this.concurrency === 1 || runnable.length < 2) return this.#runInOrder(runnable, 0)
    this.#goingAsync()
    return this.#runConcurrently(runnable)
  }

  handlersOf (event: WebhookEvent): AnyHandler[] {
    return this.handlers.get(event.event) ?? NO_HANDLERS
  }

  /** Called before the dispatch first waits for a handler: claims held from now on are renewed. */
  #goingAsync (): void {
    this.claims?.renew(this)
  }

  /** Gives the dispatch up: events not started yet fail with `reason`; running handlers see the signal aborted. */
  stop (reason: unknown): void {
    if (this.stopped) return
    this.stopped = true
    this.stopError = reason
    this.#signal.abort(reason)
  }

  /** Runs `indexes` from `from` on, one after the other; synchronously as long as the handlers return no promise. */
  #runInOrder (indexes: readonly number[], from: number): Promise<void> | undefined {
    for (let k = from; k < indexes.length; k++) {
      const i = indexes[k]!
      if (this.stopped) { this.giveBack(i, this.stopError); continue }
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
        if (this.stopped) { this.giveBack(i, this.stopError); continue }
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
    const handlers = this.handlersOf(event)
    const handlerContext = this.handlerContext(i)
    const { claims } = this
    if (claims !== undefined && claims.viaPromises && claims.held(i) && isTransactionalStore(this.store!)) {
      return runInTransaction(this, i, this.store, handlers, handlerContext)
    }
    for (let h = 0; h < handlers.length; h++) {
      let result: unknown
      try {
        result = handlers[h]!(event, handlerContext)
      } catch (err) {
        this.handlerFailed(i, err)
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
   * In a dispatch of few events `signal` is an accessor that makes the dispatch's signal on
   * first read (`lazyContext`): most handlers never read it, and Node takes about 5 µs to make
   * one AbortSignal, more than the rest of such a dispatch. Larger dispatches make it once,
   * when their first handler runs, and hand it as a plain property (one accessor per event
   * would cost them more than the one signal).
   */
  handlerContext (i: number): DispatchContext {
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
      template.signal = this.events.length > LAZY_SIGNAL_EVENTS ? this.signal : undefined
      template.log = this.log
      this.#templateKeys = Reflect.ownKeys(template)
    }
    const small = this.events.length <= LAZY_SIGNAL_EVENTS
    // Once a handler has read it, the signal is there: the rest get it as a plain property.
    if (small && !this.#signal.made) return lazyContext(template, this.#templateKeys, this.outcomes.fingerprints[i]!, this.#signal) as unknown as DispatchContext
    const handlerContext = { ...template }
    handlerContext.fingerprint = this.outcomes.fingerprints[i]!
    if (small) handlerContext.signal = this.signal
    return handlerContext as unknown as DispatchContext
  }

  /** The signal handlers see: aborted when the dispatch is given up. Made on first read. */
  get signal (): AbortSignal {
    return this.#signal.signal
  }

  async #finishOne (i: number, pending: PromiseLike<unknown>, handlers: AnyHandler[], from: number, handlerContext: DispatchContext): Promise<void> {
    const event = this.events[i]!
    try {
      await pending
      for (let h = from; h < handlers.length; h++) await handlers[h]!(event, handlerContext)
    } catch (err) {
      this.handlerFailed(i, err)
      return
    }
    this.#handled(i)
  }

  /** Every handler of event `i` resolved: it is handled, and marked done if it holds a claim. */
  #handled (i: number): void {
    // Its claim lapsed while the handlers ran: it stays failed, left to whoever holds it now.
    if (this.claims?.lapsed(i) === true) return
    this.outcomes.status[i] = HANDLED
    this.claims?.complete(i)
  }

  /**
   * What becomes of event `i` when one of its handlers threw, rejected or timed out (`error`):
   * the one place that decides it, on every path. Without `deadLetters`: it fails, and its claim
   * is released so a retry of the delivery handles it again. With them (src/dispatch/dead-letters.ts):
   * the failure is counted first; once parked, the event is completed instead and reported parked.
   */
  handlerFailed (i: number, error: unknown): void {
    // Its claim lapsed while the handlers ran: failed already, and neither ours to park nor to release.
    if (this.claims?.lapsed(i) === true) return
    if (this.decisions === undefined) { this.giveBack(i, error); return }
    this.decisions.decide(this.events[i]!, this.outcomes.fingerprints[i]!, error, this.log, (parked) => {
      if (this.claims?.lapsed(i) === true) return
      if (!parked) { this.giveBack(i, error); return }
      this.outcomes.park(i, error)
      this.claims?.complete(i)
    })
  }

  /** Records event `i` as failed and releases its claim, if any, so a retry handles it. */
  giveBack (i: number, error: unknown): void {
    this.outcomes.fail(i, error)
    this.claims?.release(i)
  }
}

function isThenable (value: unknown): value is PromiseLike<unknown> {
  return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as PromiseLike<unknown>).then === 'function'
}

function safeFingerprint (event: WebhookEvent): string {
  try { return eventFingerprint(event) } catch { return '' }
}
