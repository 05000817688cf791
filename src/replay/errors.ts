/**
 * A replay or seen-events store could not answer (Redis down, timed out, or an
 * unexpected reply). Adapters map it to 503 `replay_store_unavailable` with
 * `Retry-After`, so the sender retries: the route fails closed, never open.
 */
export class ReplayStoreError extends Error {
  override readonly name = 'ReplayStoreError'
  /** Which store operation failed. */
  readonly operation: string

  constructor (operation: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.operation = operation
  }
}
