// Fail-closed routing: in the plugin's scope every POST route is a webhook
// route unless it says `mailchannelsWebhook: false`; a webhook route the plugin cannot see (a
// scope registered before it, a sibling scope, a route declared before it, no registration at
// all) makes ready() reject with a message saying where to register. No handler ever runs on
// an unverified body.
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import Fastify, { type FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import plugin, { webhookEventsOf } from '../../src/fastify/index.js'
import { delivery, HANDLE, KEYS } from './helpers/fixtures.js'

const OPTIONS = { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false as const }
const WHERE = /Register the plugin before declaring webhook routes, in their scope or a parent scope/

/** Builds an app, expects ready() to reject naming the route, and checks no handler ran for a forged body. */
async function expectRejected (t: Test, build: (app: FastifyInstance, handler: () => object) => Promise<void> | void, route: string, why: RegExp): Promise<void> {
  const app = Fastify()
  let calls = 0
  await build(app, () => { calls++; return { unverified: true } })
  await t.rejects(async () => { await app.ready() }, { message: why }, `${route}: ready() rejects`)
  await t.rejects(async () => { await app.ready() }, { message: WHERE }, `${route}: and says where to register`)
  // Fastify still serves inject() after ready() rejected: the app answers 500 instead.
  const res = await app.inject({ method: 'POST', url: route, headers: { 'content-type': 'application/json' }, payload: '[{"forged":true}]' })
  t.equal(res.statusCode, 500, 'a request anyway is answered 500')
  t.equal(res.json().code, 'configuration_error')
  t.equal(calls, 0, 'no handler ran')
  await app.close().catch(() => {})
}

t.test('a webhook route in a child scope registered before the plugin', async (t) => {
  await expectRejected(t, async (app, h) => {
    await app.register(async (child) => { child.post('/early', { config: { mailchannelsWebhook: true } }, h) })
    await app.register(plugin, OPTIONS)
  }, '/early', /POST \/early is in the scope of mailchannels-webhooks but was declared before the plugin was registered/)
})

t.test('a webhook route in a sibling scope registered after the plugin (registered in its own scope)', async (t) => {
  await expectRejected(t, async (app, h) => {
    await app.register(async (a) => { await a.register(plugin, OPTIONS) })
    await app.register(async (b) => { b.post('/sibling', { config: { mailchannelsWebhook: true } }, h) })
  }, '/sibling', /POST \/sibling opts in with config.mailchannelsWebhook, but no mailchannels-webhooks registration reaches its scope/)
})

t.test('a webhook route in a sibling scope registered before the plugin', async (t) => {
  await expectRejected(t, async (app, h) => {
    await app.register(async (b) => { b.post('/sibling', { config: { mailchannelsWebhook: { maxAge: 60 } } }, h) })
    await app.register(async (a) => { await a.register(plugin, OPTIONS) })
  }, '/sibling', /no mailchannels-webhooks registration reaches its scope/)
})

t.test('a webhook route declared in the same scope before the plugin loaded (register not awaited)', async (t) => {
  await expectRejected(t, (app, h) => {
    app.register(plugin, OPTIONS)
    app.post('/early', { config: { mailchannelsWebhook: true } }, h)
  }, '/early', /declared before the plugin was registered/)
})

t.test('a POST route that forgot the flag, declared before the plugin in its scope', async (t) => {
  await expectRejected(t, async (app, h) => {
    app.post('/forgot', h)
    await app.register(plugin, OPTIONS)
  }, '/forgot', /POST \/forgot is in the scope of mailchannels-webhooks but was declared before/)
})

t.test('an opted-in route with no registration at all', async (t) => {
  await expectRejected(t, (app, h) => {
    app.post('/nowhere', { config: { mailchannelsWebhook: true } }, h)
  }, '/nowhere', /no mailchannels-webhooks registration reaches its scope/)
})

t.test('in the plugin scope a POST route that forgot the flag is verified: a forged body never reaches it', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(plugin, OPTIONS)
  let calls = 0
  app.post('/forgot', async (request) => { calls++; return { n: request.webhookEvents.length } })
  await app.register(async (child) => { child.post('/child', async (request) => { calls++; return { n: request.webhookEvents.length } }) })
  for (const url of ['/forgot', '/child']) {
    const forged = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: '[{"event":"delivered"}]' })
    t.equal(forged.statusCode, 400, `${url}: unsigned body refused`)
    t.equal(forged.json().code, 'missing_header')
    const d = delivery()
    const ok = await app.inject({ method: 'POST', url, headers: d.headers, payload: d.body })
    t.same(ok.json(), { n: 1 }, `${url}: a signed delivery is handled`)
  }
  t.equal(calls, 2)
})

