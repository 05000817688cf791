import type { WebhookEvent } from '../events/types.js'
import { eventFingerprint } from './fingerprint.js'
import type { ClaimStore } from './claim-store.js'

// The hand-written route to per-event idempotency, before WebhookEventRouter's `seenEvents`
// (claims with a lifetime, released on failure, kept alive while handlers run) became the one way.

/**
 * The events whose fingerprints `store` has not seen (order kept). Read-only: call `markSeen` once they are processed.
 * @deprecated Give `WebhookEventRouter` the store as `seenEvents`: it claims each event, releases it on failure and marks it done.
 */
export async function filterUnseen<E extends WebhookEvent> (events: readonly E[], store: ClaimStore): Promise<E[]> {
  const seen = await store.has(events.map(eventFingerprint))
  return events.filter((_event, i) => seen[i] !== true)
}

/**
 * Records events as processed, so a resend's copies are skipped by `filterUnseen`.
 * @deprecated Give `WebhookEventRouter` the store as `seenEvents`.
 */
export async function markSeen (events: readonly WebhookEvent[], store: ClaimStore): Promise<void> {
  await store.add(events.map(eventFingerprint))
}

/**
 * Atomically claims the events no other caller has claimed and returns them (order kept):
 * safe when two resends of the same events are handled at once. If processing then fails,
 * `store.delete(claimed.map(eventFingerprint))` gives them back so the next resend handles them.
 * @deprecated Give `WebhookEventRouter` the store as `seenEvents` (or call the store's own `claim`, `complete` and `release`).
 */
export async function claimUnseen<E extends WebhookEvent> (events: readonly E[], store: ClaimStore): Promise<E[]> {
  const fresh = await store.add(events.map(eventFingerprint))
  return events.filter((_event, i) => fresh[i] === true)
}
