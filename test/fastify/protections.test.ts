// Fastify's own protections and views on webhook routes: the app's bodyLimit
// (server and route) is never loosened; the app's hooks, error handler, access log and handler
// always see the headers the client sent, whatever another plugin's onRoute hook does to the
// route's hook lists; the registration's prefix applies to the plugin's `path` route. Real sockets.
import Fastify, { type FastifyInstance, type FastifyServerOptions, type RouteOptions } from 'fastify'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { WebhookEventRouter } from '../../src/index.js'
import { delivery, event, HANDLE, KEYS, OTHER_KEYS } from './helpers/fixtures.js'

const OPTIONS = { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false as const }
const OPT_IN = { config: { mailchannelsWebhooks: true } }

async function listen (t: Test, app: FastifyInstance): Promise<string> {
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
}

async function post (base: string, url: string, d = delivery()): Promise<{ status: number, body: Record<string, unknown> }> {
  const res = await fetch(`${base}${url}`, { method: 'POST', headers: d.headers, body: d.body })
  const text = await res.text()
  return { status: res.status, body: text === '' ? {} : JSON.parse(text) as Record<string, unknown> }
}

/** A delivery of `n` events: about 100 bytes each. */
function ofEvents (n: number): ReturnType<typeof delivery> {
  return delivery({ events: Array.from({ length: n }, (_, i) => event({ request_id: `r${i}` })) })
}

t.test("bodyLimit: the app's server bodyLimit is never loosened on a webhook route", async (t) => {
  const app = Fastify({ bodyLimit: 2000 } satisfies FastifyServerOptions)
  let calls = 0
  await app.register(plugin, OPTIONS)
  app.post('/hook', OPT_IN, async () => { calls++; return {} })
  const base = await listen(t, app)
  const small = ofEvents(2)
  const large = ofEvents(20)
  t.ok(small.body.length < 2000 && large.body.length > 2000, `bodies of ${small.body.length} and ${large.body.length} bytes`)
  t.equal((await post(base, '/hook', small)).status, 200)
  const res = await post(base, '/hook', large)
  t.equal(res.status, 413, 'over the server bodyLimit: refused')
  t.equal(res.body.code, 'payload_too_large')
  t.equal(calls, 1, 'the handler ran for the small delivery only')
})

t.test("bodyLimit: a route's bodyLimit is never loosened, and the plugin's smaller one still applies", async (t) => {
  const app = Fastify()
  let calls = 0
  await app.register(plugin, { ...OPTIONS, bodyLimit: 1000 })
  app.post('/route-300', { ...OPT_IN, bodyLimit: 300 }, async () => { calls++; return {} })
  app.post('/route-5000', { ...OPT_IN, bodyLimit: 5000 }, async () => { calls++; return {} })
  app.post('/override', { config: { mailchannelsWebhooks: { bodyLimit: 10_000 } }, bodyLimit: 600 }, async () => { calls++; return {} })
  const base = await listen(t, app)
  const d = ofEvents(7)
  t.ok(d.body.length > 600 && d.body.length < 1000, `a delivery of ${d.body.length} bytes`)
  t.equal((await post(base, '/route-300', d)).status, 413, 'route bodyLimit 300 < plugin 1000: 300 applies')
  t.equal((await post(base, '/override', d)).status, 413, 'route bodyLimit 600 < route option 10000: 600 applies')
  t.equal((await post(base, '/route-5000', d)).status, 200, 'under both')
  t.equal((await post(base, '/route-5000', ofEvents(12))).status, 413, 'plugin bodyLimit 1000 < route 5000: 1000 applies')
  t.equal(calls, 1)
})

t.test("bodyLimit: a route declared before the plugin loaded keeps the app's limit too", async (t) => {
  const app = Fastify({ bodyLimit: 2000 })
  let calls = 0
  app.post('/early', OPT_IN, async () => { calls++; return {} })
  app.register(plugin, OPTIONS)
  const base = await listen(t, app)
  t.equal((await post(base, '/early', ofEvents(20))).status, 413)
  t.equal((await post(base, '/early', ofEvents(2))).status, 200)
  t.equal(calls, 1)
})

