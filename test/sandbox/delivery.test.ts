import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { verifyWebhook, WEBHOOK_EVENT_TYPES, KeyStore, type WebhookEvent } from '../../src/index.js'
import { sampleEvents } from '../../src/testing/index.js'
import { closedPortUrl, startReceiver, type Received } from './helpers/receiver.js'
import { testSandbox } from './helpers/sandbox.js'

const created = (r: Received): number => Number(/;created=(\d+);/.exec(String(r.headers['signature-input']))![1])

t.test('sample events: all ten types with the fields each carries', async (t) => {
  const events = sampleEvents(10, { customerHandle: 'acme', timestamp: 1700000000 })
  t.same(events.map((e) => e.event), WEBHOOK_EVENT_TYPES)
  for (const e of events) {
    t.equal(e.customer_handle, 'acme')
    t.equal(e.timestamp, 1700000000)
    t.type(e.request_id, 'string')
    const has = (k: string): boolean => k in e
    t.equal(has('user_agent') && has('ip'), e.event === 'open' || e.event === 'click', `${e.event}: user_agent/ip`)
    t.equal(has('url'), e.event === 'click', `${e.event}: url`)
    t.equal(has('status') && has('reason'), ['hard-bounced', 'soft-bounced', 'dropped'].includes(e.event), `${e.event}: status/reason`)
    t.equal(has('recipients') && has('campaign_id'), e.event !== 'test', `${e.event}: recipients/campaign_id`)
  }
  t.match(events[4], { status: '5.1.1', reason: 'User does not exist' })
  t.same(sampleEvents(3, { startAt: 9 }).map((e) => e.event), ['test', 'processed', 'delivered'])
})

t.test('a delivery verifies with the sandbox as the key server, and is recorded', async (t) => {
  const receiver = await startReceiver(t)
  const sandbox = await testSandbox(t, { target: receiver.url, customerHandle: 'acme' })
  const batch = await sandbox.deliver()
  t.match(batch, { batch_id: 1, status: '2xx_response', status_code: 200, event_count: 10, customer_handle: 'acme', webhook: receiver.url })
  t.equal(receiver.received.length, 1)
  const r = receiver.received[0]!
  t.equal(r.headers['content-type'], 'application/json')
  t.equal(r.headers['signature-input'], `sig_${created(r)}=("content-digest");created=${created(r)};alg="ed25519";keyid="${sandbox.keyId}"`)
  const keyStore = new KeyStore({ baseUrl: sandbox.baseUrl })
  const verified = await verifyWebhook({ payload: r.body, headers: r.headers, keyStore, customerHandles: ['acme'] })
  t.equal(verified.error, null)
  const events = verified.data as WebhookEvent[]
  t.same(events.map((e) => e.event), WEBHOOK_EVENT_TYPES, 'typed events of all ten types')
  const click = events.find((e) => e.event === 'click')
  t.ok(click?.event === 'click' && typeof click.url === 'string' && typeof click.userAgent === 'string')
  t.equal(sandbox.stats.publicKeyRequests, 1)
  t.same(sandbox.batches, [batch])

  const own = await sandbox.deliver([{ event: 'delivered', customer_handle: 'acme', timestamp: 1 }])
  t.equal(own.event_count, 1, 'given events are sent as they are')
  t.equal(receiver.received[1]!.body.toString(), '[{"event":"delivered","customer_handle":"acme","timestamp":1}]')
})

t.test('failed deliveries are retried with backoff, re-signed, each attempt recorded under its batch id', async (t) => {
  const receiver = await startReceiver(t, (_r, n) => (n === 1 ? 503 : n === 2 ? 429 : n === 4 ? 500 : 204))
  const seen: Array<[number, number, boolean, number | null]> = []
  const sandbox = await testSandbox(t, { target: receiver.url, retryDelay: 5, onAttempt: (b, d) => seen.push([b.batch_id, d.attempt, d.willRetry, d.retryInMs]) })
  const last = await sandbox.deliver()
  t.same(sandbox.batches.map((b) => [b.batch_id, b.status, b.status_code]), [[1, '5xx_response', 503], [1, '4xx_response', 429], [1, '2xx_response', 204]], 'a retry of batch 1 is batch 1')
  t.same(last, sandbox.batches[2])
  await sandbox.deliver()
  t.same(sandbox.batches.slice(3).map((b) => [b.batch_id, b.status_code]), [[2, 500], [2, 204]], 'the next delivery is batch 2, its retry too')
  t.same(seen, [[1, 1, true, 5], [1, 2, true, 10], [1, 3, false, null], [2, 1, true, 5], [2, 2, false, null]], 'onAttempt: batch, attempt, backoff')
  const [a, b, c] = receiver.received as [Received, Received, Received]
  t.equal(a.body.toString(), c.body.toString(), 'the same events each time')
  t.ok(created(a) < created(b) && created(b) < created(c), 'each retry has a later created')
  t.not(a.headers.signature, b.headers.signature, 'so a new signature')
})

