// Typed dispatch of verified events to handlers, with an optional exactly-once effect per
// event through a seen-events store. Framework-free and runtime-neutral (web-standard APIs only).
// This file is the router: its options, the registration of handlers and the entry of
// `dispatch`; one dispatch runs in dispatch.ts.
import type { WebhookEvent } from '../events/types.js'
import { noopLogger, type Logger } from '../logger.js'
import type { ClaimStore, TransactionalClaimStore } from '../replay/claim-store.js'
import type { DeadLetterStore } from '../replay/dead-letters-types.js'
import { EVENT_NAMES, checkName, checkStore, describe, isLogger, isSignal } from './checks.js'
import { runDispatch } from './dispatch.js'
import { FailureDecisions, checkDeadLetters, discardDeadLetter, retryDeadLetter, type DeadLetterOptions, type DeadLetterRetryResult, type Parking } from './dead-letters.js'
import type { AnyHandler, DispatchReport, WebhookEventHandler, WebhookEventName } from './types.js'

export interface WebhookEventRouterOptions<T = never> {
  /**
   * Where handled events are remembered, for an exactly-once effect per event: each event is
   * claimed before its handlers run, marked done once they resolved and released if one
   * failed, so a retry or a resend of the delivery skips the events already handled.
   * `MemoryClaimStore` for one process, `RedisClaimStore` for several instances,
   * `postgresSeenEvents` (`mailchannels-webhooks/postgres`) or `sqliteSeenEvents`
   * (`mailchannels-webhooks/sqlite`) in your own database. A transactional store
   * (`TransactionalClaimStore`) runs each event's handlers in a transaction, handed to
   * them as `context.db`, and writes the done mark in it: effects and mark commit together.
   * Without one, every dispatch runs every handler (at least once: a retried delivery runs
   * its events again).
   * @default undefined (no store: at-least-once)
   */
  seenEvents?: ClaimStore | TransactionalClaimStore<T>
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
   * A claim is a lease: an instance that stops for longer than two thirds of this (a blocked
   * event loop, a paused VM or container) loses it, and another instance may then handle the
   * event too. Keep it well above the longest pause you expect. If its handlers are still
   * running when it resumes, its next renewal finds the claim lapsed: the dispatch is given up
   * (`context.signal` aborts) and the event fails there, never acknowledged (docs/events.md,
   * "What exactly once covers").
   * Only used with `seenEvents`.
   * @default 30 (seconds)
   */
  claimLifetime?: number
  /**
   * Park poison events: an event whose handlers failed `after` times (default 5) is stored as a
   * dead letter in `store` and completed, so it no longer fails its delivery (answered 2xx once
   * the rest is handled). List, retry and discard them with `retryDeadLetter`,
   * `discardDeadLetter`, the store's `list`, or the CLI's `dead-letters` commands (docs/events.md).
   * @default undefined (off: a failing event fails its delivery until MailChannels gives up)
   */
  deadLetters?: DeadLetterOptions
}

/** What `dispatch` takes besides the events: your own fields (`C`), plus an optional signal and logger. */
export type DispatchInput<C extends object = object> = C & {
  /** Aborting it gives the dispatch up: events not started yet fail with its reason, running handlers see `context.signal` aborted. */
  signal?: AbortSignal
  /** Handed to handlers as `context.log`; store problems the report cannot show are logged here. @default a logger that logs nothing */
  log?: Logger
}

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
 * import { WebhookEventRouter, MemoryClaimStore } from 'mailchannels-webhooks'
 *
 * const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() })
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
  readonly #store: ClaimStore | undefined
  readonly #concurrency: number
  /** Handlers per event name, in registration order ('*' handlers appended to every name). */
  readonly #handlers = new Map<string, AnyHandler[]>()
  readonly #parking: Parking | undefined

  constructor (options: WebhookEventRouterOptions<T> = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('WebhookEventRouter options must be an object')
    const { seenEvents, concurrency = 1, claimLifetime = DEFAULT_CLAIM_LIFETIME, deadLetters } = options
    if (seenEvents !== undefined) checkStore(seenEvents)
    this.#parking = checkDeadLetters(deadLetters)
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
    return runDispatch(this.#handlers, this.#store, this.#concurrency, this.claimLifetime, events, (context ?? {}) as object, signal, log,
      this.#parking === undefined ? undefined : new FailureDecisions(this.#parking))
  }

  /** The `deadLetters.store`, to list and show dead letters (undefined without `deadLetters`). */
  get deadLetters (): DeadLetterStore | undefined {
    return this.#parking?.store
  }

  /**
   * Runs a dead letter's handlers again, under an ordinary exactly-once claim: `handled` deletes
   * it; `failed` parks it again with the new error; `busy` when another retry (or a delivery of
   * the same event) runs it now; `missing` when there is no such dead letter. Two processes
   * retrying one dead letter at once run its handlers once.
   * @throws TypeError without `deadLetters`, or for a malformed fingerprint; `ReplayStoreError` when a store fails.
   */
  async retryDeadLetter (fingerprint: string, context?: DispatchInput<C>): Promise<DeadLetterRetryResult> {
    const parking = this.#requireParking('retryDeadLetter')
    const { signal, log = noopLogger } = (context ?? {}) as DispatchInput
    return await retryDeadLetter({
      parking,
      seenEvents: this.#store,
      handlersOf: (event) => this.#handlers.get(event.event) ?? [],
      dispatchOne: async (event, handlers, decisions) => await runDispatch(handlers, this.#store, 1, this.claimLifetime, [event], (context ?? {}) as object, signal, log, decisions),
    }, fingerprint, log)
  }

  /**
   * Retries the dead letters an operator asked for (`dead-letters retry` in the CLI, the store's
   * `requestRetry`), up to `limit` of them; call it on a timer or at start-up. Resolves each result.
   */
  async retryRequestedDeadLetters (options: { limit?: number } & DispatchInput<C> = {} as DispatchInput<C>): Promise<DeadLetterRetryResult[]> {
    const parking = this.#requireParking('retryRequestedDeadLetters')
    const { limit = 100, ...context } = options
    const page = await parking.store.list({ retryRequested: true, limit })
    const results: DeadLetterRetryResult[] = []
    for (const letter of page.items) results.push(await this.retryDeadLetter(letter.fingerprint, context as DispatchInput<C>))
    return results
  }

  /** Deletes a dead letter for good; whether there was one. Publishes a `discarded` diagnostics message. */
  async discardDeadLetter (fingerprint: string): Promise<boolean> {
    return await discardDeadLetter(this.#requireParking('discardDeadLetter'), fingerprint)
  }

  #requireParking (method: string): Parking {
    if (this.#parking === undefined) throw new TypeError(`${method}() needs the router's deadLetters option ({ store, after })`)
    return this.#parking
  }
}
