import { hashBase64url } from '#crypto'

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

/** The replay key of a verified delivery: SHA-256 over the signature base and the signature bytes. */
export function deliveryId (base: Uint8Array, signature: Uint8Array): string {
  const both = new Uint8Array(base.byteLength + signature.byteLength)
  both.set(base)
  both.set(signature, base.byteLength)
  return hashBase64url('sha256', both)
}
