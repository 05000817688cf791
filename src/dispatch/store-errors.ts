// What a seen-events store's failure becomes: the error a receiver answers 503 for, and what of
// it is logged.
import { ReplayStoreError } from '../replay/errors.js'

/** A store failure as the `ReplayStoreError` receivers answer 503 for (a custom store may reject with anything). */
export function storeError (operation: string, err: unknown): ReplayStoreError {
  if (err instanceof ReplayStoreError) return err
  return new ReplayStoreError(operation, `The seen-events store failed to ${operation} events.`, { cause: err })
}

/** What is logged of a store error: its name and message (no stack of someone else's client, no payload). */
export function errorSummary (err: unknown): { type: string, message: string } {
  return err instanceof Error ? { type: err.name, message: err.message } : { type: typeof err, message: String(err) }
}
