// The metrics and tracing recipes (examples/metrics), run against real deliveries: the
// prom-client metrics text and the OpenTelemetry spans they produce. The examples import the
// package by name, so they run against the built package (dist/), built here when it is missing.
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { SpanStatusCode } from '@opentelemetry/api'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { Registry } from 'prom-client'
import t, { type Test } from 'tap'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { createWebhookHandler } from '../../src/web/index.js'
import { serveKeys, startKeyServer } from '../helpers/key-server.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const keys = generateSigningKeyPair()
const CUSTOMER = 'acct_recipe'

t.before(() => {
  // `npm test` builds first; when run alone, build once if dist/ predates the diagnostics channels.
  const index = path.join(ROOT, 'dist', 'index.js')
  if (!existsSync(index) || !readFileSync(index, 'utf8').includes('RECEIVE_TRACING_CHANNEL')) {
    spawnSync(path.join(ROOT, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'pipe' })
  }
})

let n = 0
const sign = (count: number, keyId = 'recipe-key'): SignedWebhook => signWebhook({
  events: Array.from({ length: count }, () => ({ event: 'delivered', customer_handle: CUSTOMER, timestamp: 1700000000, request_id: `m${++n}` })),
  privateKey: keys.privateKey,
  keyId,
})

/**
 * Real deliveries through the web handler, its key fetched from a loopback key server:
 * accepted (1 and 2 events, the handler waiting 30 ms), a duplicate, a tampered body, an unknown
 * key id (a key fetch answered 404) and a handler that throws.
 */
async function traffic (t: Test): Promise<void> {
  const server = await startKeyServer(serveKeys({ 'recipe-key': keys.publicKey }))
  t.teardown(() => server.close())
  let fail = false
  const handler = createWebhookHandler({
    customerHandles: [CUSTOMER],
    baseUrl: server.baseUrl,
    logger: { debug () {}, info () {}, warn () {}, error () {} },
    onEvents: async () => {
      await sleep(30)
      if (fail) throw new Error('handler down')
    },
  })
  const post = async (signed: SignedWebhook, body: Uint8Array = signed.body): Promise<number> =>
    (await handler(new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body }))).status
  const one = sign(1)
  t.equal(await post(one), 204)
  t.equal(await post(sign(2)), 204)
  t.equal(await post(one), 200, 'duplicate')
  const other = sign(1)
  const tampered = new Uint8Array(other.body)
  tampered[tampered.length - 3] = tampered[tampered.length - 3]! ^ 1
  t.equal(await post(other, tampered), 401)
  t.equal(await post(sign(1, 'unknown-key')), 401)
  fail = true
  t.equal(await post(sign(3)), 500)
}

