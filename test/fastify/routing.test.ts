// Which routes are webhook routes: opt-in only (the plugin's `path` route, or
// `config.mailchannelsWebhooks`). A webhook route fails closed: its handler never runs on an
// unverified body; an opt-in that no registration reaches is refused at ready() where the plugin
// sees it, and answered 500 configuration_error otherwise.
import Fastify, { type FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import plugin, { webhookEventsOf } from '../../src/fastify/index.js'
import { WebhookEventRouter } from '../../src/index.js'
import { delivery, HANDLE, KEYS, logCapture } from './helpers/fixtures.js'
import pino from 'pino'

const OPTIONS = { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false as const }
const NOT_REACHED = /opts? in with config\.mailchannelsWebhooks, but no registration of the plugin reaches (its scope|their scopes)\. Declare webhook routes in the scope the plugin is registered in/

/** Expects ready() to reject naming the route, a request to be answered 500 configuration_error, and no handler to have run. */
async function expectNotReached (t: Test, build: (app: FastifyInstance, handler: () => object) => Promise<void> | void, route: string): Promise<void> {
  const logs = logCapture()
  const app = Fastify({ loggerInstance: pino(logs.stream) }) as unknown as FastifyInstance
  let calls = 0
  await build(app, () => { calls++; return { unverified: true } })
  const err = await app.ready().then(() => null, (e: unknown) => e as Error & { code?: string })
  t.match(err?.message, NOT_REACHED, `${route}: ready() rejects`)
  t.match(err?.message, `POST ${route}`, 'naming the route')
  t.equal(err?.code, 'FST_MCWH_ROUTE_NOT_REACHED')
  // Fastify still serves inject() after ready() rejected: the route answers 500 instead.
  const res = await app.inject({ method: 'POST', url: route, headers: { 'content-type': 'application/json' }, payload: '[{"forged":true}]' })
  t.equal(res.statusCode, 500, 'a request anyway is answered 500')
  t.equal(res.json().code, 'configuration_error')
  t.equal(calls, 0, 'no handler ran')
  t.ok(logs.lines().some((l) => l.level === 50 && /no registration of the plugin reaches its scope/.test(String(l.msg))), 'logged at error level')
  await app.close().catch(() => {})
}

t.test('an opted-in route in a sibling scope registered after the plugin (registered in its own scope)', async (t) => {
  await expectNotReached(t, async (app, h) => {
    await app.register(async (a) => { await a.register(plugin, OPTIONS) })
    await app.register(async (b) => { b.post('/sibling', { config: { mailchannelsWebhooks: true } }, h) })
  }, '/sibling')
})

t.test('an opted-in route at the root, declared after the plugin was registered in a child scope', async (t) => {
  await expectNotReached(t, async (app, h) => {
    await app.register(async (a) => { await a.register(plugin, OPTIONS) })
    app.post('/root', { config: { mailchannelsWebhooks: { maxAge: 60 } } }, h)
  }, '/root')
})

t.test('an opted-in route at the root, the plugin registered in a child scope without await', async (t) => {
  await expectNotReached(t, (app, h) => {
    app.register(async (a) => { await a.register(plugin, OPTIONS) })
    app.register(async (b) => { b.post('/later', { config: { mailchannelsWebhooks: true } }, h) })
  }, '/later')
})

t.test('routes declared in the plugin scope before it loaded are webhook routes: verified, options checked at the first request', async (t) => {
  const logs = logCapture()
  const app = Fastify({ loggerInstance: pino(logs.stream) })
  t.teardown(() => app.close())
  let calls = 0
  app.post('/before', { config: { mailchannelsWebhooks: true } }, async (request) => { calls++; return { n: request.webhookEvents.length } })
  app.register(plugin, OPTIONS)
  app.post('/after', { config: { mailchannelsWebhooks: true } }, async (request) => { calls++; return { n: request.webhookEvents.length } })
  app.post('/bad', { config: { mailchannelsWebhooks: { maxAge: -1 } } }, async () => { calls++; return {} })
  await app.ready()
  for (const url of ['/before', '/after']) {
    const forged = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: '[{"event":"delivered"}]' })
    t.equal(forged.statusCode, 400, `${url}: unsigned body refused`)
    t.equal(forged.json().code, 'missing_header')
    const d = delivery()
    const tampered = await app.inject({ method: 'POST', url, headers: d.headers, payload: Buffer.from(d.body.toString().replace('delivered', 'dropped')) })
    t.equal(tampered.statusCode, 401, `${url}: tampered -> 401`)
    t.same((await app.inject({ method: 'POST', url, headers: d.headers, payload: d.body })).json(), { n: 1 }, `${url}: a signed delivery is handled`)
  }
  const d = delivery()
  const bad = await app.inject({ method: 'POST', url: '/bad', headers: d.headers, payload: d.body })
  t.equal(bad.statusCode, 500)
  t.equal(bad.json().code, 'configuration_error')
  t.notMatch(bad.body, /maxAge/, 'the reply does not describe the server configuration')
  t.ok(logs.lines().some((l) => l.level === 50 && /maxAge/.test(String(l.err))), 'the log names the option')
  t.equal(calls, 2)
})

