import t from 'tap'
import { filterBatches, parseApiDate, parseBatchQuery, type SandboxBatch } from '../../src/testing/sandbox/batch-query.js'
import { MailChannels } from '../../src/index.js'
import { closedPortUrl, startReceiver } from './helpers/receiver.js'
import { api, testSandbox } from './helpers/sandbox.js'

const NOW = Date.UTC(2026, 0, 10, 12, 0, 0)
const batch = (id: number, createdAt: string, status: SandboxBatch['status'] = '2xx_response', webhook = 'https://a.example/h'): SandboxBatch => ({
  batch_id: id,
  created_at: createdAt,
  customer_handle: 'sandbox',
  duration: { unit: 'milliseconds', value: 1 },
  event_count: 1,
  status,
  status_code: status === 'no_response' ? null : Number(status[0]) * 100,
  webhook,
})
const list = (q: string): number[] | string[] => {
  const parsed = parseBatchQuery(new URLSearchParams(q), NOW)
  if (parsed.errors !== null) return parsed.errors
  return filterBatches(BATCHES, parsed.query).map((b) => b.batch_id)
}
const BATCHES = [
  batch(1, '2026-01-01T00:00:00.000Z'), // 9.5 days ago: outside the default 3 days
  batch(2, '2026-01-08T00:00:00.000Z', '4xx_response'),
  batch(3, '2026-01-09T00:00:00.000Z', '5xx_response', 'https://b.example/h'),
  batch(4, '2026-01-09T23:59:59.000Z', 'no_response'),
  batch(5, '2026-01-10T11:00:00.000Z'),
]

t.test('dates: the two documented formats only, real calendar dates', async (t) => {
  t.equal(parseApiDate('2026-01-09'), Date.UTC(2026, 0, 9))
  t.equal(parseApiDate('2026-01-09T23:59:59Z'), Date.UTC(2026, 0, 9, 23, 59, 59))
  for (const bad of ['2026-02-30', '2026-13-01', '2026-01-09T24:00:00Z', '2026-01-09T12:00:00.000Z', '2026-01-09T12:00:00+02:00', 'January 1, 2026', '', '2026-1-9']) {
    t.equal(parseApiDate(bad), null, bad)
  }
})

t.test('filtering', async (t) => {
  t.same(list(''), [2, 3, 4, 5], 'default range: the last 3 days')
  t.same(list('created_after=2026-01-09'), [3, 4, 5], 'created_after is inclusive')
  t.same(list('created_after=2025-12-20&created_before=2026-01-09'), [1, 2], 'created_before is exclusive')
  t.same(list('created_after=2026-01-09T23:59:59Z&created_before=2026-01-10T11:00:00Z'), [4], 'date-time bounds, inclusive/exclusive to the second')
  t.same(list('created_before=2026-01-09'), [2], 'only created_before: the 3 days before it')
  t.same(list('statuses=4xx,no_response'), [2, 4], 'filter 4xx matches 4xx_response; no_response as is')
  t.same(list('statuses=4xx%2C5xx'), [2, 3], 'percent-encoded comma')
  t.same(list('webhook=https://b.example/h'), [3], 'webhook exact match')
  t.same(list('webhook=https://b.example/'), [], 'webhook is not a prefix match')
  t.same(list('limit=2'), [2, 3])
  t.same(list('limit=2&offset=2'), [4, 5])
  t.same(list('offset=10'), [])
  t.same(list('statuses='), [2, 3, 4, 5], 'empty statuses: no filter')
})