/** What each stage of the app saw as Content-Type and Content-Length. */
type Seen = Record<string, [unknown, unknown]>

function recordHeaders (app: FastifyInstance, seen: Seen): void {
  const record = (stage: string, headers: Record<string, unknown>): void => { seen[stage] = [headers['content-type'], headers['content-length']] }
  app.addHook('onRequest', async (request) => { record('onRequest', request.headers) })
  app.addHook('preParsing', async (request) => { record('preParsing', request.headers) })
  app.addHook('preValidation', async (request) => { record('preValidation', request.headers) })
  app.addHook('preHandler', async (request) => { record('preHandler', request.headers) })
  app.addHook('onSend', async (request) => { record('onSend', request.headers) })
  app.addHook('onResponse', async (request) => { record('onResponse', request.headers) })
  app.setErrorHandler(async (err, request, reply) => {
    record('errorHandler', request.headers)
    return reply.code((err as { statusCode?: number }).statusCode ?? 500).send({ failed: (err as Error).message })
  })
}

async function until (cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((resolve) => setImmediate(resolve))
}

t.test('headers: every hook, the error handler, the access log and the handler see the headers the client sent', async (t) => {
  const seen: Seen = {}
  const app = Fastify()
  recordHeaders(app, seen)
  await app.register(plugin, OPTIONS)
  app.post('/hook', OPT_IN, async (request) => {
    seen.handler = [request.headers['content-type'], request.headers['content-length']]
    return { n: request.webhookEvents.length }
  })
  const base = await listen(t, app)
  const d = delivery()
  const res = await post(base, '/hook', d)
  t.same(res.body, { n: 1 })
  await until(() => seen.onResponse !== undefined)
  const sent = ['application/json', String(d.body.length)]
  for (const stage of ['onRequest', 'preParsing', 'preValidation', 'preHandler', 'handler', 'onSend', 'onResponse']) {
    t.same(seen[stage], sent, `${stage} sees Content-Type and Content-Length`)
  }
})

t.test("headers: an app-scope preValidation hook that throws: the error handler and onResponse see the client's headers", async (t) => {
  const seen: Seen = {}
  const app = Fastify()
  recordHeaders(app, seen)
  app.addHook('preValidation', async (request) => {
    if (request.url === '/hook') throw Object.assign(new Error('refused by the app'), { statusCode: 403 })
  })
  let calls = 0
  await app.register(plugin, OPTIONS)
  app.post('/hook', OPT_IN, async () => { calls++; return {} })
  const base = await listen(t, app)
  const d = delivery()
  const res = await post(base, '/hook', d)
  t.equal(res.status, 403)
  await until(() => seen.onResponse !== undefined)
  t.same(seen.errorHandler, ['application/json', String(d.body.length)], 'the error handler sees them')
  t.same(seen.onResponse, ['application/json', String(d.body.length)], 'onResponse (access log) sees them')
  t.equal(calls, 0)
})

/** Another plugin whose onRoute hook, added after this plugin's, changes the route's hook lists. */
function rewriter (app: FastifyInstance, change: (routeOptions: RouteOptions, mark: (name: string) => void) => void, marks: string[]): void {
  app.addHook('onRoute', (routeOptions) => {
    if (routeOptions.url === '/hook') change(routeOptions, (name) => { marks.push(name) })
  })
}

t.test("another plugin's onRoute replaces preValidation: the handler still sees the client's headers", async (t) => {
  const marks: string[] = []
  const app = Fastify()
  await app.register(plugin, OPTIONS)
  rewriter(app, (r, mark) => { r.preValidation = [async () => { mark('theirs') }] }, marks)
  let seen: unknown[] = []
  app.post('/hook', OPT_IN, async (request) => {
    seen = [request.headers['content-type'], request.headers['content-length']]
    return { n: request.webhookEvents.length }
  })
  const base = await listen(t, app)
  const d = delivery()
  t.same((await post(base, '/hook', d)).body, { n: 1 })
  t.same(seen, ['application/json', String(d.body.length)])
  t.same(marks, ['theirs'])
})

