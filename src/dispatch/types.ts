// The contract of typed dispatch: what a handler receives and what `dispatch` reports.
// Runtime-neutral and framework-free.
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'

/** An event type a handler can be registered for: a `WebhookEvent['event']` (`'unknown'` for types this version does not know). */
export type WebhookEventName = WebhookEvent['event']

/** The event of one type, narrowed: `EventOf<'hard-bounced'>` is `HardBouncedEvent`. */
export type EventOf<N extends WebhookEventName> = Extract<WebhookEvent, { event: N }>

/**
 * What every handler receives besides its event. `C` is what the caller of `dispatch` adds
 * (the receivers add the request's `keyId` and logger; a queue worker adds the job).
 */
export type DispatchContext<C extends object = object> = C & {
  /** The event's `eventFingerprint`: the key for idempotent side effects (a unique index, an idempotency key). */
  readonly fingerprint: string
  /** Aborted when the dispatch is given up (the claim could not be kept alive, or the caller aborted). */
  readonly signal: AbortSignal
  /** The logger of the delivery (the receiver's), or one that logs nothing. */
  readonly log: Logger
}

/**
 * What a handler gets besides `DispatchContext` when the router's seen-events store is
 * transactional (`TransactionalClaimStore<T>`): `db`, the transaction its effects and the
 * event's done mark commit in together. Nothing for other stores (`T` is `never`).
 */
export type TransactionContext<T> = [T] extends [never] ? unknown : {
  /** The open transaction of this event (a node-postgres `PoolClient` inside BEGIN, your Kysely `Transaction`, the SQLite database...): write the event's effects with it. */
  readonly db: T
}

/** A handler of events of type `N`. Resolving counts as handled; throwing or rejecting as failed. */
export type WebhookEventHandler<N extends WebhookEventName, C extends object = object, T = never> =
  (event: EventOf<N>, context: DispatchContext<C> & TransactionContext<T>) => unknown

/** A handler as the router keeps it, for any event type (internal: not exported by the package). */
export type AnyHandler = (event: WebhookEvent, context: DispatchContext<any>) => unknown

/**
 * Where one event stands after a dispatch:
 * - `handled`: every handler registered for it resolved (and, with a seen-events store, it is marked done);
 * - `skipped`: a seen-events store says it was already handled (a resend, a retry), or it is an
 *   identical copy (same `eventFingerprint`) of an event handled earlier in the same dispatch;
 * - `unhandled`: no handler is registered for its type (nothing ran; not an error);
 * - `deferred`: another dispatch holds a live claim on it right now, so it was left to that one (answer 5xx so the sender retries);
 * - `failed`: a handler threw, or the seen-events store could not be reached (`error` says which);
 * - `parked`: with `deadLetters`, its handlers failed `after` times: it is a dead letter now (`error` its last
 *   error), completed in the seen-events store, and no longer fails the delivery.
 */
export type EventOutcome =
  | { readonly status: 'handled' | 'skipped' | 'unhandled' | 'deferred', readonly event: WebhookEvent, readonly fingerprint: string }
  | { readonly status: 'failed' | 'parked', readonly event: WebhookEvent, readonly fingerprint: string, readonly error: unknown }

/** What `dispatch` resolves: one outcome per event, in the order given, and the counts. */
export interface DispatchReport {
  readonly outcomes: readonly EventOutcome[]
  readonly handled: number
  readonly skipped: number
  readonly unhandled: number
  readonly deferred: number
  readonly failed: number
  /**
   * Events parked as dead letters by this dispatch (option `deadLetters`). The router's reports
   * always carry it; optional so a `handlers` object of your own that builds reports needs no change.
   */
  readonly parked?: number
  /** True when every event was handled, skipped, unhandled or parked: the delivery may be acknowledged (2xx). */
  readonly ok: boolean
}

/** What a receiver passes to `enqueue` besides the events. */
export interface EnqueueContext {
  /** The key id the delivery was verified with. */
  readonly keyId: string
  /** The receiver's logger. */
  readonly log: Logger
}

/**
 * Hands a verified delivery's events to a durable queue (BullMQ, Cloudflare Queues, SQS...).
 * Resolve once the queue has accepted every event (the delivery is then answered 2xx); reject
 * when it did not (answered 503 with `Retry-After`, so MailChannels retries: nothing is lost).
 * Adding the same event twice should not create two jobs: key jobs by `eventFingerprint`.
 */
export type Enqueuer = (events: readonly WebhookEvent[], context: EnqueueContext) => Promise<void> | void

/**
 * A transaction for many events of one delivery (what a `DeliveryTransactionStore` opens). `WebhookEventRouter` runs a delivery's claimed events through
 * `run`, one after the other, and calls `commit` once the transaction is `full` or the events run
 * out: one commit (one fsync) for many events instead of one each, and still one event's failure
 * touches no other event.
 */
export interface DeliveryTransaction<T> {
  /**
   * Runs `work(tx)` in the transaction. Resolves once `work` resolved and its effects joined the
   * transaction (its done mark is written, while its claim still holds, at `commit`). The store may
   * call `work` again before `commit` (when another event of the transaction failed, in a fresh
   * transaction: its first run's effects rolled back). Rejects with `work`'s own error once this
   * event's effects are undone (the others' stay); with an `InboxTransactionError` or a `ReplayStoreError`
   * when its effects could not join; with a `ReplayStoreError` without running `work` when the
   * transaction is no longer usable.
   */
  run<R> (claim: { readonly fingerprint: string, readonly token: string }, work: (tx: T) => Promise<R>): Promise<R>
  /** Whether to commit before running another event (`run` still works, but the transaction grows past what the store wants). */
  readonly full: boolean
  /**
   * Writes the done marks of every event `run` resolved for and commits them with their effects,
   * then gives the connection back. Resolves the events among them that failed after all (by
   * fingerprint, with the error each failed with: rolled back, never marked), or nothing when every
   * one of them committed. Rejects when the commit failed or its outcome is unknown (an
   * `InboxTransactionError` names the event that broke a rule): then none of them may be acknowledged.
   */
  commit (): Promise<ReadonlyMap<string, unknown> | undefined | void>
}

/**
 * A transactional seen-events store that can also run a whole delivery in one transaction
 * (`postgresSeenEvents({ pool, transactional: true })`). `openDelivery` answers `undefined` when
 * the store runs one transaction per event instead (your own library's `transaction`).
 */
export interface DeliveryTransactionStore<T> {
  openDelivery (): DeliveryTransaction<T> | undefined
}

/** Whether `store` runs a delivery's events in few transactions (`DeliveryTransactionStore`). */
export function isDeliveryTransactionStore<S extends object> (store: S): store is S & DeliveryTransactionStore<unknown> {
  return typeof (store as Partial<DeliveryTransactionStore<unknown>>).openDelivery === 'function'
}
