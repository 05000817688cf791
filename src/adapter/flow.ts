import { STATUS_CODES } from 'node:http'
import { HTTP_STATUS_BY_TYPE, VerificationError, type VerifyErrorType } from '../errors.js'
import type { Logger } from '../logger.js'
import { deliveryId, type ClaimState, type ReplayStore } from '../replay/types.js'
import { readSignatureFields, type HeadersInput } from '../verify/headers.js'
import { parseSignature } from '../verify/signature-input.js'
import { verifyDelivery, type VerifiedDelivery } from '../verify/verify-webhook.js'
import type { ResolvedReceiver } from './options.js'

/** Seconds a sender should wait when the replay store cannot answer. */
export const REPLAY_RETRY_AFTER = 10
/** Seconds a sender should wait when the key error carries no hint. */
export const KEY_RETRY_AFTER = 30

/** The failure body: Fastify's error shape, with the library's reason code as `code`. */
export interface WebhookErrorBody {
  statusCode: number
  code: VerifyErrorType
  /** The HTTP reason phrase. */
  error: string
  message: string
}

/** What an adapter sends for a failure. */
export interface FailureReply {
  status: number
  body: WebhookErrorBody
  /** Seconds, for `Retry-After` (503 only). */
  retryAfter: number | undefined
}

/** The body answered for a duplicate delivery. */
export const DUPLICATE_BODY = Object.freeze({ duplicate: true as const })

/** Anything thrown in the pipeline as a `VerificationError`; unexpected errors become a generic 500 with no internals. */
export function asVerificationError (err: unknown): VerificationError {
  if (err instanceof VerificationError) return err
  return new VerificationError('configuration_error', 'The webhook could not be verified because of a server error.')
}

/** Status, body and Retry-After for a failure (HTTP_STATUS_BY_TYPE). The message is the library's own: never a signature, key or body. */
export function failureReply (err: VerificationError): FailureReply {
  const status = HTTP_STATUS_BY_TYPE[err.type]
  let retryAfter: number | undefined
  if (status === 503) retryAfter = err.retryAfter ?? (err.type === 'replay_store_unavailable' ? REPLAY_RETRY_AFTER : KEY_RETRY_AFTER)
  return {
    status,
    body: { statusCode: status, code: err.type, error: STATUS_CODES[status] ?? 'Error', message: err.message },
    retryAfter,
  }
}

/** The log level of a rejection: client errors are routine (info), dependencies down (503) warn, misconfiguration error. */
export function logLevelFor (status: number): 'info' | 'warn' | 'error' {
  return status < 500 ? 'info' : status === 503 ? 'warn' : 'error'
}

/** The `keyid` of a rejected delivery when its signature headers parse (failure path only; for the log line). */
export function keyIdForLog (headers: HeadersInput): string | undefined {
  try {
    const fields = readSignatureFields(headers)
    return parseSignature(fields.signatureInput, fields.signature).keyId
  } catch {
    return undefined
  }
}

/** Logs one line for a rejection: the reason and the keyid, never the signature, the body or a key. */
export function logRejection (log: Logger, err: VerificationError, status: number, headers: HeadersInput | null): void {
  const keyId = headers === null ? undefined : keyIdForLog(headers)
  log[logLevelFor(status)]({ reason: err.type, statusCode: status, keyId }, 'mailchannels webhook rejected')
}

/**
 * Verifies the raw body (steps 2-10). Synchronous when the key is at hand and the verify
 * stays on the event loop; otherwise a promise. Throws / rejects with `VerificationError`.
 */
export function verifyBody (r: ResolvedReceiver, body: Buffer, headers: HeadersInput, log: Logger): VerifiedDelivery | Promise<VerifiedDelivery> {
  // `cache: false` builds a key store per call: give it the request's logger.
  const config = r.config.freshStorePerCall === null ? r.config : { ...r.config, logger: log }
  return verifyDelivery(config, body, headers, r.clock.now(), body.length < r.poolBelow)
}

/** The outcome of a replay claim. */
export type ClaimOutcome = { claimed: true, id: string } | { claimed: false, state: Exclude<ClaimState, 'claimed'> }

/** Claims a verified delivery. Rejects with `replay_store_unavailable` when the store fails (fail closed). */
export async function claimDelivery (store: ReplayStore, delivery: VerifiedDelivery, ttl: number): Promise<ClaimOutcome> {
  const id = deliveryId(delivery.base, delivery.signature)
  let state: ClaimState
  try {
    state = await store.claim(id, ttl)
  } catch {
    throw new VerificationError('replay_store_unavailable', 'The replay store is unavailable; MailChannels will retry the delivery.', REPLAY_RETRY_AFTER)
  }
  if (state === 'claimed') return { claimed: true, id }
  if (state === 'processing' || state === 'done') return { claimed: false, state }
  throw new VerificationError('replay_store_unavailable', 'The replay store gave an unexpected answer.', REPLAY_RETRY_AFTER)
}

/** Whether a handler's answer counts as handled: any 2xx. */
export function isHandled (status: number): boolean {
  return status >= 200 && status < 300
}

/**
 * Records the outcome of a claimed delivery, once. The claim is settled by the handler's own
 * answer, never by the connection: a 2xx completes it (`done`), anything else (a throw answered
 * 5xx, a 4xx) releases it so the sender's retry is processed. A client that goes away settles
 * nothing: the handler still runs and its answer decides; a handler that never answers leaves the
 * claim `processing` until it expires, which for a copy is the same as `done` (the claim lasts the
 * whole freshness window). Releasing because the client left would let an attacker who holds one
 * signed delivery run the handler once per dropped connection.
 */
export class ClaimSettlement {
  readonly #store: ReplayStore
  readonly #id: string
  readonly #ttl: number
  readonly #log: Logger
  #settled = false

  constructor (store: ReplayStore, id: string, ttl: number, log: Logger) {
    this.#store = store
    this.#id = id
    this.#ttl = ttl
    this.#log = log
  }

  /** Settles with the status the handler answered; later calls do nothing. */
  settle (status: number): void {
    if (this.#settled) return
    this.#settled = true
    settleClaim(this.#store, this.#id, this.#ttl, isHandled(status), this.#log)
  }
}

/**
 * Completes (`ok`) or releases a claim. Store failures are logged, never thrown: a failed
 * release leaves the claim until it expires (fail closed), a failed complete leaves it `processing`.
 */
export function settleClaim (store: ReplayStore, id: string, ttl: number, ok: boolean, log: Logger): void {
  let p: Promise<void>
  try {
    p = ok ? store.complete(id, ttl) : store.release(id)
  } catch (err) {
    p = Promise.reject(err)
  }
  Promise.resolve(p).catch((err: unknown) => {
    log.error({ op: ok ? 'complete' : 'release', err: err instanceof Error ? err.message : String(err) }, 'mailchannels webhook: the replay store failed to record the delivery outcome')
  })
}