t.test('validation: the errors a 400 carries', async (t) => {
  t.same(list('limit=0'), ['limit must be an integer between 1 and 500.'])
  t.same(list('limit=501'), ['limit must be an integer between 1 and 500.'])
  t.same(list('limit=1.5'), ['limit must be an integer between 1 and 500.'])
  t.same(list('limit=500'), [2, 3, 4, 5])
  t.same(list('offset=-1'), ['offset must be an integer greater than or equal to 0.'])
  t.same(list('statuses=6xx'), ["statuses may contain only '1xx', '2xx', '3xx', '4xx', '5xx' and 'no_response'."])
  t.same(list('statuses=4xx,4xx'), ['statuses must be unique.'])
  t.same(list('statuses=4xx&statuses=5xx'), ['statuses must be given once, as a comma-separated list (statuses=4xx,5xx), not as repeated keys.'])
  t.same(list('created_after=2026-02-30'), ['created_after must be a date in the format YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC).'])
  t.same(list('created_before=not-a-date'), ['created_before must be a date in the format YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC).'])
  t.same(list('created_after=2026-01-09&created_before=2026-01-09'), ['created_before must be later than created_after.'])
  t.same(list('created_after=2026-01-01&created_before=2026-02-01'), [1, 2, 3, 4, 5], 'exactly 31 days passes')
  t.same(list('created_after=2026-01-01&created_before=2026-02-01T00:00:01Z'), ['The range between created_after and created_before must not exceed 31 days.'])
  t.same(list('limit=0&offset=-1&statuses=bad'), [
    "statuses may contain only '1xx', '2xx', '3xx', '4xx', '5xx' and 'no_response'.",
    'limit must be an integer between 1 and 500.',
    'offset must be an integer greater than or equal to 0.',
  ], 'every problem is reported')
})

t.test('GET /tx/v1/webhook-batch over HTTP', async (t) => {
  const ok = await startReceiver(t, () => 200)
  const sandbox = await testSandbox(t, { target: ok.url, maxAttempts: 1 })
  const down = await closedPortUrl()
  await sandbox.deliver()
  await sandbox.deliver(undefined, { target: down })

  t.same(await api(sandbox, '/tx/v1/webhook-batch', null), { status: 401, body: { errors: ['Missing or invalid X-Api-Key header.'] } }, 'no API key: 401')
  t.same(await api(sandbox, '/tx/v1/webhook-batch', 'wrong'), { status: 401, body: { errors: ['Missing or invalid X-Api-Key header.'] } }, 'wrong API key: 401')
  t.same(await api(sandbox, '/tx/v1/webhook-batch?limit=0'), { status: 400, body: { errors: ['limit must be an integer between 1 and 500.'] } })

  const all = await api(sandbox, '/tx/v1/webhook-batch')
  t.equal(all.status, 200)
  t.same(all.body.webhook_batches, sandbox.batches, 'the recorded batches, in wire format')
  t.match(all.body.webhook_batches[0], {
    batch_id: 1, customer_handle: 'sandbox', duration: { unit: 'milliseconds', value: Number }, event_count: 10, status: '2xx_response', status_code: 200, webhook: ok.url,
  })
  t.match(all.body.webhook_batches[0].created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  const failed = await api(sandbox, '/tx/v1/webhook-batch?statuses=no_response')
  t.same(failed.body.webhook_batches.map((b: SandboxBatch) => [b.status, b.status_code, b.webhook]), [['no_response', null, down]])

  const client = new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl })
  const viaClient = await client.webhooks.batches({ statuses: ['2xx'] })
  t.same(viaClient.data?.map((b) => [b.batchId, b.status]), [[1, '2xx_response']], 'the API client lists them')
  const denied = await new MailChannels('wrong-key', { baseUrl: sandbox.baseUrl }).webhooks.batches()
  t.equal(denied.error?.statusCode, 401)
  t.equal(denied.error?.type, 'authentication_error')
})