t.test('a route declared before the plugin with handlers in the options is answered by the plugin', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  const seen: string[] = []
  let own = 0
  app.register(plugin, { ...OPTIONS, handlers: new WebhookEventRouter().on('*', (e) => { seen.push(e.event) }) })
  app.post('/hook', { config: { mailchannelsWebhooks: true } }, async () => { own++; return 'own' })
  const d = delivery()
  const res = await app.inject({ method: 'POST', url: '/hook', headers: d.headers, payload: d.body })
  t.same(res.json(), { handled: 1, skipped: 0, unhandled: 0 })
  t.same(seen, ['delivered'])
  t.equal(own, 0)
})

t.test('a POST route without the config key is not a webhook route: parsed as usual; request.webhookEvents throws there, webhookEventsOf is undefined', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(plugin, OPTIONS)
  const seen: unknown[] = []
  const errors: string[] = []
  for (const [url, config] of [['/login', {}], ['/explicit', { mailchannelsWebhooks: false }]] as const) {
    app.post(url, { config }, async (request) => {
      seen.push(webhookEventsOf(request))
      try {
        return request.webhookEvents
      } catch (err) {
        errors.push((err as Error).message)
        return { body: request.body }
      }
    })
  }
  for (const url of ['/login', '/explicit']) {
    const res = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: '{"user":"a"}' })
    t.same(res.json(), { body: { user: 'a' } }, `${url}: parsed by Fastify`)
  }
  t.same(seen, [undefined, undefined])
  t.equal(errors.length, 2)
  t.match(errors[0], /only set on a MailChannels webhook route .* this route is not a webhook route\. Use webhookEventsOf\(request\)/)
})

t.test('request.webhookEvents in a hook before verification or of a refused delivery throws, saying why', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(plugin, OPTIONS)
  const messages: string[] = []
  app.addHook('onRequest', async (request) => {
    try { void request.webhookEvents } catch (err) { messages.push((err as Error).message) }
  })
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async () => ({}))
  await app.inject({ method: 'POST', url: '/wh', headers: { 'content-type': 'application/json' }, payload: '[]' })
  t.equal(messages.length, 1)
  t.match(messages[0], /this request carries no verified delivery \(it was refused, or this hook runs before verification/)
})

t.test('routes outside the plugin scope are not touched; webhook routes inside it are verified', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(async (webhooks) => {
    await webhooks.register(plugin, OPTIONS)
    webhooks.post('/webhooks', { config: { mailchannelsWebhooks: true } }, async (request) => ({ n: request.webhookEvents.length }))
  })
  app.post('/api', async (request) => ({ body: request.body }))
  t.same((await app.inject({ method: 'POST', url: '/api', headers: { 'content-type': 'application/json' }, payload: '{"a":1}' })).json(), { body: { a: 1 } })
  const d = delivery()
  t.same((await app.inject({ method: 'POST', url: '/webhooks', headers: d.headers, payload: d.body })).json(), { n: 1 })
  t.equal((await app.inject({ method: 'POST', url: '/webhooks', headers: { 'content-type': 'application/json' }, payload: '[]' })).statusCode, 400)
})

