import t from 'tap'
import { inspect } from 'node:util'
import { MailChannels } from '../../src/index.js'
import { isTimeoutError } from '../../src/client/http.js'
import { echoApiKey, FAKE_API_KEY, hang, redirect, reply, useFakeApi, type FakeApi } from '../helpers/fake-api.js'

// The lifecycle methods (enroll, list, delete, validate, resendBatch) against a loopback fake
// that follows the API reference: what goes on the wire, the mapping of each reply, every
// documented error status, malformed replies, timeouts, retries, and local validation.

let api: FakeApi
let client: MailChannels
const fake = useFakeApi(t)
t.before(() => {
  api = fake.api
  client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetryDelay: 50 })
})

const HOOK = 'https://hooks.example.com/mailchannels?token=a&b=c'

t.test('enroll: POST /tx/v1/webhook?endpoint=<url>, 201 -> { endpoint }', async (t) => {
  const r = await client.webhooks.enroll(HOOK)
  t.same(r, { data: { endpoint: HOOK }, error: null })
  const req = api.requests[0]!
  t.equal(req.method, 'POST')
  t.equal(req.url, `/tx/v1/webhook?endpoint=${encodeURIComponent(HOOK)}`, 'the endpoint is one percent-encoded query parameter')
  t.equal(req.headers['x-api-key'], FAKE_API_KEY)
  t.equal(req.headers['content-type'], undefined, 'no body')
  t.equal(req.body, '')
  t.same(api.webhooks, [HOOK])
  t.same(await client.webhooks.enroll('http://127.0.0.1:3000/webhooks'), { data: { endpoint: 'http://127.0.0.1:3000/webhooks' }, error: null }, 'http: on a loopback host')
  api.queue.push(reply(200, { ok: true }))
  t.same(await client.webhooks.enroll('https://b.example/h'), { data: { endpoint: 'https://b.example/h' }, error: null }, 'a 200 with a body counts too')
})