t.test('attempts are bounded; a receiver that rejects every time', async (t) => {
  const receiver = await startReceiver(t, () => 400)
  const sandbox = await testSandbox(t, { target: receiver.url, maxAttempts: 2 })
  const last = await sandbox.deliver()
  t.equal(last.status, '4xx_response')
  t.equal(receiver.received.length, 2)
  t.same(sandbox.batches.map((b) => [b.status, b.status_code]), [['4xx_response', 400], ['4xx_response', 400]])
})

t.test('no response: a closed port and a receiver that hangs', async (t) => {
  const seen: Array<[number, string | null, boolean]> = []
  const sandbox = await testSandbox(t, { deliveryTimeout: 150, onAttempt: (b, d) => seen.push([b.batch_id, d.error, d.willRetry]) })
  const down = await closedPortUrl()
  const refused = await sandbox.deliver(undefined, { target: down })
  t.match(refused, { status: 'no_response', status_code: null, webhook: down })
  t.same(seen, [[1, 'ECONNREFUSED', true], [1, 'ECONNREFUSED', true], [1, 'ECONNREFUSED', false]])
  const hung = await startReceiver(t, () => 0)
  const timedOut = await sandbox.deliver(undefined, { target: hung.url })
  t.match(timedOut, { status: 'no_response', status_code: null })
  t.ok(timedOut.duration.value >= 100, 'the duration runs to the timeout')
  t.equal(seen[3]![1], 'timed out after 150 ms')
})

t.test('tampered deliveries are rejected for the expected reason and not retried', async (t) => {
  const receiver = await startReceiver(t, () => 401)
  const sandbox = await testSandbox(t, { target: receiver.url })
  const keyStore = new KeyStore({ baseUrl: sandbox.baseUrl })
  for (const [tamper, type] of [['body', 'digest_mismatch'], ['signature', 'signature_invalid'], ['expired', 'signature_expired']] as const) {
    const before = receiver.received.length
    await sandbox.deliver(undefined, { tamper })
    t.equal(receiver.received.length, before + 1, `${tamper}: one attempt`)
    const r = receiver.received.at(-1)!
    const { error } = await verifyWebhook({ payload: r.body, headers: r.headers, keyStore, customerHandles: ['sandbox'] })
    t.equal(error?.type, type, tamper)
  }
})

t.test('key rotation: new deliveries use the new key, queued ones still verify', async (t) => {
  const receiver = await startReceiver(t)
  const sandbox = await testSandbox(t, { target: receiver.url })
  await sandbox.deliver()
  const first = sandbox.keyId
  sandbox.rotateKey()
  await sandbox.deliver()
  t.match(receiver.received[0]!.headers['signature-input'], `keyid="${first}"`)
  t.match(receiver.received[1]!.headers['signature-input'], `keyid="${sandbox.keyId}"`)
  const keyStore = new KeyStore({ baseUrl: sandbox.baseUrl })
  for (const r of receiver.received) {
    t.equal((await verifyWebhook({ payload: r.body, headers: r.headers, keyStore, customerHandles: ['sandbox'] })).error, null)
  }
  t.equal(sandbox.stats.publicKeyRequests, 2, 'one fetch per key')
})

t.test('periodic sender: start, stop, and tampering every n-th delivery', async (t) => {
  const receiver = await startReceiver(t)
  const sandbox = await testSandbox(t, { target: receiver.url, rate: 50, batchSize: 2, tamperEvery: 3 })
  sandbox.start()
  while (receiver.received.length < 6) await sleep(10)
  await sandbox.stop()
  const count = receiver.received.length
  await sleep(100)
  t.equal(receiver.received.length, count, 'nothing is sent after stop()')
  t.ok(sandbox.batches.every((b) => b.event_count === 2))
  const keyStore = new KeyStore({ baseUrl: sandbox.baseUrl })
  const results = await Promise.all(receiver.received.slice(0, 6).map(async (r) => (await verifyWebhook({ payload: r.body, headers: r.headers, keyStore, customerHandles: ['sandbox'] })).error?.type ?? 'ok'))
  t.same(results, ['ok', 'ok', 'digest_mismatch', 'ok', 'ok', 'signature_invalid'])
})

