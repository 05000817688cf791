// The one request pipeline of every webhook adapter (Express, Fastify, the fetch handler, Hono,
// `verifyWebhookRequest`), read top to bottom in the order a delivery takes:
//   1. transport checks, before any body byte is read (media type, Content-Encoding, Content-Length);
//   2. the raw body, through the adapter's port (at most `bodyLimit` bytes);
//   3. verification (../verify/verify-webhook.ts);
//   4. the replay claim (../replay/delivery-claim.ts);
//   5. the answer: the refusal or duplicate reply, the answer of `handlers` / `enqueue`, or the
//      application's own handler through the port's `run`;
//   6. the settlement: the handler's status completes or releases the claim.
// An adapter only translates its framework's request and response to a `WebhookPort` (the shape of
// octokit/webhooks.js's createMiddleware: https://github.com/octokit/webhooks.js/tree/main/src/middleware).
// Each step answers at once when nothing had to wait (no key fetch, no pool verify, no replay
// store round trip), so the usual delivery takes no promise hop. Runtime-neutral: no node: import.
import { offThreadInFlight } from '#crypto'
import { DeliveryObservation, observeRefusal, observing } from '../diagnostics/delivery.js'
import type { WebhookDeliveryErrorType } from '../diagnostics/types.js'
import { HTTP_STATUS_BY_TYPE, VerificationError, type VerifyErrorType } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import type { KeyStore } from '../keys/key-store.js'
import type { Logger } from '../logger.js'
import { claimDelivery, ClaimSettlement, REPLAY_RETRY_AFTER, type ClaimOutcome } from '../replay/delivery-claim.js'
import { readSignatureFields, type HeadersInput } from '../verify/headers.js'
import { parseSignature } from '../verify/signature-input.js'
import { verifyDelivery, type VerifiedDelivery } from '../verify/verify-webhook.js'
import { answerDelivery, errorMessage, handlerErrorReply } from './answer.js'
import { keyStoreFactory, rejectUnknownOptions, resolveLogger, resolveReceiverOptions, type EventAnswer, type ResolvedReceiver, type WebhookReceiverOptions } from './options.js'
import { errorReply, type ErrorBody, type Reply } from './reply.js'
import { checkHeaders, tooLarge } from './transport.js'

// ---------------------------------------------------------------------------------------------
// What an adapter gives the pipeline, and what the pipeline hands back.

/**
 * What an adapter gives the pipeline: its framework's request and response, for a request
 * context `C` of its own (the Request, or the request with its response) and its answer `T`.
 * One object per adapter, so a request costs no allocation of its own.
 */
export interface WebhookPort<C, T> {
  /** The request headers: Node's record (lower-case names) or a fetch `Headers`. */
  headers (ctx: C): HeadersInput
  /**
   * Reads the raw body: the exact bytes received, never decoded or decompressed. Once more than
   * `limit` bytes arrived, whatever `Content-Length` said, stop reading and return what was read:
   * the pipeline refuses any body over the limit with 413 `payload_too_large` (the one place the
   * limit is enforced). Throws or rejects with a `VerificationError`: `invalid_payload` when the
   * body cannot be read, `configuration_error` when something else consumed it. Called at most
   * once, after the transport checks passed. A promise that never settles (the client went away
   * mid-body) leaves nothing behind: nothing was verified or claimed, and nobody is left to answer.
   */
  readBody (ctx: C, limit: number): Uint8Array | Promise<Uint8Array>
  /** Sends a reply of the pipeline's: a refusal, a duplicate, or the answer of `handlers` / `enqueue`. */
  reply (ctx: C, reply: Reply): T
  /**
   * Runs the application's handler with a verified delivery (only when neither `handlers` nor
   * `enqueue` is given, unless `answers`), and reports its status with `settle`, at once or later
   * (Express: when the response ends), whether or not the client is still connected. A throw or
   * a rejection is the handler's failure: logged, answered 500 `handler_error` through `reply`,
   * settled 500. A promise that never settles leaves the claim `processing` until it expires.
   */
  run (ctx: C, outcome: AcceptedOutcome, settle: SettleHandler): T | Promise<T>
  /** The request's own logger (Fastify's `request.log`); without it, the pipeline's logger. */
  log? (ctx: C): Logger
  /**
   * True when the framework answers `handlers` / `enqueue` itself, later, with `answerDelivery`
   * (the Fastify plugin, in the route's handler, after the route's own hooks): every verified
   * delivery then goes to `run`.
   * @default false
   */
  readonly answers?: boolean
}

