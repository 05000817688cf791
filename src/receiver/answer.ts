// The answer of `handlers` (a WebhookEventRouter) or `enqueue`, when the receiver answers a
// verified delivery itself, and the settlement of its claim by the reply's status: steps 5 and 6
// of the pipeline (./pipeline.ts) for those options. Runtime-neutral: no node: import.
import type { DispatchReport } from '../dispatch/types.js'
import type { Logger } from '../logger.js'
import type { ClaimSettlement } from '../replay/delivery-claim.js'
import { ReplayStoreError } from '../replay/errors.js'
import type { EventAnswer } from './options.js'
import type { WebhookEvent } from '../events/types.js'
import { errorReply, type ErrorBody, type Reply } from './reply.js'

/** Seconds a sender should wait after a seen-events store or queue failure. */
export const STORE_RETRY_AFTER = 10

/** Body of a delivery the router handled: the counts of its events. */
export interface DispatchedBody {
  handled: number
  skipped: number
  unhandled: number
  /** Events parked as dead letters (router option `deadLetters`); present only when there are some. */
  parked?: number
}
/** Body of a delivery handed to the queue: how many events it accepted. */
export interface QueuedBody { queued: number }

/**
 * The `code` of a failed answer of `handlers` or `enqueue`: `handler_error` (500, a handler
 * failed), `event_in_progress` (503, another delivery is handling an event), `queue_unavailable`
 * (503, the queue did not accept the events), `replay_store_unavailable` (503, the seen-events
 * store could not answer). MailChannels retries each of them.
 */
export type DeliveryErrorCode = 'handler_error' | 'event_in_progress' | 'queue_unavailable' | 'replay_store_unavailable'

/** What `answerDelivery` resolves: the reply to send. */
export type DeliveryReply = Reply<DispatchedBody | QueuedBody | ErrorBody<DeliveryErrorCode>>

/** The message of an error for a log line: its message only, never a body or a stack. */
export function errorMessage (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

/** The 500 answered when the application's handler failed: no internals in the body. */
export function handlerErrorReply (): Reply<ErrorBody<'handler_error'>> {
  return errorReply(500, 'handler_error', 'The webhook handler failed; the delivery can be retried.')
}

/**
 * The reply for a dispatch report: 200 with the counts when every event was handled, skipped or
 * unhandled; 500 `handler_error` when a handler failed (whatever else happened); otherwise 503
 * with `Retry-After`: `replay_store_unavailable` when the seen-events store could not answer,
 * `event_in_progress` when another delivery holds an event's claim. Logs each failure (the
 * error's message and the event's fingerprint and type, never the body).
 */
export function dispatchReply (report: DispatchReport, claimRetryAfter: number, keyId: string, log: Logger): DeliveryReply {
  if (report.ok) {
    const body = { handled: report.handled, skipped: report.skipped, unhandled: report.unhandled }
    // Events parked as dead letters (router option deadLetters) are acknowledged too: say how many.
    return { status: 200, headers: {}, body: report.parked !== undefined && report.parked > 0 ? { ...body, parked: report.parked } : body }
  }
  let handlerFailed = false
  let storeFailed = false
  for (const outcome of report.outcomes) {
    if (outcome.status !== 'failed') continue
    const store = outcome.error instanceof ReplayStoreError
    if (store) storeFailed = true
    else handlerFailed = true
    log[store ? 'warn' : 'error']({ err: errorMessage(outcome.error), keyId, fingerprint: outcome.fingerprint, event: outcome.event.event },
      store ? 'mailchannels webhook: the seen-events store failed; the event is left for the retry' : 'mailchannels webhook: an event handler failed; the event is left for the retry')
  }
  if (handlerFailed) return handlerErrorReply()
  if (storeFailed) return errorReply(503, 'replay_store_unavailable', 'The seen-events store is unavailable; MailChannels will retry the delivery.', STORE_RETRY_AFTER)
  log.info({ keyId, deferred: report.deferred }, 'mailchannels webhook: events in progress in another delivery; answered 503 so MailChannels retries')
  return errorReply(503, 'event_in_progress', 'Some events of this delivery are being handled by another delivery; MailChannels will retry it.', claimRetryAfter)
}

/** Settles when `promise` does, or rejects after `ms`; a late rejection of `promise` is logged, never unhandled. */
async function withTimeout (promise: Promise<void>, ms: number, log: Logger): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => { reject(new Error(`the queue did not accept the events within ${ms} ms`)) }, ms)
  })
  try {
    await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
    promise.catch((err: unknown) => { log.debug({ err: errorMessage(err) }, 'mailchannels webhook: enqueue failed after its timeout') })
  }
}

