// The transactional path of a dispatch: with a `TransactionalClaimStore`, an event's handlers
// run in a transaction handed to them as `context.db`, and its done mark commits with their
// effects; a `DeliveryTransactionStore` runs a delivery's events in few transactions (one commit per group).
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import { HandlerTimeoutError, InboxTransactionError } from '../replay/errors.js'
import type { ClaimStore, TransactionalClaimStore } from '../replay/claim-store.js'
import type { Claims } from './claims.js'
import { HANDLED, type Outcomes } from './report.js'
import { errorSummary, storeError } from './store-errors.js'
import { isDeliveryTransactionStore, type AnyHandler, type DeliveryTransaction, type DispatchContext } from './types.js'

/** What the transactional path needs of the dispatch it runs in (src/dispatch/dispatch.ts). */
export interface TransactionalDispatch {
  readonly events: readonly WebhookEvent[]
  readonly concurrency: number
  readonly log: Logger
  readonly outcomes: Outcomes
  /** Defined: the transactional path runs only on claimed events. */
  readonly claims: Claims | undefined
  readonly stopped: boolean
  readonly stopError: unknown
  handlersOf (event: WebhookEvent): readonly AnyHandler[]
  handlerContext (i: number): DispatchContext
  /** Event `i`'s handlers failed with `error` (a handler threw or timed out). */
  handlerFailed (i: number, error: unknown): void
  /** Event `i` failed with `error` before or without its handlers; its claim is released. */
  giveBack (i: number, error: unknown): void
  stop (reason: unknown): void
}

/** A new delivery transaction of `store`, if it runs deliveries in one transaction (`DeliveryTransactionStore`). */
export function openDelivery (store: ClaimStore): DeliveryTransaction<unknown> | undefined {
  return isDeliveryTransactionStore(store) ? store.openDelivery() : undefined
}

/**
 * Runs event `i`'s handlers in a transaction of the store's database, handed to them as
 * `context.db`; the store writes the done mark in it before the commit. The claim is renewed
 * meanwhile like any other.
 */
export async function runInTransaction (d: TransactionalDispatch, i: number, store: TransactionalClaimStore<unknown>, handlers: readonly AnyHandler[], handlerContext: DispatchContext): Promise<void> {
  const claim = d.claims!.claimOf(i)!
  if (!await runTransactional(d, i, async (work) => await store.runInTransaction(claim, work), handlers, handlerContext)) return
  // Committed: the effects and the done mark are in, together.
  d.outcomes.status[i] = HANDLED
}

/**
 * Runs the claimed events in transactions of a `DeliveryTransactionStore`: `concurrency` lanes
 * (one connection each), each running its events one after the other in a transaction,
 * committing when the transaction is `full` and at the end. An event whose handlers fail is
 * left out (the store undoes it, running the events before it again) and its claim released; the others commit together with their
 * done marks, and only once that commit succeeded are they handled. A failed commit
 * acknowledges none of them: their claims are left to expire, so a retry finds each event done
 * (skipped) or runs it, never both.
 */
export async function runDelivery (d: TransactionalDispatch, indexes: readonly number[], first: DeliveryTransaction<unknown>): Promise<void> {
  const store = d.claims!.store
  let next = 0
  const lane = async (tx: DeliveryTransaction<unknown>): Promise<void> => {
    let ran: number[] = []
    while (next < indexes.length) {
      const i = indexes[next++]!
      if (d.stopped) { d.giveBack(i, d.stopError); continue }
      if (await runInDelivery(d, i, tx)) ran.push(i)
      if (tx.full && next < indexes.length) {
        await commitDelivery(d, tx, ran)
        ran = []
        tx = openDelivery(store)!
      }
    }
    await commitDelivery(d, tx, ran)
  }
  const lanes: Promise<void>[] = [lane(first)]
  for (let w = 1; w < Math.min(d.concurrency, indexes.length); w++) lanes.push(lane(openDelivery(store)!))
  await Promise.all(lanes)
}

/** Commits `tx`: its events `ran` are handled, or, when the commit fails, failed and left to expire. */
async function commitDelivery (d: TransactionalDispatch, tx: DeliveryTransaction<unknown>, ran: readonly number[]): Promise<void> {
  const { outcomes } = d
  let failed: ReadonlyMap<string, unknown> | undefined | void
  try {
    failed = await tx.commit()
  } catch (err) {
    if (ran.length === 0) return
    d.log.error({ err: errorSummary(err), fingerprints: ran.map((i) => outcomes.fingerprints[i]!) },
      'webhook event handlers ran but their transaction with the done marks did not commit')
    for (const i of ran) {
      d.claims!.handOff(i)
      // The event that broke a rule of context.db fails with its own error; the others with the store's (503).
      outcomes.fail(i, err instanceof InboxTransactionError && err.fingerprint === outcomes.fingerprints[i] ? err : storeError('complete', err))
    }
    return
  }
  // Committed: these events' effects and done marks are in, together; those the store names
  // failed after all (run again after a neighbour's failure, or a late call), never marked: the
  // store released the claims of those whose handler threw.
  for (const i of ran) {
    d.claims!.handOff(i)
    const fp = outcomes.fingerprints[i]!
    if (failed !== undefined && failed.has(fp)) outcomes.fail(i, failed.get(fp))
    else outcomes.status[i] = HANDLED
  }
}

/** Runs event `i`'s handlers in the delivery's transaction `tx`; whether they resolved (their done mark is written with `tx`'s commit). */
async function runInDelivery (d: TransactionalDispatch, i: number, tx: DeliveryTransaction<unknown>): Promise<boolean> {
  const claim = d.claims!.claimOf(i)!
  return await runTransactional(d, i, async (work) => await tx.run(claim, work), d.handlersOf(d.events[i]!), d.handlerContext(i))
}

/**
 * Runs event `i`'s handlers inside `run` (a transaction of its own, or a delivery's transaction) with `context.db` that transaction's. True when they resolved and
 * the done mark is written. False when the event failed: a handler failed (its effects undone)
 * or the transaction could not start, and the claim is given back so a retry handles the event;
 * or the handlers ran but the done mark or the transaction failed (or they broke a rule of
 * `context.db`): never acknowledged, the claim kept to expire on its own, so a retry finds the
 * event done (skipped) or runs it, never both.
 */
async function runTransactional (d: TransactionalDispatch, i: number, run: (work: (db: unknown) => Promise<void>) => Promise<unknown>, handlers: readonly AnyHandler[], handlerContext: DispatchContext): Promise<boolean> {
  const event = d.events[i]!
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
      if (started) d.handlerFailed(i, err)
      else d.giveBack(i, storeError('transaction', err))
      // Past the store's handler deadline the handler may still run: its signal tells it to stop.
      if (err instanceof HandlerTimeoutError) d.stop(err)
      return false
    }
    d.claims!.handOff(i)
    d.log.error({ err: errorSummary(err), fingerprints: [d.outcomes.fingerprints[i]!] },
      'webhook event handlers ran but their transaction with the done mark did not commit')
    // A handler that ended the store's transaction itself fails its event as a handler error.
    d.outcomes.fail(i, err instanceof InboxTransactionError ? err : storeError('complete', err))
    return false
  }
  // Marked done: the effects and the mark commit together. In a delivery's transaction the
  // row's lock keeps every other claimer waiting until the commit, so no renewal is needed.
  d.claims!.handOff(i)
  return true
}
