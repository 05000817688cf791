// The router's dead letters: what becomes of an event whose handlers failed when the
// router has `deadLetters`. Each failure is counted in the dead-letter store; once `after` attempts
// have failed the event is parked there and, only once that write resolved, completed in the
// seen-events store, so it no longer fails its delivery. A retry takes the dead letter's hold,
// gives the event back to the seen-events store and runs it through an ordinary dispatch.
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import { publishDeadLetter } from '../diagnostics/dead-letter.js'
import { checkParkAfter, deadLetterError, isDeadLetterStore, type DeadLetterRetry, type DeadLetterStore } from '../replay/dead-letters-types.js'
import type { ClaimStore } from '../replay/claim-store.js'
import type { AnyHandler, DispatchContext, DispatchReport } from './types.js'

export interface DeadLetterOptions {
  /** Where failed events are counted and parked: `MemoryDeadLetterStore`, `RedisDeadLetterStore`, `postgresDeadLetters`, `sqliteDeadLetters`. */
  store: DeadLetterStore
  /**
   * Failed attempts after which an event is parked (1: at its first failure). Until then a failure
   * fails the delivery (500), so MailChannels retries it; MailChannels retries a delivery over
   * hours, so 5 attempts ride out a downstream outage of a few minutes without parking, yet park
   * a poison event long before MailChannels gives up on its whole batch.
   * @default 5
   */
  after?: number
  /**
   * Seconds a retry (`retryDeadLetter`) holds a dead letter: a second retry meanwhile is told
   * `busy`; a retry whose process died frees it after this long. Above your slowest handler.
   * @default 300 (seconds)
   */
  retryLifetime?: number
}

export const DEFAULT_PARK_AFTER = 5
const DEFAULT_RETRY_LIFETIME = 300

/** The router's checked `deadLetters` option. */
export interface Parking {
  readonly store: DeadLetterStore
  readonly after: number
  readonly retryLifetime: number
}

/** `deadLetters` checked once, at construction: a TypeError naming the field otherwise. */
export function checkDeadLetters (options: unknown): Parking | undefined {
  if (options === undefined) return undefined
  if (options === null || typeof options !== 'object') throw new TypeError('deadLetters must be an object: { store, after }')
  const { store, after = DEFAULT_PARK_AFTER, retryLifetime = DEFAULT_RETRY_LIFETIME } = options as DeadLetterOptions
  if (!isDeadLetterStore(store)) {
    throw new TypeError('deadLetters.store must be a DeadLetterStore (MemoryDeadLetterStore, RedisDeadLetterStore, postgresDeadLetters or sqliteDeadLetters)')
  }
  if (!Number.isSafeInteger(retryLifetime) || retryLifetime < 1) throw new TypeError('deadLetters.retryLifetime must be a positive whole number of seconds')
  return { store, after: checkParkAfter(after, 'deadLetters.after'), retryLifetime }
}

/**
 * One dispatch's decisions on failed events: `decide` records the failure and then calls back
 * with whether the event is parked; `settled` resolves once every decision is made (the dispatch
 * waits for it before its claims are written and its report built).
 */
export class FailureDecisions {
  #pending = 0
  #idle: Array<() => void> = []

  /** `retry`: this dispatch is a retry of that dead letter (a failure parks it again at once). */
  constructor (readonly parking: Parking, readonly retry?: DeadLetterRetry) {}

  get busy (): boolean { return this.#pending > 0 }

  decide (event: WebhookEvent, fingerprint: string, err: unknown, log: Logger, then: (parked: boolean) => void): void {
    this.#pending++
    void this.#decide(event, fingerprint, err, log).then(then).catch((bug: unknown) => {
      // Unreachable by design (`then` settles an outcome); the event is then reported failed by the dispatch.
      log.error({ err: bug instanceof Error ? bug.message : String(bug) }, 'a failed webhook event could not be settled')
    }).finally(() => {
      if (--this.#pending === 0) for (const resolve of this.#idle.splice(0)) resolve()
    })
  }

  async settled (): Promise<void> {
    if (this.#pending > 0) await new Promise<void>((resolve) => { this.#idle.push(resolve) })
  }

  async #decide (event: WebhookEvent, fingerprint: string, err: unknown, log: Logger): Promise<boolean> {
    const { store, after } = this.parking
    const error = deadLetterError(err)
    try {
      if (this.retry !== undefined) {
        await store.failRetry(this.retry, error)
        publishDeadLetter('parked', event.event, fingerprint, this.retry.letter.attempts + 1, 'router')
        return true
      }
      const { attempts, parked } = await store.recordFailure({ event, fingerprint, error, parkAfter: after })
      if (parked) {
        log.warn({ fingerprint, type: event.event, attempts, error }, 'webhook event parked as a dead letter after its handlers failed')
        if (attempts === after) publishDeadLetter('parked', event.event, fingerprint, attempts, 'router')
      }
      return parked
    } catch (storeErr) {
      // Not counted: the event fails as it would without dead letters, and is counted on the retry.
      log.error({ fingerprint, err: { type: storeErr instanceof Error ? storeErr.name : typeof storeErr, message: storeErr instanceof Error ? storeErr.message : String(storeErr) } },
        'a failed webhook event could not be recorded in the dead-letter store')
      return false
    }
  }
}