t.test('mailchannelsWebhook: false opts a POST route out: parsed as usual; request.webhookEvents throws there, webhookEventsOf is undefined', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(plugin, OPTIONS)
  const seen: unknown[] = []
  app.post('/login', { config: { mailchannelsWebhook: false } }, async (request) => {
    seen.push(webhookEventsOf(request))
    return { body: request.body, events: request.webhookEvents }
  })
  app.get('/health', async (request) => ({ ok: true, events: webhookEventsOf(request) ?? null }))
  const res = await app.inject({ method: 'POST', url: '/login', headers: { 'content-type': 'application/json' }, payload: '{"user":"a"}' })
  t.equal(res.statusCode, 500, 'reading request.webhookEvents on a route that is not a webhook route throws')
  t.same(seen, [undefined])
  t.same((await app.inject({ method: 'GET', url: '/health' })).json(), { ok: true, events: null }, 'GET routes are not webhook routes')
})

t.test('routes outside the plugin scope are not touched; webhook routes inside it are verified', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(async (webhooks) => {
    await webhooks.register(plugin, OPTIONS)
    webhooks.post('/webhooks', async (request) => ({ n: request.webhookEvents.length }))
  })
  app.post('/api', async (request) => ({ body: request.body }))
  t.same((await app.inject({ method: 'POST', url: '/api', headers: { 'content-type': 'application/json' }, payload: '{"a":1}' })).json(), { body: { a: 1 } })
  const d = delivery()
  t.same((await app.inject({ method: 'POST', url: '/webhooks', headers: d.headers, payload: d.body })).json(), { n: 1 })
  t.equal((await app.inject({ method: 'POST', url: '/webhooks', headers: { 'content-type': 'application/json' }, payload: '[]' })).statusCode, 400)
})

t.test('a multi-method route in the plugin scope must say what it is', async (t) => {
  const app = Fastify()
  await app.register(plugin, OPTIONS)
  t.throws(() => app.route({ method: ['POST', 'PUT'], url: '/both', handler: async () => ({}) }), /POST only|mailchannelsWebhook: false/)
  t.doesNotThrow(() => app.route({ method: ['POST', 'PUT'], url: '/both2', config: { mailchannelsWebhook: false }, handler: async () => ({}) }))
  await app.close()
})

t.test('ready() lists the verified routes in one info line', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (l: string) => { lines.push(JSON.parse(l) as Record<string, unknown>) } } } })
  t.teardown(() => app.close())
  await app.register(plugin, OPTIONS)
  app.post('/a', async () => ({}))
  app.post('/b', { config: { mailchannelsWebhook: true } }, async () => ({}))
  app.post('/c', { config: { mailchannelsWebhook: false } }, async () => ({}))
  await app.ready()
  const line = lines.find((l) => /verifying MailChannels deliveries/.test(String(l.msg)))
  t.same(line?.routes, ['POST /a', 'POST /b'])
})

// The plugin watches an app from its creation (Fastify's `fastify.initialization` channel). An
// app created before the plugin module was loaded (a dynamic import) is watched from the
// plugin's registration: fine when no route exists yet, refused when one does.
t.test('loaded after the instance was created: refused if routes already exist, watched from registration otherwise', async (t) => {
  const root = fileURLToPath(new URL('../../', import.meta.url))
  const script = `
    import Fastify from 'fastify'
    const results = []
    const early = Fastify()
    early.post('/before', async () => ({}))
    const fresh = Fastify()
    const { default: plugin } = await import('./src/fastify/index.ts')
    early.register(plugin, { customerHandles: ['a'], publicKey: ${JSON.stringify(KEYS.publicKey)} })
    results.push(await early.ready().then(() => 'ready', (e) => e.message))
    await fresh.register(async (a) => { await a.register(plugin, { customerHandles: ['a'], publicKey: ${JSON.stringify(KEYS.publicKey)} }) })
    await fresh.register(async (b) => { b.post('/sibling', { config: { mailchannelsWebhook: true } }, async () => ({})) })
    results.push(await fresh.ready().then(() => 'ready', (e) => e.message))
    console.log(JSON.stringify(results))
  `
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', '--input-type=module', '-e', script], { cwd: root, encoding: 'utf8', timeout: 30_000 })
  t.equal(run.status, 0, run.stderr)
  const [early, fresh] = JSON.parse(run.stdout.trim().split('\n').pop()!) as string[]
  t.match(early, /loaded after this Fastify instance was created and routes were already declared/)
  t.match(early, /Import 'mailchannels-webhooks\/fastify' before creating the instance/)
  t.match(fresh, /POST \/sibling opts in with config.mailchannelsWebhook, but no mailchannels-webhooks registration reaches its scope/)
})
