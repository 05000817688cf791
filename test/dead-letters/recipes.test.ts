// The metrics and tracing recipes (examples/metrics) count and trace dead letters: parked,
// retried and discarded through a real router, as prom-client series and OpenTelemetry spans.
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { Registry } from 'prom-client'
import t from 'tap'
import { MemoryDeadLetterStore, MemoryClaimStore, WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { ev } from '../dispatch/helpers/events.js'

/** Parks two events (a bounce and an open), retries the bounce once fixed, discards the open. */
async function traffic (): Promise<void> {
  let broken = true
  const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore(), deadLetters: { store: new MemoryDeadLetterStore(), after: 1 } })
    .on(['hard-bounced', 'open'], () => { if (broken) throw new Error('down') })
  const bounce = ev('hard-bounced', 1)
  const open = ev('open', 2)
  await router.dispatch([bounce, open])
  broken = false
  await router.retryDeadLetter(eventFingerprint(bounce))
  await router.discardDeadLetter(eventFingerprint(open))
}

t.test('prom-client: mailchannels_webhook_dead_letters_total{action,type}', async (t) => {
  const { collectWebhookMetrics } = await import('../../examples/metrics/prometheus.js')
  const registry = new Registry()
  const stop = collectWebhookMetrics(registry)
  await traffic()
  const text = await registry.metrics()
  stop()
  t.match(text, /# TYPE mailchannels_webhook_dead_letters_total counter/)
  t.match(text, /mailchannels_webhook_dead_letters_total\{action="parked",type="hard-bounced"\} 1/)
  t.match(text, /mailchannels_webhook_dead_letters_total\{action="parked",type="open"\} 1/)
  t.match(text, /mailchannels_webhook_dead_letters_total\{action="retried",type="hard-bounced"\} 1/)
  t.match(text, /mailchannels_webhook_dead_letters_total\{action="discarded",type="open"\} 1/)
  t.notMatch(text, /fingerprint/, 'no fingerprint label: unbounded')
})

t.test('OpenTelemetry: a mailchannels.webhook.dead_letter span per action, an error when parked', async (t) => {
  const { traceWebhookDeliveries } = await import('../../examples/metrics/opentelemetry.js')
  const exporter = new InMemorySpanExporter()
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  t.teardown(() => provider.shutdown())
  const stop = traceWebhookDeliveries(provider.getTracer('dead-letters'))
  await traffic()
  stop()
  const spans = exporter.getFinishedSpans().filter((s) => s.name === 'mailchannels.webhook.dead_letter')
  t.same(spans.map((s) => [s.attributes['mailchannels.webhook.dead_letter.action'], s.attributes['mailchannels.webhook.event_type'], s.status.code]),
    [['parked', 'hard-bounced', 2], ['parked', 'open', 2], ['retried', 'hard-bounced', 0], ['discarded', 'open', 0]])
})