t.test('enroll: an endpoint already enrolled -> 409 conflict_error, a message that says what to do', async (t) => {
  await client.webhooks.enroll(HOOK)
  const r = await client.webhooks.enroll(HOOK)
  t.match(r, { data: null, error: { type: 'conflict_error', statusCode: 409, message: /^Conflict\. A webhook endpoint is already enrolled for this account \(see list\(\); delete\(\) removes every endpoint\)\. There's already a webhook endpoint/, response: { errors: [String] } } })
})

t.test('list: GET /tx/v1/webhook -> string[]', async (t) => {
  t.same(await client.webhooks.list(), { data: [], error: null })
  await client.webhooks.enroll(HOOK)
  await client.webhooks.enroll('https://second.example/h')
  api.requests.length = 0
  t.same(await client.webhooks.list(), { data: [HOOK, 'https://second.example/h'], error: null })
  t.equal(api.requests[0]!.method, 'GET')
  t.equal(api.requests[0]!.url, '/tx/v1/webhook')
})

t.test('delete: DELETE /tx/v1/webhook, 204 -> { deleted: true }', async (t) => {
  await client.webhooks.enroll(HOOK)
  api.requests.length = 0
  t.same(await client.webhooks.delete(), { data: { deleted: true }, error: null })
  t.equal(api.requests[0]!.method, 'DELETE')
  t.equal(api.requests[0]!.url, '/tx/v1/webhook')
  t.same(api.webhooks, [])
  api.queue.push(reply(200, {}))
  t.same(await client.webhooks.delete(), { data: { deleted: true }, error: null }, 'a 200 counts too')
})

t.test('validate: POST /tx/v1/webhook/validate with { request_id } -> camelCase', async (t) => {
  await client.webhooks.enroll(HOOK)
  await client.webhooks.enroll('https://down.example/h')
  api.validateAnswers.set('https://down.example/h', { status: 503, body: 'maintenance' })
  api.requests.length = 0
  const r = await client.webhooks.validate('req-123')
  t.same(r, {
    data: {
      allPassed: false,
      results: [
        { result: 'passed', webhook: HOOK, response: { status: 200, body: 'ok' } },
        { result: 'failed', webhook: 'https://down.example/h', response: { status: 503, body: 'maintenance' } },
      ],
    },
    error: null,
  })
  const req = api.requests[0]!
  t.equal(req.method, 'POST')
  t.equal(req.url, '/tx/v1/webhook/validate')
  t.equal(req.headers['content-type'], 'application/json')
  t.same(JSON.parse(req.body), { request_id: 'req-123' })
  api.requests.length = 0
  api.validateAnswers.set('https://down.example/h', null)
  const noAnswer = await client.webhooks.validate()
  t.same(JSON.parse(api.requests[0]!.body), {}, 'without a request id: an empty object, the service makes one up')
  t.same(noAnswer.data?.results[1], { result: 'failed', webhook: 'https://down.example/h', response: null }, 'no answer: response null')
  t.equal((await client.webhooks.validate('x'.repeat(28))).error, null, '28 characters is the limit')
  api.queue.push(reply(200, { all_passed: true, results: [{ result: 'passed', webhook: HOOK, response: { status: 204 } }] }))
  t.same((await client.webhooks.validate()).data, { allPassed: true, results: [{ result: 'passed', webhook: HOOK, response: { status: 204, body: '' } }] }, 'a response without a body')
})

t.test('validate: no endpoint enrolled -> 404 not_found saying to enroll one', async (t) => {
  t.match(await client.webhooks.validate(), { data: null, error: { type: 'not_found', statusCode: 404, message: /^Not found\. No webhook endpoint is enrolled for this account: enroll one first\./ } })
})

t.test('resendBatch: POST /tx/v1/webhook-batch/{id}/resend -> camelCase; X-Customer-Handle only when given', async (t) => {
  const r = await client.webhooks.resendBatch(1001)
  t.same(r, {
    data: { batchId: 1001, customerHandle: 'acme', webhook: 'https://hooks.example.com/b?token=t', createdAt: '2026-01-20T00:00:00.000Z', eventCount: 2, durationInMs: 12, statusCode: 200 },
    error: null,
  })
  t.equal(api.requests[0]!.method, 'POST')
  t.equal(api.requests[0]!.url, '/tx/v1/webhook-batch/1001/resend')
  t.equal(api.requests[0]!.headers['x-customer-handle'], undefined)
  t.equal(api.requests[0]!.headers['x-api-key'], FAKE_API_KEY, 'the API key besides the handle')
  t.equal(api.requests[0]!.body, '')
  api.requests.length = 0
  api.resendAnswers.set(1002, null)
  const viaString = await client.webhooks.resendBatch('1002', { customerHandle: 'acme' })
  t.equal(api.requests[0]!.headers['x-customer-handle'], 'acme')
  t.equal(api.requests[0]!.url, '/tx/v1/webhook-batch/1002/resend', 'a decimal string is the same id')
  t.match(viaString.data, { batchId: 1002, statusCode: null, durationInMs: null }, 'the endpoint did not answer: still a success of the call, statusCode null')
  api.resendAnswers.set(1003, 500)
  t.match((await client.webhooks.resendBatch(1003)).data, { statusCode: 500 }, "the endpoint's failure is data, not an error")
})

t.test('resendBatch: unknown batch -> 404 not_found; bad id upstream -> 400', async (t) => {
  t.match(await client.webhooks.resendBatch(999999), { data: null, error: { type: 'not_found', statusCode: 404, message: /^Not found\. No batch with this id exists for this account\. Batch not found$/ } })
  t.match(await client.webhooks.resendBatch(1001, { customerHandle: 'other' }), { error: { statusCode: 404 } }, 'another customer handle')
  api.queue.push(reply(400, { errors: ['batch_id: invalid'] }))
  t.match(await client.webhooks.resendBatch(5), { data: null, error: { type: 'invalid_request_error', statusCode: 400, message: 'Bad request. The batch id is invalid. batch_id: invalid' } })
})

t.test('every documented error status, on every method', async (t) => {
  const calls: Array<[string, () => Promise<{ error: unknown }>]> = [
    ['enroll', () => client.webhooks.enroll(HOOK)],
    ['list', () => client.webhooks.list()],
    ['delete', () => client.webhooks.delete()],
    ['validate', () => client.webhooks.validate()],
    ['resendBatch', () => client.webhooks.resendBatch(1001)],
  ]
  const statuses: Array<[number, string]> = [[400, 'invalid_request_error'], [401, 'authentication_error'], [403, 'permission_error'], [404, 'not_found'], [409, 'conflict_error'], [413, 'payload_too_large_error'], [422, 'unprocessable_entity_error'], [500, 'internal_server_error'], [502, 'api_error']]
  const noRetry = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 })
  for (const [name] of calls) {
    for (const [status, type] of statuses) {
      api.queue.push(reply(status, { errors: [`upstream says ${status}`] }))
      const call = { enroll: () => noRetry.webhooks.enroll(HOOK), list: () => noRetry.webhooks.list(), delete: () => noRetry.webhooks.delete(), validate: () => noRetry.webhooks.validate(), resendBatch: () => noRetry.webhooks.resendBatch(1001) }[name]!
      const r = await call()
      t.match(r, { data: null, error: { type, statusCode: status, message: new RegExp(`upstream says ${status}$`), response: { errors: [`upstream says ${status}`] } } }, `${name} ${status}`)
    }
  }
  // The simulators' {"error": "..."} shape and a plain-text body still give a message.
  api.queue.push(reply(401, { error: 'Missing X-API-Key header.' }))
  t.match(await noRetry.webhooks.list(), { error: { type: 'authentication_error', message: 'Authorization required. Missing X-API-Key header.' } })
  api.queue.push(reply(500, 'boom'))
  t.match(await noRetry.webhooks.delete(), { error: { type: 'internal_server_error', message: 'Internal server error. boom', response: null } })
  t.equal(calls.length, 5)
})

t.test('malformed answers: api_error naming what is wrong, never a throw', async (t) => {
  const cases: Array<[string, () => Promise<unknown>, unknown, RegExp]> = [
    ['list: an object', () => client.webhooks.list(), { webhooks: [] }, /^Failed to list the webhook endpoints: the response is not a list of \{"webhook"\}\.$/],
    ['list: an item without webhook', () => client.webhooks.list(), [{ url: 'x' }], /not a list of \{"webhook"\}/],
    ['list: a string item', () => client.webhooks.list(), ['https://x'], /not a list of \{"webhook"\}/],
    ['validate: no all_passed', () => client.webhooks.validate(), { results: [] }, /^Failed to validate the webhook endpoints: the response is not \{"all_passed", "results"\}\.$/],
    ['validate: bad result', () => client.webhooks.validate(), { all_passed: true, results: [{ result: 'ok', webhook: 'x', response: null }] }, /not \{"all_passed", "results"\}/],
    ['validate: bad response', () => client.webhooks.validate(), { all_passed: true, results: [{ result: 'passed', webhook: 'x', response: { status: '200' } }] }, /not \{"all_passed", "results"\}/],
    ['resend: not an object', () => client.webhooks.resendBatch(1), [1], /^Failed to resend the webhook batch: the response is not a resend result \(not a JSON object\)\.$/],
    ['resend: batch_id missing', () => client.webhooks.resendBatch(1), { customer_handle: 'a', webhook: 'w', created_at: 'c', event_count: 1 }, /\("batch_id" is not an integer\)/],
    ['resend: status_code a string', () => client.webhooks.resendBatch(1), { batch_id: 1, customer_handle: 'a', webhook: 'w', created_at: 'c', event_count: 1, status_code: '200' }, /\("status_code" is not an integer or null\)/],
    ['resend: negative event_count', () => client.webhooks.resendBatch(1), { batch_id: 1, customer_handle: 'a', webhook: 'w', created_at: 'c', event_count: -1 }, /"event_count"/],
  ]
  for (const [name, call, body, message] of cases) {
    api.queue.push(reply(200, body))
    t.match(await call(), { data: null, error: { type: 'api_error', statusCode: null, message } }, name)
  }
  api.queue.push(reply(200, 'not json{'))
  t.match(await client.webhooks.validate(), { error: { type: 'api_error', message: /the response is not valid JSON/ } })
  api.queue.push(redirect('https://elsewhere.example/'))
  t.match(await client.webhooks.enroll(HOOK), { error: { type: 'application_error', message: /redirect/ } }, 'a redirect is never followed')
  api.queue.push(reply(202, {}))
  t.match(await client.webhooks.enroll(HOOK), { error: { type: 'api_error', statusCode: 202 } }, 'a status the route never answers is not taken for success')
})

t.test('timeouts: application_error "timed out", no retry of a POST', async (t) => {
  const quick = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, timeout: 100, maxRetries: 2 })
  for (const [name, call] of [['enroll', () => quick.webhooks.enroll(HOOK)], ['validate', () => quick.webhooks.validate()], ['resendBatch', () => quick.webhooks.resendBatch(1001)], ['list', () => quick.webhooks.list()], ['delete', () => quick.webhooks.delete()]] as const) {
    api.requests.length = 0
    api.queue.push(hang)
    const r = await call()
    t.match(r, { data: null, error: { type: 'application_error', statusCode: null, message: /did not answer within 100 ms \(timed out\)/ } }, name)
    t.ok(isTimeoutError(r.error!), `${name}: marked as a timeout`)
    t.equal(api.requests.length, 1, `${name}: one attempt (transport errors are never retried)`)
  }
})