for (const [name, change] of [
  ['replaces preParsing with its own list', (r: RouteOptions, mark: (n: string) => void) => { r.preParsing = [async () => { mark('theirs') }] }],
  ['pushes onto preParsing', (r: RouteOptions, mark: (n: string) => void) => { (r.preParsing as unknown[]).push(async () => { mark('theirs') }) }],
  ['assigns a single preParsing hook', (r: RouteOptions, mark: (n: string) => void) => { r.preParsing = async () => { mark('theirs') } }],
] as const) {
  t.test(`another plugin's onRoute ${name}: verification stays, and runs after that hook`, async (t) => {
    const marks: string[] = []
    const app = Fastify()
    let parsed = 0
    app.removeContentTypeParser('application/json')
    app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => { parsed++; done(null, JSON.parse(body as string)) })
    await app.register(plugin, OPTIONS)
    rewriter(app, change, marks)
    let calls = 0
    app.post('/hook', OPT_IN, async (request) => {
      calls++
      return { n: request.webhookEvents.length, type: request.headers['content-type'] }
    })
    const base = await listen(t, app)
    const forged = await post(base, '/hook', delivery({ privateKey: OTHER_KEYS.privateKey }))
    t.equal(forged.status, 401, 'a forged delivery is still refused')
    t.same(await post(base, '/hook'), { status: 200, body: { n: 1, type: 'application/json' } })
    t.equal(calls, 1)
    t.equal(parsed, 0, "the app's parser never ran: the plugin's hook was still the last")
    t.same(marks, ['theirs', 'theirs'], 'their hook ran, before verification')
  })
}

t.test('a preParsing hook that cannot be dropped: deleting it throws at route declaration', async (t) => {
  const app = Fastify()
  await app.register(plugin, OPTIONS)
  rewriter(app, (r) => { delete (r as { preParsing?: unknown }).preParsing }, [])
  t.throws(() => app.post('/hook', OPT_IN, async () => ({})), TypeError)
  await app.close()
})

t.test('prefix: register(plugin, { path, prefix }) declares the route under the prefix', async (t) => {
  const handled: string[] = []
  const app = Fastify()
  await app.register(plugin, { ...OPTIONS, path: '/hook', prefix: '/api', handlers: new WebhookEventRouter().on('*', (e) => { handled.push(e.event) }) })
  const base = await listen(t, app)
  t.equal((await post(base, '/api/hook')).status, 200, 'POST /api/hook')
  t.equal((await post(base, '/hook')).status, 404, 'not at /hook')
  t.same(handled, ['delivered'])
  const nested = Fastify()
  nested.register(async (scope) => {
    await scope.register(plugin, { ...OPTIONS, path: '/hook', prefix: '/api', handlers: new WebhookEventRouter().on('*', (e) => { handled.push(`v1:${e.event}`) }) })
  }, { prefix: '/v1' })
  const nestedBase = await listen(t, nested)
  t.equal((await post(nestedBase, '/v1/api/hook')).status, 200, 'POST /v1/api/hook: the scope prefix, then the registration prefix')
  t.equal((await post(nestedBase, '/v1/hook')).status, 404)
  t.same(handled, ['delivered', 'v1:delivered'])
})

t.test('prefix: a prefix that is not a string is refused at registration', async (t) => {
  const app = Fastify()
  app.register(plugin, { ...OPTIONS, path: '/hook', prefix: 42 as unknown as string, handlers: new WebhookEventRouter() })
  await t.rejects(Promise.resolve(app.ready()), { code: 'FST_MCWH_INVALID_OPTION', message: /prefix must be a string/ })
  await app.close().catch(() => {})
})
