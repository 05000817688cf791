import t from 'tap'
import { MailChannels } from '../../src/index.js'
import { isTimeoutError } from '../../src/client/http.js'
import { FAKE_API_KEY, hang, huge, redirect, reply, resetMidBody, startStealServer, useFakeApi, type FakeApi } from '../helpers/fake-api.js'

let api: FakeApi
const fake = useFakeApi(t)
t.before(() => { api = fake.api })

const noRetry = (): MailChannels => new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 })

t.test('HTTP errors map to the SDK types with status, message and response', async (t) => {
  const cases: Array<[number, unknown, string, string, Record<string, unknown> | null]> = [
    [400, { errors: ['created_after: bad format', 'x'] }, 'invalid_request_error', 'Bad request. created_after: bad format, x', { errors: ['created_after: bad format', 'x'] }],
    [401, { message: 'unauthorized' }, 'authentication_error', 'Authorization required. unauthorized', { message: 'unauthorized' }],
    [403, { errors: ['no access'] }, 'permission_error', 'Forbidden. no access', { errors: ['no access'] }],
    [404, {}, 'not_found', 'Not found.', {}],
    [409, { error: 'busy' }, 'conflict_error', 'Conflict. busy', { error: 'busy' }],
    [413, 'too big', 'payload_too_large_error', 'Payload too large. too big', null],
    [422, { errors: ['nope'] }, 'unprocessable_entity_error', 'Unprocessable entity. nope', { errors: ['nope'] }],
    [429, { message: 'slow down' }, 'rate_limit_error', 'Too many requests. slow down', { message: 'slow down' }],
    [500, 'boom', 'internal_server_error', 'Internal server error. boom', null],
    [503, '<html><body><h1>503 Service Unavailable</h1><script>x</script></body></html>', 'api_error', 'Unknown error (HTTP 503).', null],
    [418, '', 'api_error', 'Unknown error (HTTP 418).', null],
  ]
  const client = noRetry()
  for (const [status, body, type, message, response] of cases) {
    api.queue.push(reply(status, body))
    const r = await client.webhooks.batches()
    t.same(r, { data: null, error: { message, statusCode: status, type, response } }, `HTTP ${status}`)
  }
  t.equal(api.requests.length, cases.length, 'one request each (maxRetries 0)')
})

t.test('an error body with terminal controls: the message shows them as visible escapes (C0, C1, bidi, invisible), the response keeps them', async (t) => {
  const hostile = 'bad\u001b[2J\r\n\tline\u009b2J\u202eexe\u200b\ufeff\u007f'
  api.queue.push(reply(400, { errors: [hostile] }))
  const r = await noRetry().webhooks.batches()
  t.same(r.error, { message: 'Bad request. bad\\x1b[2J line\\x9b2J\\u202eexe\\u200b\\ufeff\\x7f', statusCode: 400, type: 'invalid_request_error', response: { errors: [hostile] } })
  api.queue.push(reply(500, { message: `x${'\u202e'.repeat(400)}` }))
  const long = await noRetry().webhooks.batches()
  t.match(long.error!.message, /^Internal server error\. x(\\u202e)+\.\.\.$/, 'cut at 300 characters, then escaped: whole escapes only')
})

t.test('a real 401 from a wrong key does not echo the key', async (t) => {
  const wrongKey = 'wrong-key-should-never-leak-123'
  const client = new MailChannels(wrongKey, { baseUrl: api.url })
  const r = await client.webhooks.batches()
  t.equal(r.error?.type, 'authentication_error')
  t.equal(r.error?.statusCode, 401)
  t.notMatch(JSON.stringify(r), wrongKey)
  t.equal(api.requests.length, 1, '4xx is not retried')
})

t.test('an upstream body quoting the API key is scrubbed and not returned', async (t) => {
  api.queue.push(reply(400, { errors: [`bad key ${FAKE_API_KEY}`] }))
  const r = await noRetry().webhooks.batches()
  t.equal(r.error?.message, 'Bad request. bad key [redacted]')
  t.equal(r.error?.response, null)
  t.notMatch(JSON.stringify(r), FAKE_API_KEY)
})

t.test('long details are capped', async (t) => {
  api.queue.push(reply(400, { errors: ['e'.repeat(5000)] }))
  const r = await noRetry().webhooks.batches()
  t.ok(r.error!.message.length < 400, `length ${r.error!.message.length}`)
  t.equal(r.error?.type, 'invalid_request_error')
})

