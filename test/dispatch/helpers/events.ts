import { toEvent } from '../../../src/events/parse-events.js'
import type { WebhookEvent } from '../../../src/index.js'

/** A parsed event as a receiver hands it over, `n` making it distinct. */
export function ev (type: string, n: number, extra: Record<string, unknown> = {}): WebhookEvent {
  return toEvent({ event: type, customer_handle: 'acct_1', timestamp: 1700000000 + n, request_id: `req-${n}`, email: 'from@example.com', ...extra }, 0)
}

/** Resolves after `ms`. */
export async function sleep (ms: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms))
}

/**
 * Blocks the event loop for `ms`, as a process does under a long garbage collection, a
 * synchronous call or a stopped VM: no timer (no claim renewal) can run meanwhile.
 */
export function pause (ms: number): void {
  const until = performance.now() + ms
  while (performance.now() < until) { /* the process is paused */ }
}

/** Counts calls per key, to check an effect happened exactly once. */
export class Effects {
  readonly counts = new Map<string, number>()
  record (key: string): void { this.counts.set(key, (this.counts.get(key) ?? 0) + 1) }
  get (key: string): number { return this.counts.get(key) ?? 0 }
  /** Keys recorded more than once. */
  repeated (): string[] { return [...this.counts].filter(([, n]) => n > 1).map(([k]) => k) }
}
