// The replay claim of one verified delivery: claimed from the replay store at once (the default
// memory store answers without a promise) or through the store's promise, and settled once by the
// handler's answer. The receiver's claim step (../receiver/receiver.ts) calls only this file.
// Runtime-neutral.
import type { DeliveryObservation } from '../diagnostics/delivery.js'
import type { WebhookDeliveryErrorType } from '../diagnostics/types.js'
import { VerificationError } from '../errors.js'
import type { Logger } from '../logger.js'
import { synchronousClaims } from './memory-store.js'
import { deliveryId, type ClaimState, type ReplayStore } from './types.js'

/** Seconds a sender should wait when the replay store cannot answer. */
export const REPLAY_RETRY_AFTER = 10

/** The outcome of a replay claim. */
export type ClaimOutcome = { claimed: true, id: string } | { claimed: false, state: Exclude<ClaimState, 'claimed'> }

function storeUnavailable (err: unknown): VerificationError {
  return new VerificationError('replay_store_unavailable', 'The replay store is unavailable; MailChannels will retry the delivery.', REPLAY_RETRY_AFTER, { cause: err })
}

function claimOutcome (id: string, state: ClaimState): ClaimOutcome {
  if (state === 'claimed') return { claimed: true, id }
  if (state === 'processing' || state === 'done') return { claimed: false, state }
  throw new VerificationError('replay_store_unavailable', 'The replay store gave an unexpected answer.', REPLAY_RETRY_AFTER)
}

/**
 * Claims a verified delivery: at once from the default memory store (no promise), else through
 * the store's promise. Throws / rejects with `replay_store_unavailable` when the store fails (fail closed).
 */
export function claimDelivery (store: ReplayStore, signature: Uint8Array, ttl: number): ClaimOutcome | Promise<ClaimOutcome> {
  const id = deliveryId(signature)
  const now = synchronousClaims(store)
  if (now !== null) {
    let state: ClaimState
    try {
      state = now.claim(id, ttl)
    } catch (err) {
      throw storeUnavailable(err)
    }
    return claimOutcome(id, state)
  }
  let pending: Promise<ClaimState>
  try {
    pending = store.claim(id, ttl)
  } catch (err) {
    return Promise.reject(storeUnavailable(err))
  }
  return Promise.resolve(pending).then((state) => claimOutcome(id, state), (err: unknown) => { throw storeUnavailable(err) })
}

/** Whether a handler's answer counts as handled: any 2xx. */
function isHandled (status: number): boolean {
  return status >= 200 && status < 300
}

/**
 * Records the outcome of an accepted delivery, once: its replay claim (when replay protection is
 * on) and its diagnostics (when someone subscribed as it arrived). The claim is settled by the handler's own
 * answer, never by the connection: a 2xx completes it (`done`), anything else (a throw answered
 * 5xx, a 4xx) releases it so the sender's retry is processed. A client that goes away settles
 * nothing: the handler still runs and its answer decides; a handler that never answers leaves the
 * claim `processing` until it expires, which for a copy is the same as `done` (the claim lasts the
 * whole freshness window). Releasing because the client left would let an attacker who holds one
 * signed delivery run the handler once per dropped connection.
 */
export class ClaimSettlement {
  readonly #store: ReplayStore | null
  readonly #id: string
  readonly #ttl: number
  readonly #log: Logger
  readonly #observation: DeliveryObservation | null
  #settled = false

  constructor (store: ReplayStore | null, id: string, ttl: number, log: Logger, observation: DeliveryObservation | null = null) {
    this.#store = store
    this.#id = id
    this.#ttl = ttl
    this.#log = log
    this.#observation = observation
  }

  /** Settles with the status the handler answered (and, for diagnostics, the code it answered a failure with); later calls do nothing. */
  settle (status: number, type?: WebhookDeliveryErrorType): void {
    if (this.#settled) return
    this.#settled = true
    const ok = isHandled(status)
    if (this.#store !== null) settleClaim(this.#store, this.#id, this.#ttl, ok, this.#log)
    if (this.#observation !== null) this.#observation.finish(ok ? 'accepted' : 'failed', ok ? null : type ?? 'handler_error', status)
  }
}

/**
 * Completes (`ok`) or releases a claim. Store failures are logged, never thrown: a failed
 * release leaves the claim until it expires (fail closed), a failed complete leaves it `processing`.
 */
function settleClaim (store: ReplayStore, id: string, ttl: number, ok: boolean, log: Logger): void {
  const failed = (err: unknown): void => {
    log.error({ op: ok ? 'complete' : 'release', err: err instanceof Error ? err.message : String(err) }, 'mailchannels webhook: the replay store failed to record the delivery outcome')
  }
  const now = synchronousClaims(store)
  let p: Promise<void>
  try {
    if (now !== null) {
      if (ok) now.complete(id, ttl)
      else now.release(id)
      return
    }
    p = ok ? store.complete(id, ttl) : store.release(id)
  } catch (err) {
    failed(err)
    return
  }
  Promise.resolve(p).catch(failed)
}