t.test('retries: a POST is not repeated after a 5xx unless opted in; 429 is; GET and DELETE are', async (t) => {
  const posts: Array<[string, (request?: { retryNonIdempotent: boolean }) => Promise<{ error: unknown }>]> = [
    ['enroll', (r) => client.webhooks.enroll(HOOK, r)],
    ['validate', (r) => client.webhooks.validate(undefined, r)],
    ['resendBatch', (r) => client.webhooks.resendBatch(1001, {}, r)],
  ]
  for (const [name, call] of posts) {
    api.webhooks.length = 0
    api.webhooks.push('https://a.example/h')
    api.requests.length = 0
    api.queue.push(reply(503, { errors: ['busy'] }))
    t.match(await call(), { error: { statusCode: 503 } }, `${name}: 503 returned at once`)
    t.equal(api.requests.length, 1, `${name}: not repeated`)

    api.webhooks.length = 0
    api.webhooks.push('https://a.example/h')
    api.requests.length = 0
    api.queue.push(reply(503, { errors: ['busy'] }))
    t.equal((await call({ retryNonIdempotent: true })).error, null, `${name}: opted in, the retry succeeds`)
    t.equal(api.requests.length, 2)

    api.webhooks.length = 0
    api.webhooks.push('https://a.example/h')
    api.requests.length = 0
    api.queue.push(reply(429, { errors: ['slow down'] }, { 'retry-after': '0' }))
    t.equal((await call()).error, null, `${name}: a 429 is retried (the API did not act on it)`)
    t.equal(api.requests.length, 2)
  }
  for (const [name, call] of [['list', () => client.webhooks.list()], ['delete', () => client.webhooks.delete()]] as const) {
    api.requests.length = 0
    api.queue.push(reply(500, { errors: ['oops'] }))
    t.equal((await call()).error, null, `${name}: retried after a 500`)
    t.equal(api.requests.length, 2)
  }
  t.match(await client.webhooks.list({ retryNonIdempotent: 'yes' } as never), { error: { type: 'validation_error', message: 'The retryNonIdempotent option must be true or false.' } })
})

