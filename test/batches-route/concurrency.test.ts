import t from 'tap'
import Fastify from 'fastify'
import { setTimeout as sleep } from 'node:timers/promises'
import { batchesRoute as expressBatchesRoute } from '../../src/express/index.js'
import { batchesRoute } from '../../src/fastify/index.js'
import { DEFAULT_MAX_CONCURRENT } from '../../src/batches-route/core.js'
import { MailChannels } from '../../src/index.js'
import { FAKE_API_KEY, gate, startFakeApi, useFakeApi, type FakeApi } from '../helpers/fake-api.js'
import { frameworks, getAndLeave, rawGet, type Served } from './helpers/servers.js'
import { until } from '../helpers/wait.js'

// maxConcurrent bounds the upstream calls one route keeps open: when full, an authorized
// request gets 503 with Retry-After and no upstream call; denied and invalid requests never
// take a slot; a slot is freed when its call ends, including when the client left.

const TOKEN = 'concurrency-token'
const AUTH = { authorization: `Bearer ${TOKEN}` }
const authorize = (req: { headers: Record<string, string | string[] | undefined> }): boolean => req.headers.authorization === `Bearer ${TOKEN}`

for (const fw of frameworks) {
  t.test(fw.name, async (t) => {
    let api: FakeApi
    let route: Served
    const fake = useFakeApi(t)
    t.before(async () => {
      api = fake.api
      route = await fw.start({ client: new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 }), authorize, maxConcurrent: 2 })
    })
    t.teardown(async () => {
      await route.close()
    })

    t.test('full: 503 with Retry-After and no-store, no upstream call; slots come back', async (t) => {
      const held = gate(api.answer)
      api.always = held.behaviour
      const first = [rawGet(route.port, '/webhooks/batches?limit=1', AUTH), rawGet(route.port, '/webhooks/batches?limit=2', AUTH)]
      await until(() => api.requests.length === 2, 'two upstream calls')

      const busy = await rawGet(route.port, '/webhooks/batches?limit=3', AUTH)
      t.equal(busy.status, 503)
      t.equal(busy.headers['retry-after'], '1')
      t.equal(busy.headers['cache-control'], 'no-store')
      t.same(JSON.parse(busy.body), { statusCode: 503, code: 'overloaded', error: 'Service Unavailable', message: 'Too many webhook batch listings are in progress; try again shortly.' })
      // Denied and invalid requests are answered as usual: they never need a slot.
      t.equal((await rawGet(route.port, '/webhooks/batches')).status, 401)
      t.equal((await rawGet(route.port, '/webhooks/batches?limit=0', AUTH)).status, 400)
      t.equal(api.requests.length, 2, 'no upstream call for the refused request')

      held.release()
      for (const r of await Promise.all(first)) t.equal(r.status, 200)
      api.always = null
      const again = await Promise.all([rawGet(route.port, '/webhooks/batches?limit=1', AUTH), rawGet(route.port, '/webhooks/batches?limit=1', AUTH)])
      t.same(again.map((r) => r.status), [200, 200], 'both slots are free again')
    })

    t.test('a client that leaves frees its slot', async (t) => {
      const held = gate(api.answer)
      api.always = held.behaviour
      await getAndLeave(route.port, '/webhooks/batches', AUTH, until(() => api.requests.length === 1, 'first call'))
      await getAndLeave(route.port, '/webhooks/batches', AUTH, until(() => api.requests.length === 2, 'second call'))
      await Promise.all(api.requests.map((r) => r.socketClosed))
      api.always = null
      held.release()
      let res = await rawGet(route.port, '/webhooks/batches?limit=1', AUTH)
      // The slot is released when the cancelled call settles, right after its socket closed.
      for (let i = 0; i < 50 && res.status === 503; i++) {
        await sleep(20)
        res = await rawGet(route.port, '/webhooks/batches?limit=1', AUTH)
      }
      t.equal(res.status, 200)
    })
  })
}

t.test('maxConcurrent is validated at registration, with a default', async (t) => {
  t.equal(DEFAULT_MAX_CONCURRENT, 10)
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: 'http://127.0.0.1:9' })
  for (const bad of [0, -1, 1.5, '2', NaN, -Infinity]) {
    t.throws(() => expressBatchesRoute({ client, authorize, maxConcurrent: bad as never }), { name: 'TypeError', message: /^maxConcurrent must be a positive integer or Infinity/ }, String(bad))
    const app = Fastify()
    await t.rejects(async () => { await app.register(batchesRoute, { client, authorize, maxConcurrent: bad as never }); await app.ready() }, { name: 'TypeError', message: /^maxConcurrent must be/ })
    await app.close()
  }
  t.doesNotThrow(() => expressBatchesRoute({ client, authorize, maxConcurrent: Infinity }))
  t.doesNotThrow(() => expressBatchesRoute({ client, authorize, maxConcurrent: 1 }))
})

t.test('the default cap applies without the option', async (t) => {
  const api: FakeApi = await startFakeApi()
  t.teardown(() => api.close())
  const held = gate(api.answer)
  api.always = held.behaviour
  const fw = frameworks[0]!
  const route = await fw.start({ client: new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 }), authorize })
  t.teardown(() => route.close())
  const first = Array.from({ length: DEFAULT_MAX_CONCURRENT }, () => rawGet(route.port, '/webhooks/batches?limit=1', AUTH))
  await until(() => api.requests.length === DEFAULT_MAX_CONCURRENT, 'the default number of calls')
  t.equal((await rawGet(route.port, '/webhooks/batches?limit=1', AUTH)).status, 503)
  held.release()
  for (const r of await Promise.all(first)) t.equal(r.status, 200)
})
