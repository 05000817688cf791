/**
 * A replay or seen-events store could not answer (Redis down, timed out, or an
 * unexpected reply). Adapters map it to 503 `replay_store_unavailable` with
 * `Retry-After`, so the sender retries: the route fails closed, never open.
 */
export class ReplayStoreError extends Error {
  override readonly name: string = 'ReplayStoreError'
  /** Which store operation failed. */
  readonly operation: string

  constructor (operation: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.operation = operation
  }
}

/**
 * A handler broke the rules of the transaction an inbox store (`transactional: true`) gave it as
 * `context.db` (docs/inbox.md): it ended that transaction itself (`COMMIT`, `ROLLBACK`, `BEGIN`),
 * or used `context.db` after its own promise settled. The event is treated as failed and is never
 * acknowledged or marked done on that transaction.
 */
export class InboxTransactionError extends Error {
  override readonly name = 'InboxTransactionError'
  /** `transaction_ended`: the handler ended the store's transaction; `used_after_handler`: `context.db` was called after the handler settled. */
  readonly reason: 'transaction_ended' | 'used_after_handler'
  /** The fingerprint of the event whose transaction it was. */
  readonly fingerprint: string

  constructor (reason: 'transaction_ended' | 'used_after_handler', fingerprint: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.reason = reason
    this.fingerprint = fingerprint
  }
}

/**
 * An inbox store's handlers ran past the store's handler deadline: the transaction was rolled back,
 * its connection given back and the claim released. A `ReplayStoreError`, so receivers answer 503
 * with `Retry-After` and the sender retries.
 */
export class HandlerTimeoutError extends ReplayStoreError {
  override readonly name = 'HandlerTimeoutError'
  /** The fingerprint of the event whose handlers timed out. */
  readonly fingerprint: string

  constructor (fingerprint: string, message: string, options?: { cause?: unknown }) {
    super('handle', message, options)
    this.fingerprint = fingerprint
  }
}