t.test('input validation: validation_error naming the input, no HTTP call', async (t) => {
  const endpoints: Array<[unknown, RegExp]> = [
    [undefined, /^The endpoint must be a URL string, e\.g\. https:\/\/example\.com\/webhooks\/mailchannels\.$/],
    ['', /must be a URL string/],
    [42, /must be a URL string/],
    ['/webhooks', /^The endpoint must be an absolute URL/],
    ['example.com/webhooks', /must be an absolute URL/],
    ['http://example.com/webhooks', /^The endpoint must use https: \(http: is accepted only for a loopback host such as 127\.0\.0\.1, for local testing\)\.$/],
    ['ftp://example.com/x', /must use https:/],
    ['javascript:alert(1)', /must use https:/],
    [`https://example.com/${'a'.repeat(8000)}`, /^The endpoint must be at most 8000 characters\.$/],
    ['https://user:pass@example.com/h', /must not contain credentials/],
    ['https://example.com/h#frag', /must not have a fragment/],
    ['https://example.com/a b', /must not contain spaces or control characters/],
    ['https://example.com/\nx', /must not contain spaces or control characters/],
    [' https://example.com/h', /must not contain spaces/],
  ]
  for (const [endpoint, message] of endpoints) {
    t.match(await client.webhooks.enroll(endpoint as never), { data: null, error: { type: 'validation_error', statusCode: null, message, response: null } }, String(endpoint).slice(0, 40))
  }
  t.equal((await client.webhooks.enroll(`https://example.com/${'a'.repeat(7980)}`)).error, null, '8,000 characters is the limit')
  api.requests.length = 0

  for (const requestId of ['', 'x'.repeat(29), 42, 'a\u0000b']) {
    t.match(await client.webhooks.validate(requestId as never), { error: { type: 'validation_error', message: 'The requestId must be a string of 1 to 28 characters without control characters.' } }, JSON.stringify(requestId))
  }
  for (const batchId of [0, -1, 1.5, NaN, Infinity, 2 ** 53, '01', '1.0', 'abc', '', ' 1', null, undefined, [1], '99999999999999999']) {
    t.match(await client.webhooks.resendBatch(batchId as never), { error: { type: 'validation_error', message: 'The batchId must be a positive integer (a number or its decimal string), e.g. 1234.' } }, String(batchId))
  }
  for (const customerHandle of ['', 'a b', 'x'.repeat(256), 5, 'é']) {
    t.match(await client.webhooks.resendBatch(1, { customerHandle } as never), { error: { type: 'validation_error', message: /^The customerHandle must be 1 to 255 printable ASCII characters without spaces\.$/ } }, String(customerHandle))
  }
  t.match(await client.webhooks.resendBatch(1, { handle: 'x' } as never), { error: { type: 'validation_error', message: "Unknown option 'handle'. Valid options are: customerHandle." } })
  t.match(await client.webhooks.resendBatch(1, 'acme' as never), { error: { type: 'validation_error', message: 'resendBatch options must be an object.' } })
  t.match(await client.webhooks.list({ timeout: 1 } as never), { error: { type: 'validation_error', message: /^Unknown request option 'timeout'/ } })
  t.match(await client.webhooks.enroll(HOOK, { signal: AbortSignal.abort() }), { error: { type: 'application_error', message: 'Failed to enroll the webhook endpoint: the request was aborted (its signal fired).' } })
  t.equal(api.requests.length, 0, 'not one HTTP call')
})

t.test('the API key never appears in messages, responses or inspect output', async (t) => {
  for (const call of [() => client.webhooks.enroll(HOOK), () => client.webhooks.validate(), () => client.webhooks.resendBatch(1001), () => client.webhooks.list(), () => client.webhooks.delete()]) {
    api.queue.push(echoApiKey)
    const r = await call()
    t.equal(r.data, null)
    t.notMatch(JSON.stringify(r), FAKE_API_KEY)
    t.match(r.error?.message, /\[redacted\]/)
    t.equal(r.error?.response, null, 'a body quoting the key is not returned')
  }
  t.notMatch(inspect(client.webhooks, { depth: 5 }), FAKE_API_KEY)
})