/**
 * Reports the status the application's handler answered an accepted delivery with: a 2xx marks
 * it handled, any other status releases its replay claim so MailChannels' retry is handled. With
 * `error`, the handler failed: it is logged (its message only). Only the first call counts.
 */
export type SettleHandler = (outcome: AcceptedOutcome, status: number, error?: unknown) => void

/** A verified delivery, claimed when replay protection is on: what `run` hands the application. */
export interface AcceptedOutcome {
  readonly kind: 'accepted'
  /** The verified, typed events. */
  readonly events: WebhookEvent[]
  /** The key id the delivery was verified with. */
  readonly keyId: string
  /** The exact raw bytes that were verified. */
  readonly body: Uint8Array
  /**
   * What settling records: the replay claim, and the delivery's diagnostics when someone
   * subscribed to them. Null when there is nothing to record (no replay protection, nobody listening).
   */
  readonly claim: ClaimSettlement | null
}

/** The failure body of the webhook receivers: the shared error shape, with a verification reason code as `code`. */
export type WebhookErrorBody = ErrorBody<VerifyErrorType>

/** The body answered for a duplicate delivery. */
const DUPLICATE_BODY = Object.freeze({ duplicate: true as const })

/** A refused or duplicate delivery: the reply to send; the handler does not run. */
interface Answered { readonly kind: 'rejected' | 'duplicate', readonly reply: Reply }

/** What steps 3 and 4 decide about a delivery. */
type Decision = AcceptedOutcome | Answered

const DUPLICATE: Answered = Object.freeze({
  kind: 'duplicate',
  reply: Object.freeze({ status: 200, headers: Object.freeze({}) as Record<string, string>, body: DUPLICATE_BODY }),
})

/** The options every adapter's pipeline takes: the receiver's options and a logger. */
export type PipelineOptions = WebhookReceiverOptions & { logger?: Logger }

/** What an adapter adds to the receiver's options. */
export interface PipelineSetup {
  /** The adapter's own option names besides the receiver's and `logger` (validated by the adapter). */
  extra?: readonly string[]
  /** The key store the adapter owns when neither `publicKey` nor `keyStore` is given (default: one per base URL). */
  keyStores?: (log: Logger) => (baseUrl: string) => KeyStore
  /** The logger when the options give none (Fastify's `fastify.log`). @default no logging */
  log?: Logger
  /** Warn at creation when `customerHandles` is `'any'` (the Fastify plugin warns once per registration instead). @default true */
  warnAnyCustomer?: boolean
}

/** One adapter's pipeline. */
export interface WebhookPipeline<C, T> {
  /** The validated options. */
  readonly options: ResolvedReceiver
  /** The pipeline's logger (the `logger` option, or the setup's). */
  readonly log: Logger
  /** One request, from its headers to its answer (and, through `run`, the settlement of its claim). */
  handle (this: void, ctx: C): T | Promise<T>
  /**
   * Step 1 alone, the transport checks: the refusal (logged), or null when the body may be read.
   * For a framework that reads the body before the pipeline could (NestJS on Fastify, whose
   * parser runs before any guard): it refuses early, then hands the request to `handle`.
   */
  check (this: void, headers: HeadersInput, log?: Logger): Reply<WebhookErrorBody> | null
}

/** The log level of a rejection: client errors are routine (info), dependencies down (503) warn, misconfiguration error. */
function logLevelFor (status: number): 'info' | 'warn' | 'error' {
  return status < 500 ? 'info' : status === 503 ? 'warn' : 'error'
}

/** The `keyid` of a rejected delivery when its signature headers parse (failure path only; for the log line). */
function keyIdForLog (headers: HeadersInput): string | undefined {
  try {
    const fields = readSignatureFields(headers)
    return parseSignature(fields.signatureInput, fields.signature).keyId
  } catch {
    return undefined
  }
}

/** Seconds a sender should wait when the key error carries no hint. */
const KEY_RETRY_AFTER = 30

/** Status, headers (Retry-After on 503) and body for a failure (HTTP_STATUS_BY_TYPE). The message is the library's own: never a signature, key or body. */
export function failureReply (err: VerificationError): Reply<WebhookErrorBody> {
  const status = HTTP_STATUS_BY_TYPE[err.type]
  let retryAfter: number | undefined
  if (status === 503) retryAfter = err.retryAfter ?? (err.type === 'replay_store_unavailable' ? REPLAY_RETRY_AFTER : KEY_RETRY_AFTER)
  return errorReply(status, err.type, err.message, retryAfter)
}

