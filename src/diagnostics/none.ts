import type { DiagnosticsPort, KeyFetchCause, KeyFetchMessage, Publisher, TracingPublisher, WebhookDeliveryMessage, WebhookReceiveContext } from './types.js'

// The port for runtimes without node:diagnostics_channel (Workers, browsers, edge runtimes):
// nobody can subscribe, so the receivers never read a clock or build a message.

const silent: Publisher<never> = Object.freeze({ hasSubscribers: false, publish () {} })

export const delivery: Publisher<WebhookDeliveryMessage> = silent
export const keyFetch: Publisher<KeyFetchMessage> = silent
export const deadLetter: Publisher<never> = silent
export const receive: TracingPublisher<WebhookReceiveContext> = Object.freeze({ hasSubscribers: false, start: silent, end: silent, asyncStart: silent, asyncEnd: silent })

export function now (): number {
  return 0
}

/** A failed fetch's cause: a Worker's fetch rejects with a bare TypeError, which says no more than this. */
export function networkCause (): [KeyFetchCause, string?] {
  return ['network']
}

/** Nobody listens here (`keyFetch.hasSubscribers` is false), so no key-fetch message is built. */
export function keyFetchEnded (): void {}

// The port's shape, checked here (key-fetch.ts imports it by name).
void ({ delivery, keyFetch, receive, now, networkCause, keyFetchEnded } satisfies DiagnosticsPort)
