import t, { type Test } from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { AttemptDetail } from '../../src/testing/index.js'
import { endpointAnswer } from '../../src/testing/sandbox/answer.js'
import { closedPortUrl } from './helpers/receiver.js'
import { testSandbox } from './helpers/sandbox.js'

// What the sandbox tells of an endpoint's answer to a failed attempt (`onAttempt`'s
// `detail.answer`, the deliver route's `answer` and `error`), and a delivery without retries.

/** A receiver answering every POST with this status and body. */
async function answering (t: Test, status: number, body: string, type = 'application/json'): Promise<string> {
  const server = http.createServer((req, res) => { req.resume(); req.on('end', () => res.writeHead(status, { 'content-type': type }).end(body)) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`
}

t.test('endpointAnswer: the code and message of the usual JSON error shapes, bounded; null otherwise', async (t) => {
  t.same(endpointAnswer(JSON.stringify({ statusCode: 503, code: 'key_unavailable', error: 'Service Unavailable', message: 'no key' })), { code: 'key_unavailable', message: 'no key' })
  t.same(endpointAnswer('{"type":"invalid_signature","message":"bad"}'), { code: 'invalid_signature', message: 'bad' })
  t.same(endpointAnswer('{"error":"boom"}'), { code: null, message: 'boom' })
  t.same(endpointAnswer('{"code":"x"}'), { code: 'x', message: null })
  for (const body of [null, '', 'Service Unavailable', '[1]', '{}', '{"code":5,"message":[]}', '{"ok":true}', '"text"']) t.equal(endpointAnswer(body), null, String(body))
  const long = endpointAnswer(JSON.stringify({ code: 'c'.repeat(500), message: 'm'.repeat(5000) }))!
  t.equal(long.code!.length, 100)
  t.equal(long.message!.length, 1000)
})

t.test('onAttempt: detail.answer holds what the endpoint said; deliver({ maxAttempts: 1 }) makes one attempt', async (t) => {
  const details: AttemptDetail[] = []
  const target = await answering(t, 503, JSON.stringify({ statusCode: 503, code: 'key_unavailable', error: 'Service Unavailable', message: 'The signing key could not be fetched' }))
  const sandbox = await testSandbox(t, { target, onAttempt: (_b, d) => details.push(d) })
  const batch = await sandbox.deliver(undefined, { maxAttempts: 1 })
  t.equal(batch.status_code, 503)
  t.equal(details.length, 1, 'not retried')
  t.match(details[0], { attempt: 1, willRetry: false, answer: { code: 'key_unavailable', message: 'The signing key could not be fetched' } })
  await sandbox.deliver()
  t.equal(details.length, 4, 'the sandbox\'s own maxAttempts otherwise (3)')
  t.ok(details.every((d) => d.answer?.code === 'key_unavailable'))
  await t.rejects(sandbox.deliver(undefined, { maxAttempts: 0 }), { name: 'TypeError', message: 'maxAttempts must be an integer from 1 to 10' })

  const ok = await answering(t, 200, '{"code":"fine","message":"stored"}')
  const accepted = await testSandbox(t, { target: ok, onAttempt: (_b, d) => details.push(d) })
  await accepted.deliver()
  t.equal(details.at(-1)!.answer, null, 'an accepted attempt has no error answer')
})

t.test('POST /sandbox/deliver: attempts=1, and the answer and error of the last attempt', async (t) => {
  const target = await answering(t, 401, JSON.stringify({ statusCode: 401, code: 'digest_mismatch', error: 'Unauthorized', message: 'Content-Digest does not match' }))
  const sandbox = await testSandbox(t, { target })
  const post = async (query: string): Promise<{ status: number, body: any }> => {
    const res = await fetch(`${sandbox.baseUrl}/sandbox/deliver?${query}`, { method: 'POST', headers: { 'x-api-key': sandbox.apiKey } })
    return { status: res.status, body: await res.json() }
  }
  const refused = await post('types=delivered,delivered&attempts=1')
  t.equal(refused.status, 200)
  t.match(refused.body, { batch_id: 1, event_count: 2, status_code: 401, status: '4xx_response', answer: { code: 'digest_mismatch', message: 'Content-Digest does not match' }, error: null })
  t.equal(sandbox.batches.length, 1, 'one attempt')
  for (const bad of ['0', '11', 'x', '1.5']) t.match(await post(`attempts=${bad}`), { status: 400, body: { errors: ['attempts must be an integer from 1 to 10.'] } }, bad)

  const down = await testSandbox(t, { target: await closedPortUrl() })
  const res = await fetch(`${down.baseUrl}/sandbox/deliver?attempts=1`, { method: 'POST', headers: { 'x-api-key': down.apiKey } })
  t.match(await res.json(), { status_code: null, status: 'no_response', answer: null, error: 'ECONNREFUSED' })
})
