import t from 'tap'
import { inspect } from 'node:util'
import { MailChannels, MailChannelsError, type WebhooksBatch } from '../../src/index.js'
import { generateSigningKeyPair } from '../../src/testing/index.js'
import { echoApiKey, FAKE_API_KEY, redirect, reply, startStealServer, useFakeApi, type FakeApi } from '../helpers/fake-api.js'

let api: FakeApi
const fake = useFakeApi(t)
t.before(() => { api = fake.api })

t.test('construction: the API key is required', async (t) => {
  for (const bad of [undefined, '', '   ', 42, null]) {
    t.throws(() => new MailChannels(bad as unknown as string), { name: 'TypeError', message: /MailChannels needs an API key/ }, String(bad))
  }
})

t.test('construction: a key with surrounding whitespace or control characters is refused, without echoing it', async (t) => {
  // Secret files often end with a newline. fetch strips it from the header it sends, so the
  // client would redact a different string from the one an upstream error can echo.
  const secret = 'mc-secret-abc123'
  for (const bad of [`${secret}\n`, `${secret}\r\n`, ` ${secret}`, `\t${secret}`, `${secret} `, `mc-se\u0000cret`, `mc-se\u007fcret`, 'mc secret', `${secret}\u00a0`, `${secret}\u2028`]) {
    const err = (() => { try { new MailChannels(bad); return null } catch (e) { return e as Error } })() // eslint-disable-line no-new
    t.type(err, TypeError, encodeURIComponent(bad)) // (a raw U+2028 would break the TAP output)
    t.match(err?.message, /^The MailChannels API key must be printable ASCII without spaces or control characters/)
    t.match(err?.message, /trim\(\)/, 'says what to do')
    t.notMatch(err?.message, 'secret', 'the key is not echoed')
  }
})

t.test('the key sent is the key redacted: an upstream that echoes X-Api-Key', async (t) => {
  for (const key of [FAKE_API_KEY, 'mc"quoted\\key!~']) {
    api.queue.push(echoApiKey)
    const r = await new MailChannels(key, { baseUrl: api.url, maxRetries: 0 }).webhooks.batches()
    t.equal(api.requests.at(-1)!.headers['x-api-key'], key, 'sent exactly as given')
    t.equal(r.error?.type, 'invalid_request_error')
    t.equal(r.error?.message, 'Bad request. invalid key: [redacted]')
    t.equal(r.error?.response, null, 'a body quoting the key is not returned')
    t.notMatch(JSON.stringify(r), key, JSON.stringify(key))
    t.notMatch(JSON.stringify(r), JSON.stringify(key).slice(1, -1), 'nor its JSON-escaped form')
  }
})

t.test('construction: options are validated with TypeErrors naming the option', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    [{ baseUrl: 'http://api.example.com' }, /^baseUrl must use https:/],
    [{ baseUrl: 'https://u:p@api.example.com' }, /^baseUrl must not contain credentials/],
    [{ baseUrl: 'nope' }, /^baseUrl is not a valid URL/],
    [{ timeout: 0 }, /^timeout must be a positive number/],
    [{ timeout: -5 }, /^timeout/],
    [{ timeout: '100' }, /^timeout/],
    [{ timeout: Infinity }, /^timeout/],
    [{ fetch: 'fetch' }, /^fetch must be a function/],
    [{ maxRetries: -1 }, /^maxRetries must be an integer from 0 to 5/],
    [{ maxRetries: 6 }, /^maxRetries/],
    [{ maxRetries: 1.5 }, /^maxRetries/],
    [{ maxRetryDelay: -1 }, /^maxRetryDelay/],
    ['x', /options must be an object/],
  ]
  for (const [options, message] of cases) {
    t.throws(() => new MailChannels('k', options as never), { name: 'TypeError', message }, JSON.stringify(options))
  }
  t.doesNotThrow(() => new MailChannels('k', { baseUrl: 'http://127.0.0.1:9', timeout: 1, maxRetries: 0 }))
  t.doesNotThrow(() => new MailChannels('k', { maxRetries: 5, fetch: globalThis.fetch }))
})

t.test('the API key never shows in JSON.stringify, util.inspect or the object keys', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  t.notMatch(JSON.stringify(client), FAKE_API_KEY)
  t.notMatch(JSON.stringify({ client }), FAKE_API_KEY)
  t.notMatch(inspect(client, { depth: 10, showHidden: true }), FAKE_API_KEY)
  t.notMatch(inspect(client.webhooks, { depth: 10, showHidden: true }), FAKE_API_KEY)
  t.notMatch(String(client), FAKE_API_KEY)
  t.same(Object.keys(client).sort(), ['baseUrl', 'webhooks'])
  t.match(inspect(client), "apiKey: '[redacted]'")
})

