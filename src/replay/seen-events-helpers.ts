import type { WebhookEvent } from '../events/types.js'
import { eventFingerprint } from './fingerprint.js'
import type { SeenEventsStore } from './seen-events-types.js'

/** The events whose fingerprints `store` has not seen (order kept). Read-only: call `markSeen` once they are processed. */
export async function filterUnseen<E extends WebhookEvent> (events: readonly E[], store: SeenEventsStore): Promise<E[]> {
  const seen = await store.has(events.map(eventFingerprint))
  return events.filter((_event, i) => seen[i] !== true)
}

/** Records events as processed, so a resend's copies are skipped by `filterUnseen`. */
export async function markSeen (events: readonly WebhookEvent[], store: SeenEventsStore): Promise<void> {
  await store.add(events.map(eventFingerprint))
}

/**
 * Atomically claims the events no other caller has claimed and returns them (order kept):
 * safe when two resends of the same events are handled at once. If processing then fails,
 * `store.delete(claimed.map(eventFingerprint))` gives them back so the next resend handles them.
 */
export async function claimUnseen<E extends WebhookEvent> (events: readonly E[], store: SeenEventsStore): Promise<E[]> {
  const fresh = await store.add(events.map(eventFingerprint))
  return events.filter((_event, i) => fresh[i] === true)
}
