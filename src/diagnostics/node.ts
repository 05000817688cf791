import diagnosticsChannel from 'node:diagnostics_channel'
import { performance } from 'node:perf_hooks'
import { publishKeyFetchEnded } from './key-fetch-message.js'
import { DEAD_LETTER_DIAGNOSTICS_CHANNEL, type DeadLetterMessage } from './dead-letter-types.js'
import { DELIVERY_DIAGNOSTICS_CHANNEL, KEY_FETCH_DIAGNOSTICS_CHANNEL, RECEIVE_TRACING_CHANNEL, type KeyFetchMessage, type Publisher, type TracingPublisher, type WebhookDeliveryMessage, type WebhookReceiveContext } from './types.js'

// The Node port: node:diagnostics_channel (also what Deno and Bun resolve through the `node`
// condition). The channels are held here for the life of the process, so a subscription made by
// name (`diagnostics_channel.subscribe(DELIVERY_DIAGNOSTICS_CHANNEL, fn)`) reaches these very objects.

export const delivery: Publisher<WebhookDeliveryMessage> = diagnosticsChannel.channel(DELIVERY_DIAGNOSTICS_CHANNEL)
export const keyFetch: Publisher<KeyFetchMessage> = diagnosticsChannel.channel(KEY_FETCH_DIAGNOSTICS_CHANNEL)
export const deadLetter: Publisher<DeadLetterMessage> = diagnosticsChannel.channel(DEAD_LETTER_DIAGNOSTICS_CHANNEL)

const tracing = diagnosticsChannel.tracingChannel<unknown, WebhookReceiveContext>(RECEIVE_TRACING_CHANNEL)
// Bun's TracingChannel has no `hasSubscribers`: ask its channels there.
export const receive: TracingPublisher<WebhookReceiveContext> = typeof (tracing as { hasSubscribers?: unknown }).hasSubscribers === 'boolean'
  ? tracing
  : {
      get hasSubscribers () { return tracing.start.hasSubscribers || tracing.end.hasSubscribers || tracing.asyncStart.hasSubscribers || tracing.asyncEnd.hasSubscribers },
      start: tracing.start,
      end: tracing.end,
      asyncStart: tracing.asyncStart,
      asyncEnd: tracing.asyncEnd,
    }

export function now (): number {
  return performance.now()
}

export { networkCause } from './network-cause.js'

export function keyFetchEnded (startedAt: number, keyId: string, baseUrl: string, refresh: boolean, err: unknown): void {
  publishKeyFetchEnded(keyFetch, performance.now() - startedAt, keyId, baseUrl, refresh, err)
}
