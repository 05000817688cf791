import t from 'tap'
import express from 'express'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { batchesRoute } from '../../src/express/index.js'
import { MailChannels } from '../../src/index.js'
import { FAKE_API_KEY, startFakeApi } from '../helpers/fake-api.js'
import { authorize, routeSuite, TOKEN, type MountedRoute, type RouteResponse } from './helpers/route-suite.js'

async function listen (app: http.RequestListener): Promise<{ base: string, close: () => Promise<void> }> {
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { base, close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }) }
}

async function get (base: string, url: string, headers: Record<string, string> = {}): Promise<RouteResponse> {
  const res = await fetch(`${base}${url}`, { headers })
  const text = await res.text()
  return { statusCode: res.status, headers: Object.fromEntries(res.headers), body: text === '' ? null : JSON.parse(text) }
}

async function mountExpress (client: MailChannels): Promise<MountedRoute> {
  const chunks: string[] = []
  const logger = pino({ level: 'trace' }, new Writable({ write (c, _e, cb) { chunks.push(String(c)); cb() } }))
  const app = express()
  app.use(batchesRoute({ client, path: '/webhooks/batches', authorize, logger }))
  const server = await listen(app)
  return { get: (url, headers) => get(server.base, url, headers), logs: () => chunks.join(''), close: server.close }
}

routeSuite(t, mountExpress)

t.test('H2: creating the router fails without authorize or client; options named', async (t) => {
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: 'http://127.0.0.1:9' })
  const cases: Array<[unknown, RegExp]> = [
    [{ client }, /^authorize must be a function/],
    [{ authorize }, /^client must be a MailChannels client/],
    [{ client, authorize, path: 'x' }, /^path must be a path starting with "\/"/],
    [{ client, authorize, logger: {} }, /^logger must have/],
    [undefined, /options must be an object/],
  ]
  for (const [opts, message] of cases) t.throws(() => batchesRoute(opts as never), { name: 'TypeError', message })
})

t.test('mounted under a prefix; other methods and paths go to next(); works without Express', async (t) => {
  const api = await startFakeApi()
  t.teardown(() => api.close())
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
  const app = express()
  app.use('/api', batchesRoute({ client, authorize }))
  app.use((_req, res) => { res.status(404).json({ next: true }) })
  const server = await listen(app)
  t.teardown(server.close)
  const auth = { authorization: `Bearer ${TOKEN}` }
  const res = await get(server.base, '/api/webhooks/batches?limit=3', auth)
  t.equal(res.statusCode, 200)
  t.equal(res.headers.link, '</api/webhooks/batches?limit=3&offset=3>; rel="next"')
  const post = await fetch(`${server.base}/api/webhooks/batches`, { method: 'POST', headers: auth })
  t.equal(post.status, 404)
  t.same(await post.json(), { next: true })
  t.equal((await get(server.base, '/api/webhooks/other', auth)).body.next, true)
  t.equal(api.requests.length, 1)

  // The same middleware on a bare node:http server (no Express at all).
  const mw = batchesRoute({ client, authorize })
  const bare = await listen((req, res) => mw(req, res, () => { res.statusCode = 404; res.end() }))
  t.teardown(bare.close)
  const r = await get(bare.base, '/webhooks/batches?limit=1', auth)
  t.equal(r.statusCode, 200)
  t.equal(r.body.data.length, 1)
  t.equal((await fetch(`${bare.base}/nope`)).status, 404)
})

t.test('a failure inside the route (here a logger that throws) goes to next(err); the process keeps serving', async (t) => {
  const api = await startFakeApi()
  t.teardown(() => api.close())
  const client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 })
  const boom = (): never => { throw new Error('logger down') }
  const errors: string[] = []
  const app = express()
  app.use(batchesRoute({ client, authorize, logger: { debug: boom, info: boom, warn: boom, error: boom } }))
  app.use((err: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    errors.push(err.message)
    res.status(500).json({ handledBy: 'app' })
  })
  const server = await listen(app)
  t.teardown(server.close)
  const auth = { authorization: `Bearer ${TOKEN}` }
  api.queue.push((_req, res) => { res.statusCode = 500; res.end('x') }) // the route logs upstream failures
  const res = await get(server.base, '/webhooks/batches', auth)
  t.equal(res.statusCode, 500)
  t.same(res.body, { handledBy: 'app' })
  t.same(errors, ['logger down'])
  t.equal((await get(server.base, '/webhooks/batches?limit=1', auth)).statusCode, 200, 'still serving')
})
