import { base64url } from '#crypto'

/** Where a delivery stands in a replay store. */
export type ClaimState = 'claimed' | 'processing' | 'done'

/**
 * Remembers which signed deliveries were already handled, so a replay of the same
 * signature material is never handed to the handler again.
 * Implementations must be atomic across every instance that shares them.
 */
export interface ReplayStore {
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

/**
 * The replay key of a verified delivery: its Ed25519 signature bytes, base64url (86 characters).
 * The signature identifies the signed delivery without a hash over it: a resend of the same
 * signature gets the same key, and two different signature bases cannot share a signature.
 * Ed25519 as verified here is strongly unforgeable (RFC 8032 section 5.1.7 requires S < L, and
 * https://eprint.iacr.org/2020/823 proves SUF-CMA for that check), so no other valid
 * signature exists for the same base either, and no one without the key can make one.
 * The bytes are re-encoded rather than taken from the header, whose base64 text could vary
 * (unused low bits) for the same bytes.
 */
export function deliveryId (signature: Uint8Array): string {
  return base64url(signature)
}