t.test('prom-client: the deliveries counter, the duration histograms and the key-fetch metrics', async (t) => {
  const { collectWebhookMetrics } = await import('../../examples/metrics/prometheus.js')
  const registry = new Registry()
  const stop = collectWebhookMetrics(registry)
  await traffic(t)
  const text = await registry.metrics()
  const value = (series: string): number | undefined => {
    const line = text.split('\n').find((l) => l.startsWith(series + ' '))
    return line === undefined ? undefined : Number(line.slice(series.length + 1))
  }
  t.match(text, /# TYPE mailchannels_webhook_deliveries_total counter/)
  t.equal(value('mailchannels_webhook_deliveries_total{outcome="accepted",type=""}'), 2)
  t.equal(value('mailchannels_webhook_deliveries_total{outcome="duplicate",type=""}'), 1)
  t.equal(value('mailchannels_webhook_deliveries_total{outcome="rejected",type="digest_mismatch"}'), 1)
  t.equal(value('mailchannels_webhook_deliveries_total{outcome="rejected",type="unknown_key"}'), 1)
  t.equal(value('mailchannels_webhook_deliveries_total{outcome="failed",type="handler_error"}'), 1)
  t.equal(value('mailchannels_webhook_events_total{outcome="accepted"}'), 3)
  t.equal(value('mailchannels_webhook_events_total{outcome="failed"}'), 3)
  t.match(text, /# TYPE mailchannels_webhook_delivery_duration_seconds histogram/)
  t.equal(value('mailchannels_webhook_delivery_duration_seconds_count{outcome="accepted"}'), 2)
  t.equal(value('mailchannels_webhook_delivery_duration_seconds_count{outcome="rejected"}'), 2)
  t.equal(value('mailchannels_webhook_handler_duration_seconds_count{outcome="accepted"}'), 2)
  t.ok(value('mailchannels_webhook_handler_duration_seconds_sum{outcome="accepted"}')! >= 0.05, 'two 30 ms handlers in the handler histogram\'s sum')
  t.equal(value('mailchannels_webhook_handler_duration_seconds_count{outcome="duplicate"}'), undefined, 'no handler time for a duplicate')
  t.equal(value('mailchannels_webhook_key_fetches_total{outcome="fetched",cause=""}'), 1)
  t.equal(value('mailchannels_webhook_key_fetches_total{outcome="unknown_key",cause="not_found"}'), 1)
  t.equal(value('mailchannels_webhook_key_fetch_duration_seconds_count{outcome="fetched"}'), 1)
  t.notMatch(text, /recipe-key|unknown-key/, 'no key id in any label')
  stop()
  t.notMatch(await registry.metrics(), /mailchannels_webhook/, 'stop() removes the metrics')
})

t.test('OpenTelemetry: a span per delivery with its handler as a child, and a span per key fetch', async (t) => {
  const { traceWebhookDeliveries } = await import('../../examples/metrics/opentelemetry.js')
  const exporter = new InMemorySpanExporter()
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  const stop = traceWebhookDeliveries(provider.getTracer('recipe-test'))
  t.teardown(() => provider.shutdown())
  await traffic(t)
  stop()
  const spans = exporter.getFinishedSpans()
  const named = (name: string): ReadableSpan[] => spans.filter((s) => s.name === name)
  const receive = named('mailchannels.webhook.receive')
  t.strictSame(receive.map((s) => [s.attributes['mailchannels.webhook.outcome'], s.attributes['error.type'], s.attributes['http.response.status_code']]), [
    ['accepted', undefined, 204],
    ['accepted', undefined, 204],
    ['duplicate', undefined, 200],
    ['rejected', 'digest_mismatch', 401],
    ['rejected', 'unknown_key', 401],
    ['failed', 'handler_error', 500],
  ])
  t.strictSame(receive.map((s) => s.attributes['mailchannels.webhook.event_count']), [1, 2, 1, 0, 0, 3])
  t.strictSame(receive.map((s) => s.attributes['mailchannels.webhook.key_id']), ['recipe-key', 'recipe-key', 'recipe-key', undefined, undefined, 'recipe-key'], 'the key id of verified deliveries only')
  t.strictSame(receive.map((s) => s.status.code), [0, 0, 0, 0, 0, SpanStatusCode.ERROR].map((c) => c === 0 ? SpanStatusCode.UNSET : c), 'a 5xx is an error, a 4xx is not')

  const handlers = named('mailchannels.webhook.handler')
  t.equal(handlers.length, 3, 'a handler span for each delivery whose handler ran')
  for (const h of handlers) {
    const parent = receive.find((s) => s.spanContext().spanId === h.parentSpanContext?.spanId)
    t.ok(parent !== undefined, 'the handler span is a child of its delivery span')
    const ms = (time: readonly [number, number]): number => time[0] * 1000 + time[1] / 1e6
    t.ok(ms(h.duration) >= 25, `it lasts the handler's 30 ms wait (${ms(h.duration).toFixed(1)} ms)`)
    t.ok(ms(h.duration) <= ms(parent!.duration) + 2, 'within its delivery span')
  }

  const fetches = named('mailchannels.webhook.key_fetch')
  t.strictSame(fetches.map((s) => [s.attributes['mailchannels.webhook.key_id'], s.attributes['mailchannels.webhook.key_fetch.outcome'], s.attributes['http.response.status_code'], s.status.code]), [
    ['recipe-key', 'fetched', undefined, SpanStatusCode.UNSET],
    ['unknown-key', 'unknown_key', 404, SpanStatusCode.ERROR],
  ])
  t.equal(fetches[1]!.attributes['error.type'], 'not_found')
})
