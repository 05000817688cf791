// What the diagnostics tests share: a recorder of the delivery channel, the receive trace and the
// key-fetch channel, unsubscribed at the end of the test.
import diagnosticsChannel from 'node:diagnostics_channel'
import type { Test } from 'tap'
import { DELIVERY_DIAGNOSTICS_CHANNEL, KEY_FETCH_DIAGNOSTICS_CHANNEL, RECEIVE_TRACING_CHANNEL, type KeyFetchMessage, type WebhookDeliveryMessage, type WebhookReceiveContext } from '../../src/index.js'

export type TraceEvent = 'start' | 'end' | 'asyncStart' | 'asyncEnd' | 'error'

export interface Recorder {
  deliveries: WebhookDeliveryMessage[]
  keyFetches: KeyFetchMessage[]
  /** Every receive-trace event in order, with its context object. */
  trace: Array<{ event: TraceEvent, context: WebhookReceiveContext, result: WebhookDeliveryMessage | undefined }>
}

export function record (t: Test): Recorder {
  const r: Recorder = { deliveries: [], keyFetches: [], trace: [] }
  const onDelivery = (m: unknown): void => { r.deliveries.push(m as WebhookDeliveryMessage) }
  const onKeyFetch = (m: unknown): void => { r.keyFetches.push(m as KeyFetchMessage) }
  const at = (event: TraceEvent) => (context: WebhookReceiveContext): void => { r.trace.push({ event, context, result: context.result }) }
  const handlers = { start: at('start'), end: at('end'), asyncStart: at('asyncStart'), asyncEnd: at('asyncEnd'), error: at('error') }
  const tracing = diagnosticsChannel.tracingChannel<unknown, WebhookReceiveContext>(RECEIVE_TRACING_CHANNEL)
  diagnosticsChannel.subscribe(DELIVERY_DIAGNOSTICS_CHANNEL, onDelivery)
  diagnosticsChannel.subscribe(KEY_FETCH_DIAGNOSTICS_CHANNEL, onKeyFetch)
  tracing.subscribe(handlers)
  t.teardown(() => {
    diagnosticsChannel.unsubscribe(DELIVERY_DIAGNOSTICS_CHANNEL, onDelivery)
    diagnosticsChannel.unsubscribe(KEY_FETCH_DIAGNOSTICS_CHANNEL, onKeyFetch)
    tracing.unsubscribe(handlers)
  })
  return r
}

/**
 * Checks the receive trace of every recorded delivery: per context object, start, end,
 * asyncStart, asyncEnd in that order, nothing else, the outcome (`result`) set from asyncStart on
 * and the very message published on the delivery channel.
 */
export function checkTraces (t: Test, r: Recorder): void {
  const contexts = [...new Set(r.trace.map((e) => e.context))]
  t.equal(contexts.length, r.deliveries.length, 'one trace per delivery message')
  contexts.forEach((context, i) => {
    const events = r.trace.filter((e) => e.context === context)
    t.strictSame(events.map((e) => e.event), ['start', 'end', 'asyncStart', 'asyncEnd'], `trace ${i + 1}: start, end, asyncStart, asyncEnd`)
    t.equal(events[0]!.result, undefined, `trace ${i + 1}: no result at start`)
    t.equal(events[3]!.result, r.deliveries[i], `trace ${i + 1}: its result is the delivery message`)
    t.equal(context.bodyBytes, r.deliveries[i]!.bodyBytes, `trace ${i + 1}: bodyBytes`)
  })
}