/** What `retryDeadLetter` did. */
export type DeadLetterRetryResult =
  | { readonly status: 'handled', readonly fingerprint: string }
  /** Its handlers failed again: parked again with this error. */
  | { readonly status: 'failed', readonly fingerprint: string, readonly error: unknown }
  /** No such dead letter (retried or discarded meanwhile). */
  | { readonly status: 'missing', readonly fingerprint: string }
  /** Another retry, or a delivery of the same event, is running it right now. */
  | { readonly status: 'busy', readonly fingerprint: string }
  /** No handler is registered for its type: left parked. */
  | { readonly status: 'unhandled', readonly fingerprint: string }

/** What a retry needs of the router. */
export interface RetryRouter {
  readonly parking: Parking
  readonly seenEvents: ClaimStore | undefined
  handlersOf: (event: WebhookEvent) => readonly AnyHandler[]
  /** Dispatches one event with these handlers, its failures decided by `decisions`. */
  dispatchOne: (event: WebhookEvent, handlers: ReadonlyMap<string, AnyHandler[]>, decisions: FailureDecisions) => Promise<DispatchReport>
}

/**
 * Retries one dead letter: takes its hold (one retry at a time), gives the event back to the
 * seen-events store (its done mark came from the parking) and dispatches it, so it runs under an
 * ordinary claim. Handled: the dead letter is deleted (with a transactional store, in the
 * handlers' transaction when the dead-letter store can: `resolveRetryIn`). Failed: parked again
 * with the new error, and completed again.
 */
export async function retryDeadLetter (router: RetryRouter, fingerprint: string, log: Logger): Promise<DeadLetterRetryResult> {
  const { store, retryLifetime } = router.parking
  const held = await store.claimRetry(fingerprint, retryLifetime)
  if (held === 'missing' || held === 'busy') return { status: held, fingerprint }
  const event = held.letter.event
  const handlers = router.handlersOf(event)
  if (handlers.length === 0) return { status: 'unhandled', fingerprint }
  let resolvedInTransaction = false
  const resolveIn = (store as Partial<TransactionalResolve>).resolveRetryIn
  // Last "handler" of a retry with a transactional store: deletes the dead letter in the handlers'
  // transaction, so the effects, the done mark and the deletion commit together.
  const resolver: AnyHandler = async (_event, context: DispatchContext<any>) => {
    const db = (context as { db?: unknown }).db
    if (db !== undefined && typeof resolveIn === 'function') resolvedInTransaction = await resolveIn.call(store, db, held)
  }
  await router.seenEvents?.delete([fingerprint])
  const report = await router.dispatchOne(event, new Map([[event.event, [...handlers, resolver]]]), new FailureDecisions(router.parking, held))
  const outcome = report.outcomes[0]!
  switch (outcome.status) {
    case 'handled':
    case 'skipped':
      if (!resolvedInTransaction) await store.resolveRetry(held)
      publishDeadLetter('retried', event.event, fingerprint, held.letter.attempts, held.letter.source)
      log.info({ fingerprint, type: event.event }, 'dead letter retried: handled')
      return { status: 'handled', fingerprint }
    case 'parked':
      log.warn({ fingerprint, type: event.event, error: deadLetterError(outcome.error) }, 'dead letter retried: its handlers failed again; parked again')
      return { status: 'failed', fingerprint, error: outcome.error }
    case 'deferred':
      return { status: 'busy', fingerprint }
    case 'failed':
      // The store failed (never a handler: those park). The hold expires; the next retry tries again.
      return { status: 'failed', fingerprint, error: outcome.error }
    default:
      return { status: 'unhandled', fingerprint }
  }
}

/** A dead-letter store that can delete a retried dead letter inside the handlers' transaction (PostgreSQL, SQLite). */
export interface TransactionalResolve {
  /** Deletes `retry`'s dead letter through `db`, the transaction the handlers ran in; false when `db` is not one it can use. */
  resolveRetryIn: (db: unknown, retry: DeadLetterRetry) => Promise<boolean>
}

/** The router's `discardDeadLetter`: deletes it and publishes the signal. */
export async function discardDeadLetter (parking: Parking, fingerprint: string): Promise<boolean> {
  const letter = await parking.store.get(fingerprint)
  const discarded = await parking.store.discard(fingerprint)
  if (discarded) publishDeadLetter('discarded', letter?.type ?? 'unknown', fingerprint, letter?.attempts ?? 0, letter?.source ?? 'router')
  return discarded
}