t.test('only a POST route may opt in, alone: other methods fail at declaration with a coded error', async (t) => {
  const app = Fastify()
  await app.register(plugin, OPTIONS)
  for (const method of ['GET', 'PUT', ['POST', 'PUT']] as const) {
    t.throws(() => app.route({ method: method as never, url: `/wh-${String(method)}`, config: { mailchannelsWebhooks: true }, handler: async () => ({}) }), { code: 'FST_MCWH_INVALID_ROUTE', message: /POST only/ })
  }
  t.doesNotThrow(() => app.route({ method: ['POST', 'PUT'], url: '/both', handler: async () => ({}) }), 'a multi-method route that does not opt in is none of the plugin\'s business')
  await app.close()
})

t.test('the path route is declared by the plugin, in its own scope, and answered by it', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  const seen: string[] = []
  await app.register(plugin, { ...OPTIONS, path: '/webhooks/mailchannels', handlers: new WebhookEventRouter().on('*', (e) => { seen.push(e.event) }) })
  const d = delivery()
  t.same((await app.inject({ method: 'POST', url: '/webhooks/mailchannels', headers: d.headers, payload: d.body })).json(), { handled: 1, skipped: 0, unhandled: 0 })
  t.equal((await app.inject({ method: 'POST', url: '/webhooks/mailchannels', headers: d.headers, payload: Buffer.from('[]') })).statusCode, 401)
  t.same(seen, ['delivered'])
})

t.test('ready() lists the verified routes in one info line', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (l: string) => { lines.push(JSON.parse(l) as Record<string, unknown>) } } } })
  t.teardown(() => app.close())
  await app.register(plugin, OPTIONS)
  app.post('/a', async () => ({}))
  app.post('/b', { config: { mailchannelsWebhooks: true } }, async () => ({}))
  app.post('/c', { config: { mailchannelsWebhooks: false } }, async () => ({}))
  await app.ready()
  const line = lines.find((l) => /verifying MailChannels deliveries/.test(String(l.msg)))
  t.same(line?.routes, ['POST /b'])
})

t.test('the plugin adds no hook and no parser to an app whose routes come after it', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(plugin, { ...OPTIONS, path: '/webhooks/mailchannels', handlers: new WebhookEventRouter() })
  app.post('/login', async (request) => request.body)
  app.post('/hook', { config: { mailchannelsWebhooks: true } }, async () => ({}))
  await app.ready()
  const routes = app.printRoutes({ commonPrefix: false, includeHooks: true })
  const block = (path: string): string => routes.slice(routes.indexOf(`${path} (POST)`)).split(/\n[├└]/)[0]!
  t.notMatch(block('/login'), /•/, 'POST /login has no hook')
  t.match(block('/hook'), /\(preParsing\) \["verifyMailChannelsDelivery\(\)"\]/, 'the opted-in route has the plugin\'s hook')
  t.match(block('/webhooks/mailchannels'), /verifyMailChannelsDelivery/)
})

t.test('an opted-in root route declared before the plugin loaded in a child scope: ready() cannot see it, so it is answered 500, logged', async (t) => {
  const logs = logCapture()
  const app = Fastify({ loggerInstance: pino(logs.stream) })
  t.teardown(() => app.close())
  let calls = 0
  app.post('/login', async (request) => request.body)
  app.register(async (scope) => { await scope.register(plugin, { ...OPTIONS, path: '/hook', handlers: new WebhookEventRouter() }) })
  app.post('/elsewhere', { config: { mailchannelsWebhooks: true } }, async () => { calls++; return {} })
  await app.ready()
  const d = delivery()
  const res = await app.inject({ method: 'POST', url: '/elsewhere', headers: d.headers, payload: d.body })
  t.equal(res.statusCode, 500)
  t.equal(res.json().code, 'configuration_error')
  t.equal(calls, 0, 'the handler never ran')
  t.ok(logs.lines().some((l) => l.level === 50 && /no registration of the plugin reaches its scope/.test(String(l.msg))))
  t.same((await app.inject({ method: 'POST', url: '/login', payload: { a: 1 } })).json(), { a: 1 }, 'other routes are untouched')
  t.same((await app.inject({ method: 'POST', url: '/hook', headers: d.headers, payload: d.body })).json(), { handled: 0, skipped: 0, unhandled: 1 })
})

