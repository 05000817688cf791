// No import-time side effect: an app created, with routes declared, before the plugin's module
// is even loaded (this file imports it dynamically, nothing else imports it first) still gets
// verified webhook routes, and its other routes are left alone.
import Fastify from 'fastify'
import t from 'tap'
import { delivery, HANDLE, KEYS } from './helpers/fixtures.js'

t.test('the app and its routes exist before the plugin module is imported', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  let calls = 0
  app.post('/login', async (request) => ({ body: request.body }))
  app.post('/early', { config: { mailchannelsWebhooks: true } }, async (request) => { calls++; return { n: request.webhookEvents.length } })
  const { default: plugin } = await import('../../src/fastify/index.js')
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false })
  app.post('/late', { config: { mailchannelsWebhooks: true } }, async (request) => { calls++; return { n: request.webhookEvents.length } })
  await app.ready()

  t.same((await app.inject({ method: 'POST', url: '/login', payload: { user: 'a' } })).json(), { body: { user: 'a' } })
  for (const url of ['/early', '/late']) {
    const d = delivery()
    t.same((await app.inject({ method: 'POST', url, headers: d.headers, payload: d.body })).json(), { n: 1 }, `${url}: verified`)
    const tampered = await app.inject({ method: 'POST', url, headers: d.headers, payload: Buffer.from(d.body.toString().replace('delivered', 'dropped')) })
    t.equal(tampered.statusCode, 401, `${url}: tampered -> 401`)
  }
  t.equal(calls, 2)
})

t.test('an app created after the module was loaded is set up the same way: nothing depends on when the module loaded', async (t) => {
  const { default: plugin } = await import('../../src/fastify/index.js')
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(async (webhooks) => { await webhooks.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false }) })
  await app.register(async (other) => { other.post('/sibling', { config: { mailchannelsWebhooks: true } }, async () => ({})) })
  await t.rejects(async () => { await app.ready() }, { code: 'FST_MCWH_ROUTE_NOT_REACHED' }, 'a misplaced opt-in is refused whatever the import order')
})