/**
 * The refusal of a request, with its one log line (the reason and the keyid, never the
 * signature, the body or a key). An unexpected error (not a `VerificationError`) is logged as
 * such and answered as a generic 500. `headers` (null when there are none to read) only feed the
 * log line. `observation`: the delivery's diagnostics, when its body was in hand.
 */
export function refusal (err: unknown, headers: HeadersInput | null, log: Logger, observation: DeliveryObservation | null = null): Reply<WebhookErrorBody> {
  const error = err instanceof VerificationError ? err : new VerificationError('configuration_error', 'The webhook could not be verified because of a server error.')
  if (error !== err) log.error({ err }, 'mailchannels webhook: unexpected error while verifying')
  const reply = failureReply(error)
  // The store's own error (its message only) says why it answered 503; senders never see it.
  const line: Record<string, unknown> = { reason: error.type, statusCode: reply.status, keyId: headers === null ? undefined : keyIdForLog(headers) }
  if (error.cause !== undefined) line.cause = error.cause instanceof Error ? error.cause.message : String(error.cause)
  log[logLevelFor(reply.status)](line, 'mailchannels webhook rejected')
  if (observation !== null) observation.finish('rejected', error.type, reply.status)
  else if (observing()) observeRefusal(error.type, reply.status)
  return reply
}

/** Step 6 for an accepted delivery: the handler's status settles its claim (`type`: the code answered, for diagnostics). Only the first call counts. */
export function settle (outcome: AcceptedOutcome, status: number, type?: WebhookDeliveryErrorType): void {
  if (outcome.claim !== null) outcome.claim.settle(status, type)
}

// ---------------------------------------------------------------------------------------------
// The pipeline.

/**
 * The pipeline of one adapter: options validated once, here (a `TypeError` names a bad or
 * unknown option; `setup.extra` lists the adapter's own), then `handle` for each request.
 */