async function enqueueEvents (answer: EventAnswer & { kind: 'enqueue' }, events: WebhookEvent[], keyId: string, log: Logger): Promise<DeliveryReply> {
  // Nothing to hand on: no job to add.
  if (events.length === 0) return { status: 200, headers: {}, body: { queued: 0 } }
  try {
    // A synchronous throw is a rejection too.
    await withTimeout(Promise.resolve().then(() => answer.enqueue(events, { keyId, log })), answer.timeout, log)
  } catch (err) {
    log.warn({ err: errorMessage(err), keyId, events: events.length }, 'mailchannels webhook: the queue did not accept the events; answered 503 so MailChannels retries')
    return errorReply(503, 'queue_unavailable', 'The queue is unavailable; MailChannels will retry the delivery.', STORE_RETRY_AFTER)
  }
  return { status: 200, headers: {}, body: { queued: events.length } }
}

/** What `answerDelivery` needs of a verified delivery (the pipeline's `AcceptedOutcome`). */
export interface AnsweredDelivery {
  readonly events: WebhookEvent[]
  readonly keyId: string
  readonly claim: ClaimSettlement | null
}

/**
 * Answers a verified delivery with `handlers` or `enqueue`, then settles its claim with the
 * reply's status (a 2xx completes it; anything else releases it, so MailChannels' retry is
 * handled; the code answered goes with it, for the delivery's diagnostics). Never rejects.
 */
export function answerDelivery (answer: EventAnswer, outcome: AnsweredDelivery, log: Logger): Promise<DeliveryReply> {
  // `handlers`, the usual answer, in one promise step after the dispatch's own.
  const answered = answer.kind === 'handlers' ? dispatchThen(answer, outcome.events, outcome.keyId, log) : enqueueEvents(answer, outcome.events, outcome.keyId, log)
  return answered.then((reply) => settleWith(outcome, reply), (err: unknown) => {
    log.error({ err: errorMessage(err), keyId: outcome.keyId }, 'mailchannels webhook: failed after verification')
    return settleWith(outcome, handlerErrorReply())
  })
}

/** Dispatches to `handlers`: a synchronous throw or a rejection of the dispatch is answered 500. */
function dispatchThen (answer: EventAnswer & { kind: 'handlers' }, events: WebhookEvent[], keyId: string, log: Logger): Promise<DeliveryReply> {
  let dispatched: Promise<DispatchReport>
  try {
    const result: unknown = answer.router.dispatch(events, { keyId, log })
    // A router returns a promise; anything else given as `handlers` may return a thenable or a value.
    dispatched = result instanceof Promise ? result as Promise<DispatchReport> : Promise.resolve(result as DispatchReport)
  } catch (err) {
    dispatched = Promise.reject(err)
  }
  return dispatched.then((report) => dispatchReply(report, answer.retryAfter, keyId, log), (err: unknown) => {
    // A router never rejects; anything else given as `handlers` may.
    log.error({ err: errorMessage(err), keyId }, 'mailchannels webhook: dispatch failed')
    return handlerErrorReply()
  })
}

function settleWith (outcome: AnsweredDelivery, reply: DeliveryReply): DeliveryReply {
  if (outcome.claim !== null) outcome.claim.settle(reply.status, reply.status >= 300 ? (reply.body as ErrorBody<DeliveryErrorCode>).code : undefined)
  return reply
}
