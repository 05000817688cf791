import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { MailChannels, verifyWebhook } from '../../src/index.js'
import { closedPortUrl, startReceiver, type Received } from './helpers/receiver.js'
import { api, testSandbox } from './helpers/sandbox.js'

// The sandbox's webhook lifecycle routes (enroll, list, delete, validate, resend), driven
// through the library's own client and, for the error statuses, raw HTTP.

const events = (r: Received): Array<Record<string, unknown>> => JSON.parse(r.body.toString()) as Array<Record<string, unknown>>

t.test('enroll, list, delete: through the client, with the API\'s statuses', async (t) => {
  const sandbox = await testSandbox(t)
  const mc = new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl })
  t.same(await mc.webhooks.list(), { data: [], error: null })
  t.same(await mc.webhooks.enroll('http://127.0.0.1:3000/webhooks'), { data: { endpoint: 'http://127.0.0.1:3000/webhooks' }, error: null })
  t.match(await mc.webhooks.enroll('http://127.0.0.1:3000/webhooks'), { data: null, error: { type: 'conflict_error', statusCode: 409, message: /This endpoint is already enrolled\.$/ } })
  t.same((await mc.webhooks.enroll('https://hooks.example.com/mc?x=1')).error, null)
  t.same(await mc.webhooks.list(), { data: ['http://127.0.0.1:3000/webhooks', 'https://hooks.example.com/mc?x=1'], error: null }, 'kept as given, in enrolment order')
  t.same(sandbox.endpoints, ['http://127.0.0.1:3000/webhooks', 'https://hooks.example.com/mc?x=1'])
  t.equal(sandbox.target, 'http://127.0.0.1:3000/webhooks')
  t.same(await mc.webhooks.delete(), { data: { deleted: true }, error: null })
  t.same(await mc.webhooks.list(), { data: [], error: null })
  t.equal(sandbox.target, null)

  // What the client would refuse locally, the sandbox refuses too.
  const raw = async (query: string): Promise<{ status: number, body: any }> => api(sandbox, `/tx/v1/webhook${query}`, sandbox.apiKey, 'POST')
  t.match(await raw('?endpoint=http%3A%2F%2Fexample.com%2Fh'), { status: 400, body: { errors: [/must use https:/] } })
  t.match(await raw(''), { status: 400, body: { errors: [/endpoint is required/] } })
  t.match(await raw('?endpoint=a&endpoint=b'), { status: 400 })
  t.match(await api(sandbox, '/tx/v1/webhook', null), { status: 401 }, 'the API key is required')
  t.match(await api(sandbox, '/tx/v1/webhook', sandbox.apiKey, 'PUT'), { status: 405, body: { errors: ['Method not allowed.'] } })
  const res = await fetch(`${sandbox.baseUrl}/tx/v1/webhook`, { method: 'PATCH', headers: { 'x-api-key': sandbox.apiKey } })
  t.equal(res.headers.get('allow'), 'POST, GET, DELETE')
  await res.body?.cancel()
  for (let i = 0; i < 10; i++) sandbox.enroll(`https://h${i}.example/`)
  t.throws(() => sandbox.enroll('https://h10.example/'), { name: 'TypeError', message: /at most 10 endpoints/ })
})

t.test('validate: a signed test event to each endpoint, what each answered', async (t) => {
  const sandbox = await testSandbox(t, { customerHandle: 'acme' })
  const mc = new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl })
  t.match(await mc.webhooks.validate(), { data: null, error: { type: 'not_found', statusCode: 404 } }, 'nothing enrolled: 404')

  const good = await startReceiver(t, () => 200)
  const bad = await startReceiver(t, () => 503)
  const down = await closedPortUrl()
  for (const url of [good.url, bad.url, down]) await mc.webhooks.enroll(url)
  const r = await mc.webhooks.validate('check-42')
  t.same(r, {
    data: {
      allPassed: false,
      results: [
        { result: 'passed', webhook: good.url, response: { status: 200, body: '{}' } },
        { result: 'failed', webhook: bad.url, response: { status: 503, body: '{}' } },
        { result: 'failed', webhook: down, response: null },
      ],
    },
    error: null,
  })
  t.equal(good.received.length, 1)
  const sent = good.received[0]!
  t.match(events(sent), [{ event: 'test', customer_handle: 'acme', email: 'test@mailchannels.com', request_id: 'check-42', smtp_id: '<check-42@tx.mailchannels.net>' }])
  const verified = await verifyWebhook({ payload: sent.body, headers: sent.headers, baseUrl: sandbox.baseUrl })
  t.equal(verified.error, null, 'signed with a key the sandbox serves')
  t.same(sandbox.batches, [], 'validation is not recorded as a batch')
  t.equal(sandbox.stats.validations, 3)

  await mc.webhooks.delete()
  await mc.webhooks.enroll(good.url)
  t.same((await mc.webhooks.validate()).data?.allPassed, true)
  t.match(events(good.received[1]!)[0], { event: 'test', request_id: /^[A-Za-z0-9_-]{20}$/ }, 'a request id made up when none is given')
  t.match(await api(sandbox, '/tx/v1/webhook/validate', sandbox.apiKey, 'POST'), { status: 200, body: { all_passed: true } }, 'no body at all is fine too')
  const long = await fetch(`${sandbox.baseUrl}/tx/v1/webhook/validate`, { method: 'POST', headers: { 'x-api-key': sandbox.apiKey, 'content-type': 'application/json' }, body: JSON.stringify({ request_id: 'x'.repeat(29) }) })
  t.equal(long.status, 400)
  t.match(await long.json(), { errors: [/request_id must be a string of 1 to 28 characters/] })
  const notJson = await fetch(`${sandbox.baseUrl}/tx/v1/webhook/validate`, { method: 'POST', headers: { 'x-api-key': sandbox.apiKey }, body: '{' })
  t.equal(notJson.status, 400)
  await notJson.body?.cancel()
  const huge = await fetch(`${sandbox.baseUrl}/tx/v1/webhook/validate`, { method: 'POST', headers: { 'x-api-key': sandbox.apiKey }, body: 'x'.repeat(20_000) })
  t.equal(huge.status, 413)
  await huge.body?.cancel()
})

