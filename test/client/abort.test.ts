import t from 'tap'
import { getEventListeners } from 'node:events'
import type { ServerResponse } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { MailChannels, MailChannelsError } from '../../src/index.js'
import { isTimeoutError } from '../../src/client/http.js'
import { generateSigningKeyPair } from '../../src/testing/index.js'
import { FAKE_API_KEY, gate, hang, reply, useFakeApi, type FakeApi } from '../helpers/fake-api.js'
import { within, until } from '../helpers/wait.js'

// The `signal` option of every client method: an abandoned call closes its upstream socket at
// once, is never retried, and resolves a typed error (never rejects), whatever it was doing:
// connecting, waiting for headers, reading the body or waiting to retry.

/** How long a cancelled call may take to close its socket (the client's timeout is 30 s). */
const CANCEL_BOUND_MS = 2000

let api: FakeApi
const fake = useFakeApi(t)
t.before(() => { api = fake.api })

const ABORTED = { data: null, error: { type: 'application_error', statusCode: null, response: null, message: /the request was aborted/ } }

t.test('an already aborted signal: typed error, no HTTP call', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const signal = AbortSignal.abort()
  t.match(await client.webhooks.batches({ limit: 1 }, { signal }), ABORTED)
  t.match(await client.webhooks.getSigningKey('mckey', { signal }), ABORTED)
  await t.rejects(client.webhooks.iterateBatches({}, { signal }).next(), { name: 'MailChannelsError', error: ABORTED.error })
  t.equal(api.requests.length, 0)
})

t.test('abort while waiting for the answer: the upstream socket closes, the call resolves aborted', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 2 })
  api.queue.push(hang)
  const ac = new AbortController()
  const pending = client.webhooks.batches({}, { signal: ac.signal })
  await until(() => api.requests.length === 1, 'the upstream call')
  ac.abort()
  t.ok(await within(api.requests[0]!.socketClosed, CANCEL_BOUND_MS), 'the upstream saw its socket closed')
  const r = await pending
  t.match(r, ABORTED)
  t.notOk(isTimeoutError(r.error!), 'an abort is not a timeout')
  await sleep(300)
  t.equal(api.requests.length, 1, 'no retry')
})

t.test('abort while reading the body', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  api.queue.push((_req, res: ServerResponse) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"webhook_batches":[')
  })
  const ac = new AbortController()
  const pending = client.webhooks.batches({}, { signal: ac.signal })
  await until(() => api.requests.length === 1, 'the upstream call')
  await sleep(50)
  ac.abort()
  t.ok(await within(api.requests[0]!.socketClosed, CANCEL_BOUND_MS))
  t.match(await pending, ABORTED)
})

t.test('abort while waiting to retry: no retry is sent', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 2, maxRetryDelay: 5000 })
  api.always = reply(503, { message: 'busy' }, { 'retry-after': '1' })
  const ac = new AbortController()
  const pending = client.webhooks.batches({}, { signal: ac.signal })
  await until(() => api.requests.length === 1, 'the first attempt')
  await sleep(50)
  ac.abort()
  t.ok(await within(pending, CANCEL_BOUND_MS), 'resolves without waiting out Retry-After')
  t.match(await pending, ABORTED)
  await sleep(1300) // past the Retry-After
  t.equal(api.requests.length, 1, 'the retry was never sent')
})

t.test('the client timeout still applies with a signal, and is reported as a timeout', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, timeout: 100, maxRetries: 0 })
  api.queue.push(hang)
  const r = await client.webhooks.batches({}, { signal: new AbortController().signal })
  t.equal(r.error?.type, 'application_error')
  t.match(r.error?.message, /timed out/)
  t.ok(isTimeoutError(r.error!))
})

t.test('a long-lived signal shared by many calls keeps no listener once they are done', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 1, maxRetryDelay: 1000 })
  const app = new AbortController()
  api.queue.push(reply(503, {}, { 'retry-after': '0' }), reply(400, { errors: ['x'] }))
  t.equal((await client.webhooks.batches({ limit: 1 }, { signal: app.signal })).error?.type, 'invalid_request_error', 'retried once, then the 400')
  for (let i = 0; i < 5; i++) t.equal((await client.webhooks.batches({ limit: 1 }, { signal: app.signal })).error, null)
  api.queue.push(hang)
  const pending = client.webhooks.batches({}, { signal: app.signal })
  await until(() => api.requests.length === 8, 'the hanging call')
  t.equal(getEventListeners(app.signal, 'abort').length, 1, 'one listener while a call is in flight')
  app.abort()
  t.match(await pending, ABORTED)
  t.equal(getEventListeners(app.signal, 'abort').length, 0, 'none left after')
})

t.test('getSigningKey with a signal', async (t) => {
  const pair = generateSigningKeyPair()
  api.keys.set('sig', pair.publicKey)
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  t.same(await client.webhooks.getSigningKey('sig', { signal: new AbortController().signal }), { data: { id: 'sig', key: pair.publicKey }, error: null })
  api.queue.push(hang)
  const ac = new AbortController()
  const pending = client.webhooks.getSigningKey('sig', { signal: ac.signal })
  await until(() => api.requests.length === 2, 'the hanging call')
  ac.abort()
  t.ok(await within(api.requests[1]!.socketClosed, CANCEL_BOUND_MS))
  t.match(await pending, ABORTED)
})

t.test('iterateBatches: abort between pages rejects the pending next() with MailChannelsError', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const ac = new AbortController()
  const it = client.webhooks.iterateBatches({ limit: 2 }, { signal: ac.signal })
  t.equal((await it.next()).done, false)
  t.equal((await it.next()).done, false)
  const held = gate(api.answer)
  api.always = held.behaviour
  const third = it.next()
  await until(() => api.requests.length === 2, 'the second page')
  ac.abort()
  const err = await third.then(() => null, (e: unknown) => e)
  t.type(err, MailChannelsError)
  t.match((err as MailChannelsError).error, ABORTED.error)
  t.ok(await within(api.requests[1]!.socketClosed, CANCEL_BOUND_MS))
  held.release()
})

t.test('request options are validated like the other options', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const cases: Array<[unknown, RegExp]> = [
    [{ signal: 'x' }, /^The signal option must be an AbortSignal\.$/],
    [{ signal: {} }, /^The signal option must be an AbortSignal\.$/],
    [{ signal: null }, /^The signal option must be an AbortSignal\.$/],
    [{ timeout: 5 }, /^Unknown request option 'timeout'\. Valid options are: signal, retryNonIdempotent\.$/],
    ['x', /^Request options must be an object\.$/],
  ]
  for (const [request, message] of cases) {
    t.match(await client.webhooks.batches({}, request as never), { data: null, error: { type: 'validation_error', message } }, JSON.stringify(request))
    t.match(await client.webhooks.getSigningKey('mckey', request as never), { data: null, error: { type: 'validation_error', message } })
    await t.rejects(client.webhooks.iterateBatches({}, request as never).next(), { name: 'MailChannelsError', error: { type: 'validation_error', message } })
  }
  t.equal(api.requests.length, 0)
  t.equal((await client.webhooks.batches({ limit: 1 }, undefined)).error, null)
  t.equal((await client.webhooks.batches({ limit: 1 }, {})).error, null)
  t.equal((await client.webhooks.batches({ limit: 1 }, { signal: undefined })).error, null)
})