t.test('two registrations in sibling scopes, routes declared before each loaded: each covers its own scope', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  app.post('/login', async (request) => request.body)
  await app.register(async (a) => { await a.register(plugin, OPTIONS); a.post('/a', { config: { mailchannelsWebhooks: true } }, async (request) => ({ n: request.webhookEvents.length })) })
  await app.register(async (b) => {
    b.post('/b', { config: { mailchannelsWebhooks: true } }, async (request) => ({ n: request.webhookEvents.length }))
    await b.register(plugin, OPTIONS)
  })
  await app.ready()
  for (const url of ['/a', '/b']) {
    const d = delivery()
    t.same((await app.inject({ method: 'POST', url, headers: d.headers, payload: d.body })).json(), { n: 1 }, `${url}: verified`)
    t.equal((await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: '[]' })).statusCode, 400, `${url}: unsigned refused`)
  }
})

t.test('an opted-in route in a scope registered before the plugin: verified when the plugin is registered in a parent scope', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  let calls = 0
  await app.register(async (routes) => {
    routes.post('/early', { config: { mailchannelsWebhooks: true } }, async (request) => { calls++; return { n: request.webhookEvents.length } })
  })
  await app.register(plugin, OPTIONS)
  const unsigned = await app.inject({ method: 'POST', url: '/early', headers: { 'content-type': 'application/json' }, payload: '[{"event":"delivered","customer_handle":"acct_1","timestamp":1}]' })
  t.equal(unsigned.statusCode, 400)
  t.equal(unsigned.json().code, 'missing_header')
  const d = delivery()
  t.same((await app.inject({ method: 'POST', url: '/early', headers: d.headers, payload: d.body })).json(), { n: 1 })
  t.equal(calls, 1)
})

t.test('an opted-in route in a sibling scope registered before the plugin (registered in its own scope): answered 500, logged, its handler never runs', async (t) => {
  const logs = logCapture()
  const app = Fastify({ loggerInstance: pino(logs.stream) })
  t.teardown(() => app.close())
  let calls = 0
  await app.register(async (routes) => {
    routes.post('/early', { config: { mailchannelsWebhooks: true } }, async () => { calls++; return {} })
  })
  await app.register(async (webhooks) => { await webhooks.register(plugin, OPTIONS) })
  await app.ready()
  const d = delivery()
  const res = await app.inject({ method: 'POST', url: '/early', headers: d.headers, payload: d.body })
  t.equal(res.statusCode, 500)
  t.equal(res.json().code, 'configuration_error')
  t.equal(calls, 0)
  t.ok(logs.lines().some((l) => l.level === 50 && /no registration of the plugin reaches its scope/.test(String(l.msg))))
})

t.test('hooks that read the headers around the plugin\'s own do not make Fastify parse a delivery: the handler sees the real headers', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  const seenInHooks: unknown[] = []
  app.post('/early', { config: { mailchannelsWebhooks: true } }, async (request) => ({ n: request.webhookEvents.length, type: request.headers['content-type'], length: request.headers['content-length'] }))
  app.register(plugin, OPTIONS)
  app.post('/seen', {
    config: { mailchannelsWebhooks: true },
    preParsing: (request, _reply, payload, done) => { seenInHooks.push(request.headers['content-type']); done(null, payload) },
  }, async (request) => ({ n: request.webhookEvents.length, type: request.headers['content-type'], length: request.headers['content-length'] }))
  // A scope hook added after the plugin (as a compression plugin would) reads the headers too.
  app.register(async (other) => {
    other.addHook('preParsing', (request, _reply, payload, done) => { seenInHooks.push(request.headers['content-encoding'] ?? 'none'); done(null, payload) })
  }, { encapsulate: false } as never)
  app.addHook('preParsing', (request, _reply, payload, done) => { seenInHooks.push(request.headers['content-type'] ?? 'hidden'); done(null, payload) })
  await app.ready()
  for (const url of ['/early', '/seen']) {
    const d = delivery()
    const res = await app.inject({ method: 'POST', url, headers: d.headers, payload: d.body })
    t.same(res.json(), { n: 1, type: 'application/json', length: String(d.body.length) }, `${url}: handled, headers intact`)
  }
  t.ok(seenInHooks.length > 0)
})
