import t from 'tap'
import Fastify from 'fastify'
import { Writable } from 'node:stream'
import { batchesRoute } from '../../src/fastify/index.js'
import { MailChannels } from '../../src/index.js'
import { FAKE_API_KEY, startFakeApi } from '../helpers/fake-api.js'
import { authorize, routeSuite, TOKEN, type MountedRoute } from './helpers/route-suite.js'

function captureStream (): { stream: Writable, text: () => string } {
  const chunks: string[] = []
  return { stream: new Writable({ write (c, _e, cb) { chunks.push(String(c)); cb() } }), text: () => chunks.join('') }
}

async function mountFastify (client: MailChannels, prefix?: string): Promise<MountedRoute> {
  const logs = captureStream()
  const app = Fastify({ logger: { level: 'trace', stream: logs.stream } })
  await app.register(batchesRoute, { client, url: '/webhooks/batches', authorize, ...(prefix === undefined ? {} : { prefix }) })
  await app.ready()
  return {
    async get (url, headers = {}) {
      const res = await app.inject({ method: 'GET', url, headers })
      return { statusCode: res.statusCode, headers: res.headers as Record<string, string>, body: res.json() }
    },
    logs: logs.text,
    close: () => app.close(),
  }
}

routeSuite(t, (client) => mountFastify(client))

t.test('H2: registration fails without authorize or client; options named', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: 'http://127.0.0.1:9' })
  const cases: Array<[unknown, RegExp]> = [
    [{ client }, /^authorize must be a function/],
    [{ client, authorize: true }, /^authorize must be a function/],
    [{ authorize }, /^client must be a MailChannels client/],
    [{ client: {}, authorize }, /^client must be a MailChannels client/],
    [{ client, authorize, url: 'webhooks' }, /^url must be a path starting with "\/"/],
  ]
  for (const [opts, message] of cases) {
    const app = Fastify()
    await t.rejects(async () => { await app.register(batchesRoute, opts as never); await app.ready() }, { name: 'TypeError', message })
    await app.close()
  }
})

t.test('default url, prefix kept in the Link header, other methods not served', async (t) => {
  const api = await startFakeApi()
  t.teardown(() => api.close())
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(batchesRoute, { client: new MailChannels(FAKE_API_KEY, { baseUrl: api.url }), authorize, prefix: '/api' })
  const res = await app.inject({ method: 'GET', url: '/api/webhooks/batches?limit=3', headers: { authorization: `Bearer ${TOKEN}` } })
  t.equal(res.statusCode, 200)
  t.equal(res.headers.link, '</api/webhooks/batches?limit=3&offset=3>; rel="next"')
  const post = await app.inject({ method: 'POST', url: '/api/webhooks/batches', headers: { authorization: `Bearer ${TOKEN}` } })
  t.equal(post.statusCode, 404)
  t.equal(api.requests.length, 1)
})

t.test('a custom client that throws or returns no result -> 502 with no-store, nothing leaked', async (t) => {
  const clients = [
    { webhooks: { batches: async () => { throw new Error('secret internals') } } },
    { webhooks: { batches: async () => undefined } },
    { webhooks: { batches: async () => ({ data: 'x', error: null }) } },
  ]
  for (const client of clients) {
    const app = Fastify()
    await app.register(batchesRoute, { client: client as never, authorize: () => true })
    const res = await app.inject({ method: 'GET', url: '/webhooks/batches' })
    t.equal(res.statusCode, 502)
    t.equal(res.headers['cache-control'], 'no-store')
    t.same(res.json(), { statusCode: 502, code: 'application_error', error: 'Bad Gateway', message: 'Listing webhook batches failed upstream.' })
    await app.close()
  }
})
