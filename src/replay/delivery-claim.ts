// The replay claim of one verified delivery: a one-key claim (`deliveryClaimKey`) of the claim
// store the receiver was given, taken at once from a memory store (no promise) or through the
// store's promise, and settled once by the handler's answer. A per-delivery `DeliveryReplayStore`
// of the user's own is called with the delivery id instead. The receiver's claim step
// (step 4 of ../receiver/pipeline.ts) calls only this file. Runtime-neutral.
import type { DeliveryObservation } from '../diagnostics/delivery.js'
import type { WebhookDeliveryErrorType } from '../diagnostics/types.js'
import { VerificationError } from '../errors.js'
import type { Logger } from '../logger.js'
import { isClaimStore, type ClaimStore, type StoreClaim } from './claim-store.js'
import { DONE, PROCESSING, synchronousClaims, type SynchronousClaims } from './memory-claim-store.js'
import { claimStoreBehindMemory } from './memory-store.js'
import { deliveryClaimKey, deliveryId, type DeliveryReplayStore, type ReplayStore } from './types.js'

/** Seconds a sender should wait when the replay store cannot answer. */
export const REPLAY_RETRY_AFTER = 10

/**
 * A delivery's claim, held until `ClaimSettlement` settles it: the store's `StoreClaim` of its
 * `deliveryClaimKey` (for a `DeliveryReplayStore`: its delivery id, with no token).
 */
export type DeliveryClaim = StoreClaim

/** The outcome of a delivery's claim; `id` is the claim to settle. */
export type ClaimOutcome = { claimed: true, id: DeliveryClaim } | { claimed: false, state: 'processing' | 'done' }

const PROCESSING_OUTCOME: ClaimOutcome = Object.freeze({ claimed: false, state: 'processing' })
const DONE_OUTCOME: ClaimOutcome = Object.freeze({ claimed: false, state: 'done' })

function storeUnavailable (err: unknown): VerificationError {
  return new VerificationError('replay_store_unavailable', 'The replay store is unavailable; MailChannels will retry the delivery.', REPLAY_RETRY_AFTER, { cause: err })
}

function unexpected (): VerificationError {
  return new VerificationError('replay_store_unavailable', 'The replay store gave an unexpected answer.', REPLAY_RETRY_AFTER)
}

/** The memory claim store's own synchronous methods, when `store` is (or stands for) one; else null. */
function synchronousOf (store: ReplayStore): SynchronousClaims | null {
  const behind = claimStoreBehindMemory(store)
  return synchronousClaims(behind ?? store as ClaimStore)
}

/** The claim store `store` is or stands for; null for a per-delivery store of the user's own. */
function claimStoreOf (store: ReplayStore): ClaimStore | null {
  const behind = claimStoreBehindMemory(store)
  if (behind !== null) return behind
  return isClaimStore(store) ? store : null
}

/**
 * Claims a verified delivery for `ttl` seconds (its freshness window): at once from a memory
 * claim store (no promise), else through the store's promise. Throws / rejects with
 * `replay_store_unavailable` when the store fails (fail closed).
 */
export function claimDelivery (store: ReplayStore, signature: Uint8Array, ttl: number): ClaimOutcome | Promise<ClaimOutcome> {
  const now = synchronousOf(store)
  if (now !== null) {
    let claim: StoreClaim | typeof PROCESSING | typeof DONE
    try {
      claim = now.claimKey(deliveryClaimKey(signature), ttl)
    } catch (err) {
      throw storeUnavailable(err)
    }
    return claim === PROCESSING ? PROCESSING_OUTCOME : claim === DONE ? DONE_OUTCOME : { claimed: true, id: claim }
  }
  const claims = claimStoreOf(store)
  try {
    if (claims !== null) {
      const key = deliveryClaimKey(signature)
      return Promise.resolve(claims.claim([key], ttl)).then((results) => claimResult(results, key), (err: unknown) => { throw storeUnavailable(err) })
    }
    const id = deliveryId(signature)
    return Promise.resolve((store as DeliveryReplayStore).claim(id, ttl)).then((state) => {
      if (state === 'claimed') return { claimed: true, id: { fingerprint: id, token: '' } }
      if (state === 'processing' || state === 'done') return state === 'processing' ? PROCESSING_OUTCOME : DONE_OUTCOME
      throw unexpected()
    }, (err: unknown) => { throw storeUnavailable(err) })
  } catch (err) {
    return Promise.reject(storeUnavailable(err))
  }
}

