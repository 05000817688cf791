import { MemoryClaimStore, type StoreClaim, type StoreClaimResult, type ClaimStore } from '../../../src/index.js'

type Method = 'claim' | 'complete' | 'release' | 'extend'

/**
 * A real seen-events store (memory, or any given) that records every claim-API call and can be
 * told to fail or slow down one operation, as a store does when Redis is down or far away.
 */
export class SpyStore implements ClaimStore {
  readonly calls: Array<{ method: Method, fingerprints: string[] }> = []
  readonly fail: Partial<Record<Method, unknown>> = {}
  readonly delayMs: Partial<Record<Method, number>> = {}

  constructor (readonly inner: ClaimStore = new MemoryClaimStore()) {}

  count (method: Method): number { return this.calls.filter((c) => c.method === method).length }
  fingerprints (method: Method): string[] { return this.calls.filter((c) => c.method === method).flatMap((c) => c.fingerprints) }

  async has (fps: readonly string[]): Promise<boolean[]> { return await this.inner.has(fps) }
  async add (fps: readonly string[]): Promise<boolean[]> { return await this.inner.add(fps) }
  async delete (fps: readonly string[]): Promise<void> { await this.inner.delete(fps) }

  async claim (fps: readonly string[], lifetime: number): Promise<StoreClaimResult[]> {
    await this.#enter('claim', [...fps])
    return await this.inner.claim(fps, lifetime)
  }

  async complete (claims: readonly StoreClaim[]): Promise<void> {
    await this.#enter('complete', claims.map((c) => c.fingerprint))
    await this.inner.complete(claims)
  }

  async release (claims: readonly StoreClaim[]): Promise<void> {
    await this.#enter('release', claims.map((c) => c.fingerprint))
    await this.inner.release(claims)
  }

  async extend (claims: readonly StoreClaim[], lifetime: number): Promise<boolean[] | undefined | void> {
    await this.#enter('extend', claims.map((c) => c.fingerprint))
    return await this.inner.extend(claims, lifetime)
  }

  async #enter (method: Method, fingerprints: string[]): Promise<void> {
    this.calls.push({ method, fingerprints })
    const delay = this.delayMs[method]
    if (delay !== undefined) await new Promise((resolve) => setTimeout(resolve, delay))
    if (method in this.fail) throw this.fail[method]
  }
}
