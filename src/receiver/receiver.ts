// The webhook request up to its outcome, once for every adapter: transport checks, the raw body
// (through the adapter's readBody port), verification, the replay claim; and the settlement of the
// claim on the handler's own answer. The ending that answers the outcome is ./flow.ts.
// Runtime-neutral: no node: import, no Buffer.
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
import { keyStoreFactory, rejectUnknownOptions, resolveLogger, resolveReceiverOptions, type ResolvedReceiver, type WebhookReceiverOptions } from './options.js'
import { errorReply, type ErrorBody, type Reply } from './reply.js'
import { checkHeaders, tooLarge } from './transport.js'

/** Seconds a sender should wait when the key error carries no hint. */
const KEY_RETRY_AFTER = 30

/** The failure body of the webhook receivers: the shared error shape, with a verification reason code as `code`. */
export type WebhookErrorBody = ErrorBody<VerifyErrorType>

/** The body answered for a duplicate delivery. */
export const DUPLICATE_BODY = Object.freeze({ duplicate: true as const })

/** Anything thrown in the pipeline as a `VerificationError`; unexpected errors become a generic 500 with no internals. */
function asVerificationError (err: unknown): VerificationError {
  if (err instanceof VerificationError) return err
  return new VerificationError('configuration_error', 'The webhook could not be verified because of a server error.')
}