/** A claim store's answer for the one key it was asked for. */
function claimResult (results: unknown, key: string): ClaimOutcome {
  if (!Array.isArray(results) || results.length !== 1) throw unexpected()
  const r: unknown = results[0]
  if (r === 'processing') return PROCESSING_OUTCOME
  if (r === 'done') return DONE_OUTCOME
  const claim = r as Partial<StoreClaim> | null
  if (claim === null || typeof claim !== 'object' || claim.fingerprint !== key || typeof claim.token !== 'string') throw unexpected()
  return { claimed: true, id: claim as StoreClaim }
}

/** Whether a handler's answer counts as handled: any 2xx. */
function isHandled (status: number): boolean {
  return status >= 200 && status < 300
}

/**
 * Records the outcome of an accepted delivery, once: its replay claim (when replay protection is
 * on) and its diagnostics (when someone subscribed as it arrived). The claim is settled by the handler's own
 * answer, never by the connection: a 2xx completes it (`done`, remembered for `ttl` seconds),
 * anything else (a throw answered 5xx, a 4xx) releases it so the sender's retry is processed. A
 * client that goes away settles nothing: the handler still runs and its answer decides; a handler
 * that never answers leaves the claim `processing` until it expires, which for a copy is the same
 * as `done` (the claim lasts the whole freshness window). Releasing because the client left would
 * let an attacker who holds one signed delivery run the handler once per dropped connection.
 */
export class ClaimSettlement {
  readonly #store: ReplayStore | null
  readonly #claim: DeliveryClaim | ''
  readonly #ttl: number
  readonly #log: Logger
  readonly #observation: DeliveryObservation | null
  #settled = false

  /** `claim`: the claimed outcome's `id`; `''` with no store (diagnostics only). */
  constructor (store: ReplayStore | null, claim: DeliveryClaim | '', ttl: number, log: Logger, observation: DeliveryObservation | null = null) {
    this.#store = store
    this.#claim = claim
    this.#ttl = ttl
    this.#log = log
    this.#observation = observation
  }

  /** Settles with the status the handler answered (and, for diagnostics, the code it answered a failure with); later calls do nothing. */
  settle (status: number, type?: WebhookDeliveryErrorType): void {
    if (this.#settled) return
    this.#settled = true
    const ok = isHandled(status)
    if (this.#store !== null && this.#claim !== '') settleClaim(this.#store, this.#claim, this.#ttl, ok, this.#log)
    if (this.#observation !== null) this.#observation.finish(ok ? 'accepted' : 'failed', ok ? null : type ?? 'handler_error', status)
  }
}

/**
 * Completes (`ok`) or releases a claim. Store failures are logged, never thrown: a failed
 * release leaves the claim until it expires (fail closed), a failed complete leaves it `processing`.
 */
function settleClaim (store: ReplayStore, claim: DeliveryClaim, ttl: number, ok: boolean, log: Logger): void {
  const failed = (err: unknown): void => {
    log.error({ op: ok ? 'complete' : 'release', err: err instanceof Error ? err.message : String(err) }, 'mailchannels webhook: the replay store failed to record the delivery outcome')
  }
  let p: Promise<void>
  try {
    const now = synchronousOf(store)
    if (now !== null) {
      if (ok) now.completeKey(claim, ttl)
      else now.releaseKey(claim)
      return
    }
    const claims = claimStoreOf(store)
    if (claims !== null) p = ok ? claims.complete([claim], ttl) : claims.release([claim])
    else p = ok ? (store as DeliveryReplayStore).complete(claim.fingerprint, ttl) : (store as DeliveryReplayStore).release(claim.fingerprint)
  } catch (err) {
    failed(err)
    return
  }
  Promise.resolve(p).catch(failed)
}
