import { base64url, hashBase64url } from '#crypto'
import type { StoreClaim, StoreClaimResult } from './claim-store.js'

/**
 * The key of a verified delivery's claim in a `ClaimStore` (per-delivery replay protection):
 * the SHA-256 (base64url, 43 characters) of `mcwh-delivery-v1:` and the delivery's Ed25519
 * signature bytes in base64url (`deliveryId`).
 *
 * The signature identifies the signed delivery: a resend of the same signature gets the same
 * key, and two different signature bases cannot share a signature. Ed25519 as verified here is
 * strongly unforgeable (RFC 8032 section 5.1.7 requires S < L, and
 * https://eprint.iacr.org/2020/823 proves SUF-CMA for that check), so no other valid signature
 * exists for the same base either, and no one without the key can make one. The bytes are
 * re-encoded rather than taken from the header, whose base64 text could vary (unused low bits)
 * for the same bytes. The hash gives the key an event fingerprint's form (the memory store keeps
 * it as its 256 bits, Redis as a short key) and its own tag: a delivery's key and an event's
 * `eventFingerprint` (tagged `mcwh-event-v2:`) are a SHA-256 collision apart, so one store holds
 * both without either answering for the other.
 */
export function deliveryClaimKey (signature: Uint8Array): string {
  return claimKeyOfDeliveryId(base64url(signature))
}

/** `deliveryClaimKey` of a delivery whose `deliveryId` is `id` (what the per-delivery `ReplayStore` methods are given). */
export function claimKeyOfDeliveryId (id: string): string {
  return hashBase64url('sha256', 'mcwh-delivery-v1:' + id)
}

/**
 * A delivery's Ed25519 signature bytes, base64url (86 characters): what a per-delivery
 * `DeliveryReplayStore` is given as its `id` (a `ClaimStore` is given `deliveryClaimKey` instead).
 */
export function deliveryId (signature: Uint8Array): string {
  return base64url(signature)
}

/** Where a delivery stands in a per-delivery `DeliveryReplayStore` (a `ClaimStore` answers a `StoreClaimResult`). */
export type ClaimState = 'claimed' | 'processing' | 'done'

/**
 * What the receivers' `replay` option takes: a `ClaimStore` (`MemoryClaimStore`,
 * `RedisClaimStore`, the PostgreSQL and SQLite stores), which claims each delivery as one key
 * (`deliveryClaimKey`) and can serve `WebhookEventRouter` too, or a per-delivery
 * `DeliveryReplayStore` of your own. Both fit this shape (each method takes either's arguments),
 * so an object literal of either kind type-checks as it is; the receivers tell them apart by the
 * methods only a `ClaimStore` has (`has`, `add`, `delete`, `extend`).
 */
export interface ReplayStore {
  claim (idOrKeys: string | readonly string[], seconds: number): Promise<ClaimState | StoreClaimResult[]>
  complete (idOrClaims: string | readonly StoreClaim[], seconds?: number): Promise<void>
  release (idOrClaims: string | readonly StoreClaim[]): Promise<void>
}

/**
 * A per-delivery replay store of your own (a Durable Object, say: docs/runtimes.md): three
 * methods over delivery ids (the signature, base64url). Where a `ClaimStore` is at hand, pass it
 * instead: it serves deliveries as one-key claims, and one store then serves the receivers and
 * `WebhookEventRouter` alike. Implementations must be atomic across every instance that shares them.
 */
export interface DeliveryReplayStore {
  /**
   * Atomically claims `id` for `ttlSeconds`. `'claimed'`: it is new and now ours to handle;
   * `'processing'`: another request is handling it; `'done'`: it was handled.
   * Rejects (never resolves wrongly) when the store cannot answer.
   */
  claim (id: string, ttlSeconds: number): Promise<ClaimState>
  /** Marks a claimed delivery as handled (the handler answered 2xx). */
  complete (id: string, ttlSeconds: number): Promise<void>
  /**
   * Releases this store's own claim on `id`, so the sender's retry is processed (the handler
   * threw or answered non-2xx). Never called because a client went away: a claim is settled by
   * the handler's answer only. A completed delivery stays done.
   */
  release (id: string): Promise<void>
}
