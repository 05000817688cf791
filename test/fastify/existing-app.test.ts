// The plugin added to an existing app: every route that does not opt in answers exactly as
// without the plugin (JSON, form, multipart, custom and catch-all parsers of the app, any
// method), in every registration style; the webhook routes stay fail-closed in each.
import Fastify, { type FastifyInstance } from 'fastify'
import t from 'tap'
import plugin, { webhookEventsOf, type MailChannelsWebhooksOptions } from '../../src/fastify/index.js'
import { WebhookEventRouter } from '../../src/index.js'
import { delivery, HANDLE, KEYS } from './helpers/fixtures.js'

/** The app's own routes: a JSON login, a form and a multipart route with the app's parsers, other methods. */
function appRoutes (app: FastifyInstance, prefix = ''): void {
  app.post(`${prefix}/login`, async (request) => ({ body: request.body, type: request.headers['content-type'] ?? null }))
  app.post(`${prefix}/form`, async (request) => ({ form: request.body }))
  app.post(`${prefix}/upload`, async (request) => ({ upload: request.body }))
  app.put(`${prefix}/items/:id`, async (request) => ({ put: request.body }))
  app.patch(`${prefix}/items/:id`, async (request) => ({ patch: request.body }))
  app.delete(`${prefix}/items/:id`, async (request) => ({ deleted: (request.params as { id: string }).id, body: request.body ?? null }))
  app.get(`${prefix}/items`, async (request) => ({ items: [], query: request.query }))
  app.post(`${prefix}/probe`, async (request) => {
    let threw = false
    try { void request.webhookEvents } catch { threw = true }
    return { events: webhookEventsOf(request) ?? null, threw }
  })
}

/** The app's own content-type parsers: a form parser, a multipart parser and a catch-all. */
function appParsers (app: FastifyInstance): void {
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)))
  })
  app.addContentTypeParser('multipart/form-data', { parseAs: 'buffer' }, (request, body, done) => {
    const boundary = /boundary=(.+)$/.exec(String(request.headers['content-type']))?.[1] ?? ''
    done(null, { parts: (body as Buffer).toString('latin1').split(`--${boundary}`).length - 2, bytes: (body as Buffer).length })
  })
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, body, done) => {
    done(null, { catchAll: String(request.headers['content-type'] ?? 'none'), bytes: (body as Buffer).length })
  })
}

/** A scope with the app's own JSON parser in place of Fastify's. */
async function customJsonScope (app: FastifyInstance): Promise<void> {
  await app.register(async (scope) => {
    scope.removeContentTypeParser('application/json')
    scope.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => { done(null, { customJson: body }) })
    scope.post('/custom/json', async (request) => request.body)
  })
}

const seen: string[] = []
const OPTIONS: MailChannelsWebhooksOptions = {
  publicKey: KEYS.publicKey,
  customerHandles: [HANDLE],
  replay: false,
  path: '/webhooks/mailchannels',
  handlers: new WebhookEventRouter().on('*', (e) => { seen.push(e.event) }),
}

interface Built { app: FastifyInstance, calls: () => number }

/**
 * Registration styles: where the plugin goes relative to the app's routes. The opted-in route
 * `/hook` sits next to the app's routes wherever the plugin reaches them.
 */
