// Prometheus metrics for the MailChannels webhook receivers, with prom-client. The receivers and
// the key store publish on node:diagnostics_channel; this turns the messages into metrics.
// Call it once at startup, then serve the registry:
//
//   import { register } from 'prom-client'
//   import { collectWebhookMetrics } from './metrics/prometheus.js'
//   collectWebhookMetrics(register)
//   app.get('/metrics', async (_request, reply) => reply.type(register.contentType).send(await register.metrics()))
import diagnosticsChannel from 'node:diagnostics_channel'
import { Counter, Histogram, register as defaultRegistry, type Registry } from 'prom-client'
import { DEAD_LETTER_DIAGNOSTICS_CHANNEL, DELIVERY_DIAGNOSTICS_CHANNEL, KEY_FETCH_DIAGNOSTICS_CHANNEL, type DeadLetterMessage, type KeyFetchMessage, type WebhookDeliveryMessage } from 'mailchannels-webhooks'

/**
 * Registers the webhook metrics in `registry` and feeds them from the diagnostics channels.
 * Returns a function that stops collecting and removes the metrics.
 * Labels are the library's fixed codes only: never the key id, which a rejected delivery's sender chooses.
 */
export function collectWebhookMetrics (registry: Registry = defaultRegistry): () => void {
  const registers = [registry]
  const deliveries = new Counter({
    name: 'mailchannels_webhook_deliveries_total',
    help: 'MailChannels webhook deliveries, by outcome (accepted, duplicate, rejected, failed) and error type.',
    labelNames: ['outcome', 'type'] as const,
    registers,
  })
  const events = new Counter({
    name: 'mailchannels_webhook_events_total',
    help: 'Events in verified MailChannels webhook deliveries, by delivery outcome.',
    labelNames: ['outcome'] as const,
    registers,
  })
  const deliveryDuration = new Histogram({
    name: 'mailchannels_webhook_delivery_duration_seconds',
    help: 'Time from the whole body in hand to the answer: verification, replay claim and handler.',
    labelNames: ['outcome'] as const,
    registers,
  })
  const handlerDuration = new Histogram({
    name: 'mailchannels_webhook_handler_duration_seconds',
    help: 'Time the handler of a verified delivery took to answer.',
    labelNames: ['outcome'] as const,
    registers,
  })
  const keyFetches = new Counter({
    name: 'mailchannels_webhook_key_fetches_total',
    help: 'Requests to the MailChannels public-key endpoint, by outcome (fetched, unknown_key, failed) and cause.',
    labelNames: ['outcome', 'cause'] as const,
    registers,
  })
  const keyFetchDuration = new Histogram({
    name: 'mailchannels_webhook_key_fetch_duration_seconds',
    help: 'Time a request to the MailChannels public-key endpoint took.',
    labelNames: ['outcome'] as const,
    registers,
  })
  const deadLetters = new Counter({
    name: 'mailchannels_webhook_dead_letters_total',
    help: 'Events parked as dead letters, retried successfully or discarded (router option deadLetters), by event type.',
    labelNames: ['action', 'type'] as const,
    registers,
  })

  const onDelivery = (message: unknown): void => {
    const m = message as WebhookDeliveryMessage
    deliveries.inc({ outcome: m.outcome, type: m.type ?? '' })
    if (m.eventCount > 0) events.inc({ outcome: m.outcome }, m.eventCount)
    deliveryDuration.observe({ outcome: m.outcome }, (m.verifyDurationMs + m.handlerDurationMs) / 1000)
    if (m.outcome === 'accepted' || m.outcome === 'failed') handlerDuration.observe({ outcome: m.outcome }, m.handlerDurationMs / 1000)
  }
  const onKeyFetch = (message: unknown): void => {
    const m = message as KeyFetchMessage
    keyFetches.inc({ outcome: m.outcome, cause: m.cause ?? '' })
    keyFetchDuration.observe({ outcome: m.outcome }, m.durationMs / 1000)
  }
  // Alert on parked: each one is an event whose effect has not happened (docs/events.md).
  const onDeadLetter = (message: unknown): void => {
    const m = message as DeadLetterMessage
    deadLetters.inc({ action: m.action, type: m.type })
  }
  diagnosticsChannel.subscribe(DELIVERY_DIAGNOSTICS_CHANNEL, onDelivery)
  diagnosticsChannel.subscribe(KEY_FETCH_DIAGNOSTICS_CHANNEL, onKeyFetch)
  diagnosticsChannel.subscribe(DEAD_LETTER_DIAGNOSTICS_CHANNEL, onDeadLetter)

  return () => {
    diagnosticsChannel.unsubscribe(DELIVERY_DIAGNOSTICS_CHANNEL, onDelivery)
    diagnosticsChannel.unsubscribe(KEY_FETCH_DIAGNOSTICS_CHANNEL, onKeyFetch)
    diagnosticsChannel.unsubscribe(DEAD_LETTER_DIAGNOSTICS_CHANNEL, onDeadLetter)
    for (const metric of [deliveries, events, deliveryDuration, handlerDuration, keyFetches, keyFetchDuration, deadLetters]) {
      registry.removeSingleMetric((metric as unknown as { name: string }).name)
    }
  }
}
