import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { MailChannels } from '../../src/index.js'
import { delayed, FAKE_API_KEY, hang, reply, useFakeApi, type FakeApi } from '../helpers/fake-api.js'
import { ANSWER_AFTER, ANSWER_ON_DEMAND, frameworks, getAndLeave, rawGet, type Served } from './helpers/servers.js'
import { within, until } from '../helpers/wait.js'

// Requests the route no longer answers: something else answered first (a timeout middleware,
// an earlier error handler) or the client left. The route must never write a second response
// (on Express that used to throw ERR_HTTP_HEADERS_SENT inside a promise and end the process:
// this file would then fail as a crash), and it must cancel the upstream call and its retries.

const TOKEN = 'abandon-token'
const AUTH = { authorization: `Bearer ${TOKEN}` }
/** How long a cancelled upstream call may take to close its socket (the client's timeout is 30 s). */
const CANCEL_BOUND_MS = 2000
const SLOW_AUTH_MS = 300

async function authorize (req: { headers: Record<string, string | string[] | undefined> }): Promise<boolean> {
  const mode = req.headers['x-test-auth']
  if (mode === 'slow-allow' || mode === 'slow-deny') {
    await sleep(SLOW_AUTH_MS)
    return mode === 'slow-allow'
  }
  return req.headers.authorization === `Bearer ${TOKEN}`
}

const NO_DOUBLE_WRITE = /ERR_HTTP_HEADERS_SENT|already sent|app error handler/i

// The frameworks use separate servers and fake APIs: run them side by side (most of the time is waiting).
t.jobs = frameworks.length

for (const fw of frameworks) {
  t.test(fw.name, async (t) => {
    let api: FakeApi
    let route: Served
    let retrying: Served
    const fake = useFakeApi(t)
    t.before(async () => {
      api = fake.api
      // Default timeout (30 s): whatever closes the upstream socket sooner is the cancellation.
      route = await fw.start({ client: new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 }), authorize })
      retrying = await fw.start({ client: new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 2, maxRetryDelay: 5000 }), authorize })
    })
    t.teardown(async () => {
      await route.close()
      await retrying.close()
    })

    const stillServing = async (t: Test, served: Served): Promise<void> => {
      const res = await rawGet(served.port, '/webhooks/batches?limit=1', AUTH)
      t.equal(res.status, 200, 'the server keeps serving')
      t.equal(JSON.parse(res.body).data.length, 1)
    }

    t.test('a timeout middleware answers 503 before a slow upstream: no second write, upstream call cancelled', async (t) => {
      api.queue.push(delayed(400, api.answer))
      const pending = rawGet(route.port, '/webhooks/batches?limit=1', { ...AUTH, [ANSWER_ON_DEMAND]: '1' })
      await until(() => api.requests.length === 1, 'the upstream call')
      t.equal(route.answerPending(), 1, 'the timeout fires while the upstream call is in flight')
      const res = await pending
      t.equal(res.status, 503)
      t.same(JSON.parse(res.body), { timedOut: true }, 'the timeout middleware\'s answer, untouched')
      t.equal(api.requests.length, 1)
      t.ok(await within(api.requests[0]!.socketClosed, CANCEL_BOUND_MS), 'the upstream call was cancelled when the response was answered')
      await sleep(500) // past the moment the slow upstream would have answered
      await stillServing(t, route)
      t.notMatch(route.logs(), NO_DOUBLE_WRITE)
    })

    t.test('a slow async authorize that denies after the timeout answered: no second write', async (t) => {
      const res = await rawGet(route.port, '/webhooks/batches', { 'x-test-auth': 'slow-deny', [ANSWER_AFTER]: '50' })
      t.equal(res.status, 503)
      await sleep(SLOW_AUTH_MS + 100)
      await stillServing(t, route)
      t.equal(api.requests.length, 1, 'only the request that checked the server')
      t.notMatch(route.logs(), NO_DOUBLE_WRITE)
    })

    t.test('a slow async authorize that allows after the timeout answered: no upstream call at all', async (t) => {
      const res = await rawGet(route.port, '/webhooks/batches', { 'x-test-auth': 'slow-allow', [ANSWER_AFTER]: '50' })
      t.equal(res.status, 503)
      await sleep(SLOW_AUTH_MS + 100)
      t.equal(api.requests.length, 0, 'the answered request spent no API quota')
      await stillServing(t, route)
      t.notMatch(route.logs(), NO_DOUBLE_WRITE)
    })

    t.test('the client leaves during the upstream call: the upstream socket is closed', async (t) => {
      api.queue.push(hang)
      await getAndLeave(route.port, '/webhooks/batches', AUTH, until(() => api.requests.length === 1, 'the upstream call'))
      t.ok(await within(api.requests[0]!.socketClosed, CANCEL_BOUND_MS), 'the upstream saw its socket closed soon after the client left')
      await stillServing(t, route)
    })

    t.test('the client leaves while a retry is pending: no retry is sent', async (t) => {
      api.always = reply(503, { message: 'busy' }, { 'retry-after': '1' })
      await getAndLeave(retrying.port, '/webhooks/batches', AUTH, until(() => api.requests.length === 1, 'the first attempt'))
      await sleep(1500) // past the Retry-After of 1 s
      t.equal(api.requests.length, 1, 'the retry was cancelled with the request')
      api.always = null
      await stillServing(t, retrying)
    })

    t.test('the client leaves during a slow authorize: no upstream call', async (t) => {
      await getAndLeave(route.port, '/webhooks/batches', { ...AUTH, 'x-test-auth': 'slow-allow' }, sleep(50))
      await sleep(SLOW_AUTH_MS + 100)
      t.equal(api.requests.length, 0)
      await stillServing(t, route)
    })
  })
}