t.test('getSigningKey: no API key sent, key validated, {data: {id, key}}', async (t) => {
  const pair = generateSigningKeyPair()
  api.keys.set('mckey', pair.publicKey)
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const r = await client.webhooks.getSigningKey('mckey')
  t.same(r, { data: { id: 'mckey', key: pair.publicKey }, error: null })
  t.equal(api.requests.length, 1)
  t.equal(api.requests[0]!.url, '/tx/v1/webhook/public-key?id=mckey')
  t.equal(api.requests[0]!.headers['x-api-key'], undefined, 'no API key on the public endpoint')
  t.notMatch(JSON.stringify(api.requests[0]!.headers), FAKE_API_KEY)
  t.match(api.requests[0]!.headers['user-agent'], /^mailchannels-webhooks\//)

  api.keys.set('pem', pair.publicKeyPem)
  t.same((await client.webhooks.getSigningKey('pem')).data, { id: 'pem', key: pair.publicKeyPem }, 'PEM served as is')
})

t.test('getSigningKey failures', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const unknown = await client.webhooks.getSigningKey('nokey')
  t.same(unknown, { data: null, error: { message: 'Not found. Key not found', statusCode: 404, type: 'not_found', response: { errors: ['Key not found'] } } })

  api.keys.set('garbage', 'SIMULATOR_PUBLIC_SIGNING_KEY')
  const garbage = await client.webhooks.getSigningKey('garbage')
  t.equal(garbage.error?.type, 'api_error')
  t.match(garbage.error?.message, 'the served key was refused')

  api.keys.set('zero', Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.alloc(32)]).toString('base64'))
  const weak = await client.webhooks.getSigningKey('zero')
  t.match(weak.error?.message, 'small-order')

  api.queue.push(reply(200, { id: 'other', key: generateSigningKeyPair().publicKey }))
  t.match((await client.webhooks.getSigningKey('mine')).error?.message, 'different key id')
  api.queue.push(reply(200, { id: 'mine' }))
  t.match((await client.webhooks.getSigningKey('mine')).error?.message, 'not {"id", "key"}')
  api.queue.push(reply(200, '<html>'))
  t.match((await client.webhooks.getSigningKey('mine')).error?.message, 'not valid JSON')
  api.queue.push(reply(500, 'down'))
  t.equal((await client.webhooks.getSigningKey('mine')).error?.type, 'internal_server_error')

  const steal = await startStealServer()
  t.teardown(() => steal.close())
  api.queue.push(redirect(steal.url))
  t.equal((await client.webhooks.getSigningKey('mine')).error?.type, 'application_error')
  t.same(steal.hits, [])

  const before = api.requests.length
  for (const bad of ['', 'a b', 'x'.repeat(65), '../x', 7]) {
    const r = await client.webhooks.getSigningKey(bad as string)
    t.equal(r.error?.type, 'validation_error', String(bad))
  }
  t.equal(api.requests.length, before, 'invalid ids make no call')
})

t.test('iterateBatches: every item over 3 pages, paging by offset', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const seen: WebhooksBatch[] = []
  for await (const b of client.webhooks.iterateBatches({ limit: 5, statuses: ['2xx', '4xx', '5xx', 'no_response'] })) seen.push(b)
  t.same(seen.map((b) => b.batchId), Array.from({ length: 12 }, (_, i) => 1000 + i))
  t.same(api.requests.map((r) => r.query), [
    'statuses=2xx%2C4xx%2C5xx%2Cno_response&limit=5&offset=0',
    'statuses=2xx%2C4xx%2C5xx%2Cno_response&limit=5&offset=5',
    'statuses=2xx%2C4xx%2C5xx%2Cno_response&limit=5&offset=10',
  ])
})

t.test('iterateBatches: an exact multiple of limit ends on an empty page; a start offset is kept', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const ids: number[] = []
  for await (const b of client.webhooks.iterateBatches({ limit: 4, offset: 4 })) ids.push(b.batchId)
  t.same(ids, [1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011])
  t.same(api.requests.map((r) => r.query), ['limit=4&offset=4', 'limit=4&offset=8', 'limit=4&offset=12'])
})

t.test('iterateBatches: default limit 500 is sent', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const ids: number[] = []
  for await (const b of client.webhooks.iterateBatches()) ids.push(b.batchId)
  t.equal(ids.length, 12)
  t.same(api.requests.map((r) => r.query), ['limit=500&offset=0'])
})

t.test('iterateBatches: a failure throws MailChannelsError carrying the ErrorResponse', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 })
  // First page fine, second page fails.
  let calls = 0
  api.always = (req, res) => {
    calls++
    if (calls === 1) reply(200, { webhook_batches: [{ batch_id: 1, created_at: 'c', customer_handle: 'h', event_count: 0, status: 'no_response', webhook: 'w' }] })(req, res)
    else reply(503, 'down')(req, res)
  }
  const ids: number[] = []
  const err = await (async () => {
    try {
      for await (const b of client.webhooks.iterateBatches({ limit: 1 })) ids.push(b.batchId)
    } catch (e) { return e }
    return null
  })()
  t.same(ids, [1], 'items before the failure were yielded')
  t.ok(err instanceof MailChannelsError)
  const e = err as MailChannelsError
  t.equal(e.name, 'MailChannelsError')
  t.equal(e.type, 'api_error')
  t.equal(e.statusCode, 503)
  t.same(e.error, { message: 'Unknown error (HTTP 503). down', statusCode: 503, type: 'api_error', response: null })

  api.always = null
  api.requests.length = 0
  await t.rejects(async () => { for await (const _ of client.webhooks.iterateBatches({ limit: 0 })) void _ }, { name: 'MailChannelsError', error: { type: 'validation_error' } })
  t.equal(api.requests.length, 0)
})

t.test('verify still works through the client (keys from baseUrl, never with the API key)', async (t) => {
  const { signWebhook } = await import('../../src/testing/index.js')
  const pair = generateSigningKeyPair()
  api.keys.set('client-verify-key', pair.publicKey)
  const signed = signWebhook({ privateKey: pair.privateKey, keyId: 'client-verify-key', events: [{ event: 'delivered', customer_handle: 'acme', timestamp: Math.floor(Date.now() / 1000) }] })
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const r = await client.webhooks.verify({ payload: signed.body, headers: signed.headers })
  t.equal(r.error, null)
  t.equal(r.data?.[0]?.event, 'delivered')
  const keyReq = api.requests.find((q) => q.url.startsWith('/tx/v1/webhook/public-key'))
  t.ok(keyReq)
  t.equal(keyReq!.headers['x-api-key'], undefined)
})