t.test('200 with garbage becomes a clean api_error, never a TypeError', async (t) => {
  const item = { batch_id: 1, created_at: '2026-01-01T00:00:00Z', customer_handle: 'c', event_count: 1, status: '2xx_response', status_code: 200, webhook: 'https://x' }
  const cases: Array<[string, unknown, string]> = [
    ['HTML', '<html>oops</html>', 'the response is not valid JSON'],
    ['truncated JSON', '{"webhook_batches":[{"batch_id":1,', 'the response is not valid JSON'],
    ['empty body', '', 'the response is not valid JSON'],
    ['{}', {}, '"webhook_batches" is not an array'],
    ['webhook_batches a string', { webhook_batches: 'x' }, '"webhook_batches" is not an array'],
    ['null', 'null', 'not a JSON object'],
    ['an array', [], 'not a JSON object'],
    ['item null', { webhook_batches: [null] }, 'item 0: not an object'],
    ['item missing batch_id', { webhook_batches: [{ ...item, batch_id: undefined }] }, 'item 0: "batch_id" is not an integer'],
    ['item missing webhook', { webhook_batches: [item, { ...item, webhook: undefined }] }, 'item 1: "webhook" is not a string'],
    ['item unknown status', { webhook_batches: [{ ...item, status: '2xx' }] }, 'item 0: "status" is not a known batch status'],
    ['item bad duration', { webhook_batches: [{ ...item, duration: 5 }] }, 'item 0: "duration" is not {unit, value}'],
    ['item negative event_count', { webhook_batches: [{ ...item, event_count: -1 }] }, 'item 0: "event_count" is not a non-negative integer'],
  ]
  const client = noRetry()
  for (const [name, body, why] of cases) {
    api.queue.push(typeof body === 'string' ? reply(200, body, { 'content-type': 'application/json' }) : reply(200, body))
    const r = await client.webhooks.batches()
    t.equal(r.data, null, name)
    t.equal(r.error?.type, 'api_error', name)
    t.equal(r.error?.statusCode, null, name)
    t.match(r.error?.message, why, name)
  }
})

t.test('reset mid-body -> application_error', async (t) => {
  api.queue.push(resetMidBody)
  const r = await noRetry().webhooks.batches()
  t.equal(r.error?.type, 'application_error')
  t.equal(r.error?.statusCode, null)
  t.match(r.error?.message, /^Failed to fetch webhook batches: the request could not be completed/)
})

t.test('no answer -> timeout (application_error, says it timed out)', async (t) => {
  api.queue.push(hang)
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, timeout: 200 })
  const r = await client.webhooks.batches()
  t.equal(r.error?.type, 'application_error')
  t.match(r.error?.message, 'did not answer within 200 ms (timed out)')
  t.ok(isTimeoutError(r.error!), 'marked as a timeout for the route (504)')
  t.equal(api.requests.length, 1, 'a timeout is not retried')
})

t.test('a body that stalls after the headers also times out', async (t) => {
  api.queue.push((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"webhook_batches":[')
  })
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, timeout: 200 })
  const r = await client.webhooks.batches()
  t.match(r.error?.message, 'timed out')
  t.ok(isTimeoutError(r.error!))
})

t.test('a response over 10 MiB is refused', async (t) => {
  api.queue.push(huge(11 * 1024 * 1024))
  const r = await noRetry().webhooks.batches()
  t.equal(r.error?.type, 'api_error')
  t.match(r.error?.message, 'larger than 10485760 bytes')
})

t.test('a declared oversized content-length is refused before reading', async (t) => {
  api.queue.push((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(20 * 1024 * 1024) })
    res.write('{')
  })
  const r = await noRetry().webhooks.batches()
  t.equal(r.error?.type, 'api_error')
  t.match(r.error?.message, 'larger than')
})

t.test('redirects are refused; the target receives nothing', async (t) => {
  const steal = await startStealServer()
  t.teardown(() => steal.close())
  for (const status of [301, 302, 307, 308]) {
    api.queue.push(redirect(steal.url, status))
    const r = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url }).webhooks.batches()
    t.equal(r.error?.type, 'application_error', `${status}`)
    t.match(r.error?.message, 'redirect', `${status}`)
    t.equal(r.error?.statusCode, null)
  }
  t.same(steal.hits, [], 'the steal server received nothing')
  t.equal(api.requests.length, 4, 'no retry')
})

t.test('a custom fetch that follows no rule still cannot hand over a redirect', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, {
    baseUrl: api.url,
    fetch: async () => new Response(null, { status: 302, headers: { location: 'http://127.0.0.1:1/steal' } }),
  })
  const r = await client.webhooks.batches()
  t.equal(r.error?.type, 'application_error')
  t.match(r.error?.message, 'redirect (HTTP 302)')
})