t.test('close() aborts a delivery in flight and closes promptly', async (t) => {
  const hung = await startReceiver(t, () => 0)
  const sandbox = await testSandbox(t, { target: hung.url, deliveryTimeout: 60_000 })
  const pending = sandbox.deliver()
  while (hung.received.length === 0) await sleep(5)
  await sandbox.close()
  await t.rejects(pending, { message: 'The sandbox was closed before the delivery finished' })
  t.equal(sandbox.batches.length, 0, 'an aborted attempt is not recorded')
  await t.rejects(sandbox.deliver(), { message: /closed/ })
  await sandbox.close() // idempotent
})

t.test('deliver needs a target; start idles until an endpoint is enrolled', async (t) => {
  const sandbox = await testSandbox(t, { rate: 50 })
  await t.rejects(sandbox.deliver(), { name: 'TypeError', message: /deliver needs a target/ })
  t.equal(sandbox.target, null)
  sandbox.start({ count: 3 })
  await sleep(100)
  t.equal(sandbox.stats.attempts, 0, 'nothing sent while nothing is enrolled')
  const receiver = await startReceiver(t)
  t.equal(sandbox.enroll(receiver.url), true)
  await sandbox.finished()
  t.same(receiver.received.map((r) => (JSON.parse(r.body.toString()) as unknown[]).length), [3], 'the count was kept for the endpoint enrolled later')
  t.equal(sandbox.target, receiver.url, 'the first enrolled endpoint is the target')
  const other = await startReceiver(t)
  sandbox.start({ target: other.url })
  t.same(sandbox.endpoints, [receiver.url, other.url], 'start({ target }) enrolls it besides the others')
  while (other.received.length === 0) await sleep(5)
  await sandbox.stop()
  await t.rejects(sandbox.deliver(undefined, { target: 'http://192.0.2.1/x' }), { name: 'TypeError', message: /^target/ })
})

t.test('start({ count }) sends exactly count events, then finished() resolves', async (t) => {
  for (const [count, batchSize] of [[1, 10], [7, 3], [10, 5], [25, 10], [4, 1], [13, 13]] as const) {
    const receiver = await startReceiver(t, () => 204)
    const sandbox = await testSandbox(t, { target: receiver.url, rate: 100, batchSize })
    sandbox.start({ count })
    await sandbox.finished()
    const sizes = receiver.received.map((r) => (JSON.parse(r.body.toString()) as unknown[]).length)
    t.equal(sizes.reduce((a, b) => a + b, 0), count, `count ${count}, batch size ${batchSize}: exactly ${count} events`)
    const full = Math.floor(count / batchSize)
    t.same(sizes, [...Array(full).fill(batchSize), ...(count % batchSize > 0 ? [count % batchSize] : [])], 'full batches, then the rest')
    t.same(sandbox.batches.map((b) => b.event_count), sizes, 'recorded as sent')
    await sleep(30)
    t.equal(receiver.received.length, sizes.length, 'nothing more afterwards')
  }
  const idle = await testSandbox(t)
  await idle.finished() // never started: resolves at once
  t.throws(() => idle.start({ target: 'http://127.0.0.1:1/x', count: 0 }), { name: 'TypeError', message: 'count must be a positive integer' })
})

t.test('finished() waits for the retries of the last delivery', async (t) => {
  const receiver = await startReceiver(t, (_r, n) => (n === 1 ? 503 : 204))
  const sandbox = await testSandbox(t, { target: receiver.url, rate: 100, batchSize: 2, retryDelay: 20 })
  sandbox.start({ count: 2 })
  await sandbox.finished()
  t.same(sandbox.batches.map((b) => [b.batch_id, b.status_code, b.event_count]), [[1, 503, 2], [1, 204, 2]])
})

t.test("tamper 'replay': the exact bytes of the last accepted delivery, once", async (t) => {
  const receiver = await startReceiver(t, (_r, n) => (n === 2 ? 503 : 204))
  const sandbox = await testSandbox(t, { target: receiver.url })
  await t.rejects(sandbox.deliver(undefined, { tamper: 'replay' }), { name: 'TypeError', message: /deliver one first/ })
  await sandbox.deliver() // accepted
  await sandbox.deliver() // 503, then accepted, re-signed
  const replayed = await sandbox.deliver(undefined, { tamper: 'replay' })
  const [, , accepted, copy] = receiver.received as [Received, Received, Received, Received]
  t.equal(copy.body.toString(), accepted.body.toString(), 'same body')
  for (const h of ['content-digest', 'signature-input', 'signature']) t.equal(copy.headers[h], accepted.headers[h], `same ${h}`)
  t.match(replayed, { batch_id: 3, event_count: 10, status_code: 204 })
  t.equal(receiver.received.length, 4, 'not retried')
})