const STYLES: Record<string, (app: FastifyInstance, withPlugin: boolean, hook: (app: FastifyInstance) => void) => Promise<void>> = {
  'await register, then routes': async (app, withPlugin, hook) => {
    appParsers(app)
    if (withPlugin) await app.register(plugin, OPTIONS)
    appRoutes(app)
    hook(app)
    await customJsonScope(app)
  },
  'register without await, then routes': async (app, withPlugin, hook) => {
    appParsers(app)
    if (withPlugin) void app.register(plugin, OPTIONS)
    appRoutes(app)
    hook(app)
    await customJsonScope(app)
  },
  'routes, then register': async (app, withPlugin, hook) => {
    appParsers(app)
    appRoutes(app)
    hook(app)
    await customJsonScope(app)
    if (withPlugin) await app.register(plugin, OPTIONS)
  },
  'register, then routes in child scopes': async (app, withPlugin, hook) => {
    appParsers(app)
    if (withPlugin) await app.register(plugin, OPTIONS)
    await app.register(async (child) => { appRoutes(child); hook(child) })
    await customJsonScope(app)
  },
  'routes in a child scope registered before, then register': async (app, withPlugin, hook) => {
    appParsers(app)
    await app.register(async (child) => { appRoutes(child) })
    await customJsonScope(app)
    if (withPlugin) await app.register(plugin, OPTIONS)
    hook(app)
  },
  'plugin in a scope of its own, app routes at the root': async (app, withPlugin, hook) => {
    appParsers(app)
    appRoutes(app)
    await customJsonScope(app)
    if (withPlugin) await app.register(async (webhooks) => { await webhooks.register(plugin, OPTIONS); hook(webhooks) })
  },
}

async function build (style: string, withPlugin: boolean): Promise<Built> {
  const app = Fastify({ bodyLimit: 4096 })
  let calls = 0
  const hook = (scope: FastifyInstance): void => {
    if (!withPlugin) return
    scope.post('/hook', { config: { mailchannelsWebhooks: { handlers: undefined } } }, async (request) => {
      calls++
      return { n: request.webhookEvents.length, raw: Buffer.isBuffer(request.body) }
    })
  }
  await STYLES[style]!(app, withPlugin, hook)
  await app.ready()
  return { app, calls: () => calls }
}

const BOUNDARY = 'xYzZY'
const multipart = [`--${BOUNDARY}`, 'Content-Disposition: form-data; name="a"', '', '1', `--${BOUNDARY}`, 'Content-Disposition: form-data; name="f"; filename="f.txt"', 'Content-Type: text/plain', '', 'hello', `--${BOUNDARY}--`, ''].join('\r\n')