export function createWebhookPipeline<C, T> (options: PipelineOptions, port: WebhookPort<C, T>, setup: PipelineSetup = {}): WebhookPipeline<C, T> {
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object')
  rejectUnknownOptions(options, setup.extra)
  const log = resolveLogger(options.logger ?? setup.log)
  const r = resolveReceiverOptions(options, (setup.keyStores ?? keyStoreFactory)(log))
  if (r.anyCustomer && setup.warnAnyCustomer !== false) log.warn({}, "mailchannels-webhooks: customerHandles is 'any': deliveries signed for any MailChannels customer are accepted")
  const { bodyLimit, contentTypes, config, clock, poolBelow, poolSlots, replay: store, replayTtl } = r
  const answer = port.answers === true ? null : r.answer
  const logOf = port.log === undefined ? () => log : port.log.bind(port)

  // 1. Transport checks, before any body byte is read.
  function check (headers: HeadersInput, requestLog: Logger = log): Reply<WebhookErrorBody> | null {
    const bad = checkHeaders(headers, bodyLimit, contentTypes)
    return bad === null ? null : refusal(bad, headers, requestLog)
  }

  function handle (ctx: C): T | Promise<T> {
    const requestLog = logOf(ctx)
    const headers = port.headers(ctx)
    const refused = check(headers, requestLog)
    if (refused !== null) return port.reply(ctx, refused)
    // 2. The raw body, through the port.
    let body: Uint8Array | Promise<Uint8Array>
    try {
      body = port.readBody(ctx, bodyLimit)
    } catch (err) {
      return port.reply(ctx, refusal(err, headers, requestLog))
    }
    if (body instanceof Promise) {
      return body.then((b) => received(ctx, b, headers, requestLog), (err: unknown) => port.reply(ctx, refusal(err, headers, requestLog)))
    }
    return received(ctx, body, headers, requestLog)
  }

  function received (ctx: C, body: Uint8Array, headers: HeadersInput, requestLog: Logger): T | Promise<T> {
    // A reader stops at the first chunk past the limit; a framework's buffer may be any size.
    if (body.byteLength > bodyLimit) return port.reply(ctx, refusal(tooLarge(bodyLimit), headers, requestLog))
    // Decided once per delivery: an unobserved one reads no clock and builds no message.
    const observation = observing() ? new DeliveryObservation(body.byteLength) : null
    const decided = verify(body, headers, requestLog, observation)
    if (observation !== null) observation.returned()
    return decided instanceof Promise ? decided.then((d) => respond(ctx, d, requestLog)) : respond(ctx, decided, requestLog)
  }

  // 3. Verification: synchronous when the key is at hand and the verify stays on the event loop.
  function verify (body: Uint8Array, headers: HeadersInput, requestLog: Logger, observation: DeliveryObservation | null): Decision | Promise<Decision> {
    let verified: VerifiedDelivery | Promise<VerifiedDelivery>
    try {
      verified = verifyDelivery(config, body, headers, clock.now(), body.length < poolBelow && offThreadInFlight() < poolSlots)
    } catch (err) {
      return rejected(err, headers, requestLog, observation)
    }
    if (verified instanceof Promise) {
      return verified.then((d) => claim(d, body, headers, requestLog, observation), (err: unknown) => rejected(err, headers, requestLog, observation))
    }
    return claim(verified, body, headers, requestLog, observation)
  }

  function rejected (err: unknown, headers: HeadersInput, requestLog: Logger, observation: DeliveryObservation | null): Answered {
    return { kind: 'rejected', reply: refusal(err, headers, requestLog, observation) }
  }

  // 4. The replay claim (none with `replay: false`).
  function claim (delivery: VerifiedDelivery, body: Uint8Array, headers: HeadersInput, requestLog: Logger, observation: DeliveryObservation | null): Decision | Promise<Decision> {
    if (observation !== null) observation.verified(delivery.events.length, delivery.keyId)
    if (store === null) {
      if (observation === null) return { kind: 'accepted', events: delivery.events, keyId: delivery.keyId, body, claim: null }
      observation.accepted()
      return { kind: 'accepted', events: delivery.events, keyId: delivery.keyId, body, claim: new ClaimSettlement(null, '', 0, requestLog, observation) }
    }
    let claimed: ClaimOutcome | Promise<ClaimOutcome>
    try {
      claimed = claimDelivery(store, delivery.signature, replayTtl)
    } catch (err) {
      return rejected(err, headers, requestLog, observation)
    }
    if (claimed instanceof Promise) {
      return claimed.then((c) => claimedDecision(c, delivery, body, requestLog, observation), (err: unknown) => rejected(err, headers, requestLog, observation))
    }
    return claimedDecision(claimed, delivery, body, requestLog, observation)
  }

  function claimedDecision (claimed: ClaimOutcome, delivery: VerifiedDelivery, body: Uint8Array, requestLog: Logger, observation: DeliveryObservation | null): Decision {
    if (!claimed.claimed) {
      requestLog.info({ keyId: delivery.keyId, state: claimed.state }, 'mailchannels webhook: duplicate delivery, not handled again')
      if (observation !== null) observation.finish('duplicate', null, DUPLICATE.reply.status)
      return DUPLICATE
    }
    if (observation !== null) observation.accepted()
    return { kind: 'accepted', events: delivery.events, keyId: delivery.keyId, body, claim: new ClaimSettlement(store, claimed.id, replayTtl, requestLog, observation) }
  }

  // 5. The answer: the reply decided above, `handlers` / `enqueue`, or the application's handler.
  function respond (ctx: C, decision: Decision, requestLog: Logger): T | Promise<T> {
    if (decision.kind !== 'accepted') return port.reply(ctx, decision.reply)
    // Answered here: the answer settles the claim, even when the client has gone.
    if (answer !== null) return answerDelivery(answer, decision, requestLog).then((reply) => port.reply(ctx, reply))
    let ran: T | Promise<T>
    try {
      ran = port.run(ctx, decision, settleHandler)
    } catch (err) {
      return failed(ctx, decision, err)
    }
    return ran instanceof Promise ? ran.catch((err: unknown) => failed(ctx, decision, err)) : ran
  }

  // 6. The settlement, by the handler's status.
  function settleHandler (outcome: AcceptedOutcome, status: number, error?: unknown): void {
    if (error !== undefined) log.error({ err: errorMessage(error), keyId: outcome.keyId }, 'mailchannels webhook: the handler failed')
    settle(outcome, status)
  }

  function failed (ctx: C, outcome: AcceptedOutcome, err: unknown): T {
    settleHandler(outcome, 500, err)
    return port.reply(ctx, handlerErrorReply())
  }

  return { options: r, log, handle, check }
}