t.test('a fetch that refuses redirect: \'error\' (Cloudflare workerd) works, and redirects stay refused', async (t) => {
  // workerd throws for redirect: 'error' ("must be one of follow or manual").
  const workerdLike: typeof fetch = async (input, init) => {
    if (init?.redirect === 'error') throw new TypeError("Invalid redirect value, must be one of \"follow\" or \"manual\"")
    return await fetch(input, init)
  }
  const ok = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url, fetch: workerdLike }).webhooks.batches()
  t.equal(ok.error, null, 'the listing is read')
  t.ok(Array.isArray(ok.data))
  // What a browser-like fetch gives for redirect: 'manual': an opaque redirect, status 0.
  const opaque = await new MailChannels(FAKE_API_KEY, {
    baseUrl: api.url,
    fetch: async () => ({ status: 0, type: 'opaqueredirect', redirected: false, ok: false, headers: new Headers(), body: null }) as unknown as Response,
  }).webhooks.batches()
  t.equal(opaque.error?.type, 'application_error')
  t.match(opaque.error?.message, 'answered with a redirect, which the client refuses to follow')
  const steal = await startStealServer()
  t.teardown(() => steal.close())
  api.queue.push(redirect(steal.url, 302))
  const r = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url, fetch: workerdLike, maxRetries: 0 }).webhooks.batches()
  t.equal(r.error?.type, 'application_error')
  t.match(r.error?.message, 'redirect (HTTP 302)')
  t.same(steal.hits, [], 'the redirect target received nothing')
})

t.test('connection refused -> application_error', async (t) => {
  const steal = await startStealServer()
  const deadUrl = steal.url.replace('/steal', '')
  await steal.close()
  const r = await new MailChannels(FAKE_API_KEY, { baseUrl: deadUrl, maxRetries: 0 }).webhooks.batches()
  t.equal(r.error?.type, 'application_error')
  t.equal(r.error?.statusCode, null)
})

t.test('a fetch that throws a non-Error -> application_error', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, fetch: async () => { throw 'nope' as unknown as Error } })
  const r = await client.webhooks.batches()
  t.same(r, { data: null, error: { message: 'Failed to fetch webhook batches: the request could not be completed.', statusCode: null, type: 'application_error', response: null } })
})

t.test('retries: 5xx retried up to maxRetries (default 2), then success', async (t) => {
  api.queue.push(reply(500, 'boom'), reply(503, '<html></html>'))
  const r = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url }).webhooks.batches({ limit: 1 })
  t.equal(r.error, null)
  t.equal(r.data?.length, 1)
  t.equal(api.batchRequests().length, 3)
})

t.test('retries: exhausted -> the last error; no more than 1 + maxRetries requests', async (t) => {
  api.always = reply(502, 'bad gateway')
  const r = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 1 }).webhooks.batches()
  t.equal(r.error?.type, 'api_error')
  t.equal(r.error?.statusCode, 502)
  t.equal(api.requests.length, 2)
})

t.test('retries: 429 honours Retry-After in seconds', async (t) => {
  api.queue.push(reply(429, { message: 'slow down' }, { 'retry-after': '1' }))
  const started = Date.now()
  const r = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 1 }).webhooks.batches({ limit: 1 })
  t.equal(r.error, null)
  t.equal(api.requests.length, 2)
  t.ok(Date.now() - started >= 950, 'waited for Retry-After')
})

t.test('retries: Retry-After as an HTTP date', async (t) => {
  api.queue.push(reply(503, 'busy', { 'retry-after': new Date(Date.now() + 1000).toUTCString() }))
  const r = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 1 }).webhooks.batches({ limit: 1 })
  t.equal(r.error, null)
  t.equal(api.requests.length, 2)
})

t.test('retries: a Retry-After beyond maxRetryDelay ends the retries at once', async (t) => {
  api.always = reply(429, { message: 'later' }, { 'retry-after': '20' })
  const started = Date.now()
  const r = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 5, maxRetryDelay: 5000 }).webhooks.batches()
  t.equal(r.error?.type, 'rate_limit_error')
  t.equal(r.error?.statusCode, 429)
  t.equal(api.requests.length, 1, 'no retry storm')
  t.ok(Date.now() - started < 5000, 'did not wait')
  api.requests.length = 0
  api.always = reply(429, {}, { 'retry-after': '60' })
  const r2 = await new MailChannels(FAKE_API_KEY, { baseUrl: api.url }).webhooks.batches()
  t.equal(r2.error?.type, 'rate_limit_error')
  t.equal(api.requests.length, 1, 'default cap is 30 s')
})

t.test('retries: 4xx other than 429 and maxRetries 0 are not retried', async (t) => {
  api.always = reply(400, { errors: ['bad'] })
  await new MailChannels(FAKE_API_KEY, { baseUrl: api.url }).webhooks.batches()
  t.equal(api.requests.length, 1)
  api.requests.length = 0
  api.always = reply(500, 'x')
  await noRetry().webhooks.batches()
  t.equal(api.requests.length, 1)
})