t.test('failed batches are listed with the right status; resend re-signs the recorded batch and records the outcome', async (t) => {
  const sandbox = await testSandbox(t, { maxAttempts: 1, customerHandle: 'acme' })
  const mc = new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl })
  let answer = 500
  const receiver = await startReceiver(t, () => answer)
  const down = await closedPortUrl()
  const b4 = await sandbox.deliver(undefined, { target: receiver.url.replace('/webhooks', '/missing') })
  const b5 = await sandbox.deliver(undefined, { target: receiver.url })
  const none = await sandbox.deliver(undefined, { target: down })
  answer = 204
  const ok = await sandbox.deliver(undefined, { target: receiver.url })
  t.match([b4, b5, none, ok], [{ status: '5xx_response', status_code: 500 }, { status: '5xx_response', status_code: 500 }, { status: 'no_response', status_code: null }, { status: '2xx_response', status_code: 204 }])
  answer = 404
  const notFound = await sandbox.deliver(undefined, { target: receiver.url })
  t.match(notFound, { status: '4xx_response', status_code: 404 })
  const failed = await mc.webhooks.batches({ statuses: ['4xx', '5xx', 'no_response'] })
  t.same(failed.data?.map((b) => [b.batchId, b.status, b.statusCode]), [[1, '5xx_response', 500], [2, '5xx_response', 500], [3, 'no_response', null], [5, '4xx_response', 404]])

  answer = 200
  const before = receiver.received.length
  const original = receiver.received.find((r) => r.url === '/webhooks' && events(r).length === 10 && r === receiver.received[1])!
  const resent = await mc.webhooks.resendBatch(2, { customerHandle: 'acme' })
  t.match(resent, { data: { batchId: 2, customerHandle: 'acme', webhook: receiver.url, eventCount: 10, statusCode: 200, durationInMs: Number }, error: null })
  t.equal(receiver.received.length, before + 1)
  const again = receiver.received.at(-1)!
  t.same(events(again), events(original), 'the same events')
  t.not(again.headers.signature, original.headers.signature, 'signed afresh')
  t.equal((await verifyWebhook({ payload: again.body, headers: again.headers, baseUrl: sandbox.baseUrl })).error, null)
  const rows = sandbox.batches.filter((b) => b.batch_id === 2)
  t.match(rows, [{ status: '5xx_response' }, { status: '2xx_response', status_code: 200 }], 'the resend is recorded under the batch id')

  // The resend of a batch whose endpoint still fails: the API call succeeds, the status says so.
  const stillDown = await mc.webhooks.resendBatch(3)
  t.match(stillDown, { data: { batchId: 3, statusCode: null, durationInMs: null, webhook: down }, error: null })
  t.equal(sandbox.batches.filter((b) => b.batch_id === 3).length, 2)
  t.equal(sandbox.stats.resends, 2)

  t.match(await mc.webhooks.resendBatch(99), { data: null, error: { type: 'not_found', statusCode: 404 } })
  t.match(await mc.webhooks.resendBatch(2, { customerHandle: 'someone-else' }), { error: { statusCode: 404 } }, 'another customer\'s handle')
  t.match(await api(sandbox, '/tx/v1/webhook-batch/abc/resend', sandbox.apiKey, 'POST'), { status: 400, body: { errors: ['The batch id must be a positive integer.'] } })
  t.match(await api(sandbox, '/tx/v1/webhook-batch/2/resend', null, 'POST'), { status: 401 })
  t.match(await api(sandbox, '/tx/v1/webhook-batch/2/resend', sandbox.apiKey, 'GET'), { status: 405 })
  t.equal(await sandbox.resend(1234), null)
  await t.rejects(sandbox.resend(0), { name: 'TypeError' })
})

t.test('the periodic sender delivers each batch to every enrolled endpoint', async (t) => {
  const sandbox = await testSandbox(t, { rate: 50, batchSize: 3 })
  const a = await startReceiver(t)
  const b = await startReceiver(t)
  sandbox.enroll(a.url)
  sandbox.enroll(b.url)
  sandbox.start({ count: 6 })
  await sandbox.finished()
  t.equal(a.received.length, 2)
  t.equal(b.received.length, 2)
  t.same(a.received.map(events), b.received.map(events), 'the same events to both')
  t.same(new Set(sandbox.batches.map((x) => x.batch_id)).size, 4, 'one batch id per endpoint and tick')
  sandbox.removeEndpoints()
  sandbox.start({ count: 3 })
  await sleep(100)
  t.equal(sandbox.stats.attempts, 4, 'nothing is sent after every endpoint was removed')
  await sandbox.stop()
})