/** Status, headers (Retry-After on 503) and body for a failure (HTTP_STATUS_BY_TYPE). The message is the library's own: never a signature, key or body. */
export function failureReply (err: VerificationError): Reply<WebhookErrorBody> {
  const status = HTTP_STATUS_BY_TYPE[err.type]
  let retryAfter: number | undefined
  if (status === 503) retryAfter = err.retryAfter ?? (err.type === 'replay_store_unavailable' ? REPLAY_RETRY_AFTER : KEY_RETRY_AFTER)
  return errorReply(status, err.type, err.message, retryAfter)
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

/**
 * Verifies the raw body (steps 2-10). Synchronous when the key is at hand and the verify
 * stays on the event loop; otherwise a promise. Throws / rejects with `VerificationError`.
 */
function verifyBody (r: ResolvedReceiver, body: Uint8Array, headers: HeadersInput, log: Logger): VerifiedDelivery | Promise<VerifiedDelivery> {
  // `cache: false` builds a key store per call: give it the request's logger.
  const config = r.config.freshStorePerCall === null ? r.config : { ...r.config, logger: log }
  return verifyDelivery(config, body, headers, r.clock.now(), body.length < r.poolBelow && offThreadInFlight() < r.poolSlots)
}

// ---------------------------------------------------------------------------------------------
// The receiver: the whole request flow once, framework-free and runtime-neutral. An adapter
// hands over the headers and a way to read the body, turns the outcome into its framework's
// reply (or runs the handler), and reports the handler's status back through `settle`.

/**
 * How the receiver reads one request of an adapter (`C`, the adapter's own request context):
 * one object per adapter, so a request costs no allocation of its own.
 */
export interface RequestPort<C> {
  /** The request headers: Node's record (lower-case names) or a fetch `Headers`. */
  headers (ctx: C): HeadersInput
  /**
   * Reads the raw body: the exact bytes received, never decoded or decompressed, at most
   * `limit` bytes. Returns or resolves the bytes; throws or rejects with a `VerificationError`:
   * `payload_too_large` as soon as more than `limit` bytes arrived (stop reading then, whatever
   * `Content-Length` said; bytes over the limit returned anyway are refused the same way),
   * `invalid_payload` when the body cannot be read, `configuration_error` when something else
   * consumed it. Called at most once, after the transport checks passed. A promise that never
   * settles (the client went away mid-body) leaves nothing behind: nothing was verified or
   * claimed, and nobody is left to answer.
   */
  readBody (ctx: C, limit: number): Uint8Array | Promise<Uint8Array>
}

/**
 * A verified delivery, claimed when replay protection is on: hand `events` to the handler, then
 * call `settle(outcome, status)` with the status the handler answered.
 */
export interface AcceptedOutcome {
  readonly kind: 'accepted'
  /** The verified, typed events. */
  readonly events: WebhookEvent[]
  /** The key id the delivery was verified with. */
  readonly keyId: string
  /**
   * What `settle` records: the replay claim, and the delivery's diagnostics when someone
   * subscribed to them. Null when there is nothing to record (no replay protection, nobody listening).
   */
  readonly claim: ClaimSettlement | null
}

/** An exact resend of a delivery already handled or in progress: answer `reply`, do not run the handler. */
export interface DuplicateOutcome {
  readonly kind: 'duplicate'
  readonly reply: Reply<typeof DUPLICATE_BODY>
}

/** A refused request (already logged): answer `reply`, do not run the handler. */
export interface RejectedOutcome {
  readonly kind: 'rejected'
  readonly reply: Reply<WebhookErrorBody>
  readonly error: VerificationError
}

/** What the receiver decided about one request. */
export type ReceiveOutcome = AcceptedOutcome | DuplicateOutcome | RejectedOutcome

const DUPLICATE: DuplicateOutcome = Object.freeze({
  kind: 'duplicate',
  reply: Object.freeze({ status: 200, headers: Object.freeze({}) as Record<string, string>, body: DUPLICATE_BODY }),
})

/**
 * The outcome for a failure, with its one log line (the reason and the keyid, never the
 * signature, the body or a key). An unexpected error (not a `VerificationError`) is logged as
 * such and answered as a generic 500. `headers` (null when there are none to read) only feed the log line.
 */
export function rejection (err: unknown, headers: HeadersInput | null, log: Logger): RejectedOutcome {
  const outcome = reject(err, headers, log)
  if (observing()) observeRefusal(outcome.error.type, outcome.reply.status)
  return outcome
}

/** `rejection` for a delivery whose body is in hand: its observation, if any, records the outcome. */
function reject (err: unknown, headers: HeadersInput | null, log: Logger, observation: DeliveryObservation | null = null): RejectedOutcome {
  const error = asVerificationError(err)
  if (error !== err) log.error({ err }, 'mailchannels webhook: unexpected error while verifying')
  const reply = failureReply(error)
  // The store's own error (its message only) says why it answered 503; senders never see it.
  const line: Record<string, unknown> = { reason: error.type, statusCode: reply.status, keyId: headers === null ? undefined : keyIdForLog(headers) }
  if (error.cause !== undefined) line.cause = error.cause instanceof Error ? error.cause.message : String(error.cause)
  log[logLevelFor(reply.status)](line, 'mailchannels webhook rejected')
  if (observation !== null) observation.finish('rejected', error.type, reply.status)
  return { kind: 'rejected', reply, error }
}

/**
 * Reports the handler's answer for an accepted delivery: a 2xx completes the replay claim,
 * anything else releases it so the sender's retry is handled. Only the first call counts; other
 * outcomes are ignored. Call it with the handler's status whether or not the client is still
 * connected (see `ClaimSettlement`). `type`, for a failure, is the code answered (diagnostics
 * only; `handler_error` when not given).
 */
export function settle (outcome: ReceiveOutcome, status: number, type?: WebhookDeliveryErrorType): void {
  if (outcome.kind === 'accepted' && outcome.claim !== null) outcome.claim.settle(status, type)
}

/**
 * The webhook receiver of one set of resolved options (`resolveReceiverOptions`). Every method
 * answers with an outcome and never throws or rejects; results are synchronous whenever nothing
 * had to wait (no key fetch, no thread-pool verify, no replay store), which keeps the hot path
 * free of promise hops.
 *
 * The Express, web and Hono adapters reach it through `createWebhookFlow` (./flow.ts), which runs
 * it and the ending after it (the answer, the handler, the settlement of the claim); the Fastify
 * hooks call `check` and `receive` themselves.
 */
export interface Receiver {
  /** The validated options. */
  readonly options: ResolvedReceiver
  /**
   * The transport checks, before any body byte is read: media type (with `contentTypes`),
   * `Content-Encoding` (none or identity), `Content-Length` over `bodyLimit`. Null when the body may be read.
   */
  check (headers: HeadersInput, log: Logger): RejectedOutcome | null
  /** Verifies the raw body, then claims the delivery (when replay protection is on). For adapters whose framework read the body (after `check`). */
  receive (body: Uint8Array, headers: HeadersInput, log: Logger): ReceiveOutcome | Promise<ReceiveOutcome>
  /** The whole flow up to the outcome: `check`, `port.readBody(ctx, bodyLimit)`, then `receive`. */
  handle<C> (ctx: C, port: RequestPort<C>, log: Logger): ReceiveOutcome | Promise<ReceiveOutcome>
  /** The same as the module's `settle`. */
  settle (outcome: ReceiveOutcome, status: number, type?: WebhookDeliveryErrorType): void
}

/** Builds the receiver of resolved options. */
export function createReceiver (r: ResolvedReceiver): Receiver {
  const { replay: store, replayTtl } = r

  function claim (delivery: VerifiedDelivery, headers: HeadersInput, log: Logger, observation: DeliveryObservation | null): ReceiveOutcome | Promise<ReceiveOutcome> {
    if (observation !== null) observation.verified(delivery.events.length, delivery.keyId)
    if (store === null) {
      if (observation === null) return { kind: 'accepted', events: delivery.events, keyId: delivery.keyId, claim: null }
      observation.accepted()
      return { kind: 'accepted', events: delivery.events, keyId: delivery.keyId, claim: new ClaimSettlement(null, '', 0, log, observation) }
    }
    let claimed: ClaimOutcome | Promise<ClaimOutcome>
    try {
      claimed = claimDelivery(store, delivery.signature, replayTtl)
    } catch (err) {
      return reject(err, headers, log, observation)
    }
    if (claimed instanceof Promise) return claimed.then((o) => claimedOutcome(o, delivery, log, observation), (err: unknown) => reject(err, headers, log, observation))
    return claimedOutcome(claimed, delivery, log, observation)
  }

  function claimedOutcome (outcome: ClaimOutcome, delivery: VerifiedDelivery, log: Logger, observation: DeliveryObservation | null): ReceiveOutcome {
    if (!outcome.claimed) {
      log.info({ keyId: delivery.keyId, state: outcome.state }, 'mailchannels webhook: duplicate delivery, not handled again')
      if (observation !== null) observation.finish('duplicate', null, DUPLICATE.reply.status)
      return DUPLICATE
    }
    if (observation !== null) observation.accepted()
    return { kind: 'accepted', events: delivery.events, keyId: delivery.keyId, claim: new ClaimSettlement(store, outcome.id, replayTtl, log, observation) }
  }

  function check (headers: HeadersInput, log: Logger): RejectedOutcome | null {
    const bad = checkHeaders(headers, r.bodyLimit, r.contentTypes)
    return bad === null ? null : rejection(bad, headers, log)
  }

  function receive (body: Uint8Array, headers: HeadersInput, log: Logger): ReceiveOutcome | Promise<ReceiveOutcome> {
    // Decided once per delivery: an unobserved one reads no clock and builds no message.
    if (!observing()) return verifyAndClaim(body, headers, log, null)
    const observation = new DeliveryObservation(body.byteLength)
    const outcome = verifyAndClaim(body, headers, log, observation)
    observation.returned()
    return outcome
  }

  function verifyAndClaim (body: Uint8Array, headers: HeadersInput, log: Logger, observation: DeliveryObservation | null): ReceiveOutcome | Promise<ReceiveOutcome> {
    let verified: VerifiedDelivery | Promise<VerifiedDelivery>
    try {
      verified = verifyBody(r, body, headers, log)
    } catch (err) {
      return reject(err, headers, log, observation)
    }
    if (verified instanceof Promise) return verified.then((d) => claim(d, headers, log, observation), (err: unknown) => reject(err, headers, log, observation))
    return claim(verified, headers, log, observation)
  }

  function received (body: Uint8Array, headers: HeadersInput, log: Logger): ReceiveOutcome | Promise<ReceiveOutcome> {
    // A reader that returned more than it was asked for (a framework's buffer) is refused like one that stopped.
    if (body.byteLength > r.bodyLimit) return rejection(tooLarge(r.bodyLimit), headers, log)
    return receive(body, headers, log)
  }

  function handle<C> (ctx: C, port: RequestPort<C>, log: Logger): ReceiveOutcome | Promise<ReceiveOutcome> {
    const headers = port.headers(ctx)
    const bad = check(headers, log)
    if (bad !== null) return bad
    let body: Uint8Array | Promise<Uint8Array>
    try {
      body = port.readBody(ctx, r.bodyLimit)
    } catch (err) {
      return rejection(err, headers, log)
    }
    if (body instanceof Promise) return body.then((b) => received(b, headers, log), (err: unknown) => rejection(err, headers, log))
    return received(body, headers, log)
  }

  return { options: r, check, receive, handle, settle }
}

/**
 * The receiver of an adapter that logs to a `logger` option (Express, the fetch handler, Hono),
 * options validated once: throws a `TypeError` naming a bad or unknown option (`extra`: the
 * adapter's own option names besides the receiver's and `logger`). Warns once when
 * `customerHandles` is `'any'`. `keyStores` makes the key store an adapter owns when neither
 * `publicKey` nor `keyStore` is given (default: one per base URL, logging to `log`).
 */
export function createStandaloneReceiver (
  options: WebhookReceiverOptions & { logger?: Logger },
  extra: readonly string[] = [],
  keyStores: (log: Logger) => (baseUrl: string) => KeyStore = keyStoreFactory,
): { receiver: Receiver, log: Logger } {
  if (options === null || typeof options !== 'object') throw new TypeError('options must be an object')
  rejectUnknownOptions(options, extra)
  const log = resolveLogger(options.logger)
  const receiver = createReceiver(resolveReceiverOptions(options, keyStores(log)))
  if (receiver.options.anyCustomer) log.warn({}, "mailchannels-webhooks: customerHandles is 'any': deliveries signed for any MailChannels customer are accepted")
  return { receiver, log }
}