t.test('public-key endpoint and rotation', async (t) => {
  const sandbox = await testSandbox(t)
  const first = sandbox.publicKey
  const firstId = sandbox.keyId
  t.match(first, /^MCowBQYDK2VwAyEA[A-Za-z0-9+/]{43}=$/)
  t.same(await api(sandbox, `/tx/v1/webhook/public-key?id=${firstId}`, null), { status: 200, body: { id: firstId, key: first } }, 'no API key needed')
  t.same(await api(sandbox, '/tx/v1/webhook/public-key?id=nope', null), { status: 404, body: { errors: ['Key not found.'] } })
  t.same(await api(sandbox, '/tx/v1/webhook/public-key', null), { status: 400, body: { errors: ['id is required.'] } })
  t.same(await api(sandbox, '/sandbox/rotate-key', null, 'POST'), { status: 401, body: { errors: ['Missing or invalid X-Api-Key header.'] } })
  const rotated = await api(sandbox, '/sandbox/rotate-key', sandbox.apiKey, 'POST')
  t.same(rotated, { status: 200, body: { id: sandbox.keyId, key: sandbox.publicKey } })
  t.not(sandbox.keyId, firstId, 'a new key id')
  t.not(sandbox.publicKey, first, 'and a new key')
  const third = sandbox.rotateKey()
  t.equal(third.keyId, sandbox.keyId)
  t.same((await api(sandbox, `/tx/v1/webhook/public-key?id=${firstId}`, null)).body, { id: firstId, key: first }, 'old keys stay served')
  t.equal(sandbox.stats.publicKeyRequests, 4)
  t.same(await api(sandbox, '/nope'), { status: 404, body: { errors: ['Not found.'] } })
  t.same(await api(sandbox, '/tx/v1/webhook-batch', sandbox.apiKey, 'DELETE'), { status: 405, body: { errors: ['Method not allowed.'] } })
  t.same(await api(sandbox, '/sandbox/deliver', sandbox.apiKey, 'POST'), { status: 409, body: { errors: ['The sandbox has no endpoint enrolled to deliver to.'] } })
})

t.test('options are validated once, with the option named', async (t) => {
  const { createSandbox } = await import('../../src/testing/index.js')
  await t.rejects(createSandbox({ target: 'http://example.com/hook' }), { name: 'TypeError', message: /^target must be an http: URL on a loopback host/ })
  await t.rejects(createSandbox({ target: 'ftp://127.0.0.1/' }), { name: 'TypeError', message: /^target/ })
  await t.rejects(createSandbox({ batchSize: 0 }), { name: 'TypeError', message: 'batchSize must be an integer from 1 to 1000' })
  await t.rejects(createSandbox({ rate: 0 }), { name: 'TypeError', message: /^rate must be a number/ })
  await t.rejects(createSandbox({ customerHandle: '' }), { name: 'TypeError', message: /^customerHandle/ })
  await t.rejects(createSandbox({ maxAttempts: 0 }), { name: 'TypeError', message: /^maxAttempts/ })
  const https = await testSandbox(t, { target: 'https://hooks.example.com/mc' })
  t.equal(https.target, 'https://hooks.example.com/mc', 'https: targets are allowed anywhere')
})

t.test('POST /sandbox/deliver: a tampered delivery on request; a replay needs an earlier delivery', async (t) => {
  const receiver = await startReceiver(t, () => 204)
  const sandbox = await testSandbox(t, { target: receiver.url })
  t.same(await api(sandbox, '/sandbox/deliver?tamper=replay', sandbox.apiKey, 'POST'), { status: 409, body: { errors: ["tamper 'replay' sends an earlier delivery again: deliver one first."] } })
  t.same(await api(sandbox, '/sandbox/deliver?tamper=nope', sandbox.apiKey, 'POST'), { status: 400, body: { errors: ['tamper must be one of body, signature, expired, replay.'] } })
  t.match(await api(sandbox, '/sandbox/deliver', sandbox.apiKey, 'POST'), { status: 200, body: { batch_id: 1, status_code: 204 } })
  t.match(await api(sandbox, '/sandbox/deliver?tamper=replay', sandbox.apiKey, 'POST'), { status: 200, body: { batch_id: 2, status_code: 204 } })
  t.equal(receiver.received[1]!.headers.signature, receiver.received[0]!.headers.signature, 'the exact copy')
})