const REQUESTS: Array<{ name: string, method?: string, url: string, headers?: Record<string, string>, payload?: string | Buffer }> = [
  { name: 'JSON login', url: '/login', headers: { 'content-type': 'application/json' }, payload: '{"user":"a","password":"p"}' },
  { name: 'JSON login with charset', url: '/login', headers: { 'content-type': 'application/json; charset=utf-8' }, payload: '{"user":"é"}' },
  { name: 'invalid JSON', url: '/login', headers: { 'content-type': 'application/json' }, payload: '{"user":' },
  { name: 'empty JSON body', url: '/login', headers: { 'content-type': 'application/json' }, payload: '' },
  { name: '__proto__ in JSON', url: '/login', headers: { 'content-type': 'application/json' }, payload: '{"__proto__":{"x":1}}' },
  { name: 'JSON over bodyLimit', url: '/login', headers: { 'content-type': 'application/json' }, payload: `{"a":"${'x'.repeat(5000)}"}` },
  { name: 'text/plain', url: '/login', headers: { 'content-type': 'text/plain' }, payload: 'hello' },
  { name: 'catch-all parser (application/xml)', url: '/login', headers: { 'content-type': 'application/xml' }, payload: '<a/>' },
  { name: 'no content type, a body', url: '/login', headers: { 'content-length': '3' }, payload: 'abc' },
  { name: 'no body at all', url: '/login' },
  { name: 'form', url: '/form', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'a=1&b=two' },
  { name: 'multipart', url: '/upload', headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` }, payload: multipart },
  { name: 'PUT JSON', method: 'PUT', url: '/items/1', headers: { 'content-type': 'application/json' }, payload: '{"name":"x"}' },
  { name: 'PATCH form', method: 'PATCH', url: '/items/1', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'name=y' },
  { name: 'DELETE', method: 'DELETE', url: '/items/1' },
  { name: 'DELETE with a JSON body', method: 'DELETE', url: '/items/1', headers: { 'content-type': 'application/json' }, payload: '{"why":"old"}' },
  { name: 'GET', method: 'GET', url: '/items?x=1' },
  { name: 'HEAD', method: 'HEAD', url: '/items' },
  { name: 'custom JSON parser of a scope', url: '/custom/json', headers: { 'content-type': 'application/json' }, payload: '{"a":1}' },
  { name: 'not found', url: '/nowhere', headers: { 'content-type': 'application/json' }, payload: '{}' },
  { name: 'a signed delivery sent to an app route', url: '/login', payload: 'see below' },
]

for (const style of Object.keys(STYLES)) {
  t.test(`${style}: the app's routes answer exactly as without the plugin; webhook routes are verified`, async (t) => {
    const plain = await build(style, false)
    const withPlugin = await build(style, true)
    t.teardown(async () => { await plain.app.close(); await withPlugin.app.close() })
    for (const r of REQUESTS) {
      const signed = delivery()
      const [headers, payload] = r.payload === 'see below' ? [signed.headers, signed.body] : [r.headers, r.payload]
      const send = (app: FastifyInstance) => app.inject({ method: (r.method ?? 'POST') as 'POST', url: r.url, headers, payload })
      const [a, b] = [await send(plain.app), await send(withPlugin.app)]
      t.equal(b.statusCode, a.statusCode, `${r.name}: status ${a.statusCode}`)
      t.equal(b.body, a.body, `${r.name}: body`)
      t.equal(b.headers['content-type'], a.headers['content-type'], `${r.name}: content type`)
    }
    t.same((await withPlugin.app.inject({ method: 'POST', url: '/probe', headers: { 'content-type': 'application/json' }, payload: '{}' })).json(), { events: null, threw: true }, 'on an app route: no events, and request.webhookEvents throws')

    // Webhook routes: the plugin's path route and the opted-in /hook.
    seen.length = 0
    const d = delivery()
    const answered = await withPlugin.app.inject({ method: 'POST', url: '/webhooks/mailchannels', headers: d.headers, payload: d.body })
    t.same(answered.json(), { handled: 1, skipped: 0, unhandled: 0 }, 'path route: a signed delivery is handled')
    const d2 = delivery()
    t.same((await withPlugin.app.inject({ method: 'POST', url: '/hook', headers: d2.headers, payload: d2.body })).json(), { n: 1, raw: true }, 'opted-in route: the handler gets the events and the raw bytes')
    for (const url of ['/webhooks/mailchannels', '/hook']) {
      const fresh = delivery()
      const tampered = await withPlugin.app.inject({ method: 'POST', url, headers: fresh.headers, payload: Buffer.from(fresh.body.toString().replace('delivered', 'dropped')) })
      t.equal(tampered.statusCode, 401, `${url}: tampered -> 401`)
      t.equal(tampered.json().code, 'digest_mismatch')
      const unsigned = await withPlugin.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: '[{"event":"delivered","customer_handle":"acct_1","timestamp":1}]' })
      t.equal(unsigned.statusCode, 400, `${url}: unsigned -> 400`)
    }
    t.same(seen, ['delivered'], 'the router saw only the verified delivery')
    t.equal(withPlugin.calls(), 1, 'the route handler ran only for the verified delivery')
  })
}

t.test('an app with its own JSON parser in the plugin scope: webhook routes still get the raw bytes, parsed once', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  let parsed = 0
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => { parsed++; done(null, JSON.parse(body as string)) })
  await app.register(plugin, OPTIONS)
  app.post('/hook', { config: { mailchannelsWebhooks: { handlers: undefined } } }, async (request) => ({ n: request.webhookEvents.length, raw: Buffer.isBuffer(request.body) }))
  app.post('/login', async (request) => request.body)
  const d = delivery()
  t.same((await app.inject({ method: 'POST', url: '/hook', headers: d.headers, payload: d.body })).json(), { n: 1, raw: true })
  t.equal(parsed, 0, "the app's parser never ran on the delivery")
  t.same((await app.inject({ method: 'POST', url: '/login', payload: { a: 1 } })).json(), { a: 1 })
  t.equal(parsed, 1)
})
