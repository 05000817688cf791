import Fastify from 'fastify'
import t from 'tap'
import plugin from '../../src/fastify/index.js'
import { delivery, event, HANDLE, KEYS, logCapture } from './helpers/fixtures.js'
import pino from 'pino'

t.test('a bad option makes app.ready() reject with a message naming it', async (t) => {
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ publicKey: KEYS.publicKey }, /customerHandles/],
    [{ publicKey: KEYS.publicKey, customerHandles: [] }, /customerHandles/],
    [{ publicKey: KEYS.publicKey, customerHandles: 'all' }, /customerHandles/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], bodyLimit: -1 }, /bodyLimit/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], bodyLimit: 1.5 }, /bodyLimit/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], maxAge: 'x' }, /maxAge/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], clockSkew: -1 }, /clockSkew/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], maxEvents: 0 }, /maxEvents/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], keyIds: ['bad id'] }, /keyIds/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], keyStore: {} }, /keyStore/],
    [{ publicKey: 'not a key', customerHandles: [HANDLE] }, /publicKey/],
    [{ customerHandles: [HANDLE], baseUrl: 'http://example.com' }, /baseUrl/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: {} }, /replay/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], verifyOnThreadPool: 'yes' }, /verifyOnThreadPool/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], now: 'today' }, /now/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], cache: 1 }, /cache/],
    [{ publicKey: KEYS.publicKey, customerHandles: [HANDLE], customerHandle: 'x' }, /customerHandle/],
  ]
  for (const [opts, message] of bad) {
    const app = Fastify()
    app.register(plugin, opts as never)
    await t.rejects(async () => { await app.ready() }, message, JSON.stringify(Object.keys(opts)))
    await app.close()
  }
})

t.test("customerHandles: 'any' is an explicit opt-out, logged as a warning at registration", async (t) => {
  const logs = logCapture()
  const app = Fastify({ loggerInstance: pino(logs.stream) })
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: 'any', replay: false })
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request) => ({ n: request.webhookEvents.length }))
  t.teardown(() => app.close())
  t.ok(logs.lines().some((l) => l.level === 40 && /customerHandles is 'any'/.test(String(l.msg))))
  const d = delivery({ events: [event({ customer_handle: 'anyone' })] })
  t.equal((await app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })).statusCode, 200)
})

t.test('only POST routes may opt in: others fail at route declaration', async (t) => {
  for (const method of ['GET', 'PUT', ['POST', 'PUT']] as const) {
    const app = Fastify()
    await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
    t.throws(() => app.route({ method: method as never, url: '/wh', config: { mailchannelsWebhooks: true }, handler: async () => ({}) }), /POST/)
    await app.close()
  }
})

t.test('a bad per-route override fails at route registration, naming the option', async (t) => {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
  t.throws(() => app.post('/a', { config: { mailchannelsWebhooks: { maxAge: -5 } } }, async () => ({})), /maxAge/)
  t.throws(() => app.post('/b', { config: { mailchannelsWebhooks: 'yes' as never } }, async () => ({})), /mailchannelsWebhooks/)
  await app.close()
})

t.test('per-route overrides: customerHandles and bodyLimit (B10)', async (t) => {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false })
  let calls = 0
  const handler = async (): Promise<object> => { calls++; return {} }
  app.post('/acct1', { config: { mailchannelsWebhooks: true } }, handler)
  app.post('/acct2', { config: { mailchannelsWebhooks: { customerHandles: ['acct_2'], bodyLimit: 80 } } }, handler)
  t.teardown(() => app.close())
  const d = delivery()
  t.equal((await app.inject({ method: 'POST', url: '/acct1', headers: d.headers, payload: d.body })).statusCode, 200)
  const res = await app.inject({ method: 'POST', url: '/acct2', headers: d.headers, payload: d.body })
  t.equal(res.statusCode, 413, 'the route bodyLimit applies')
  const small = delivery({ events: [{ event: 'test', customer_handle: HANDLE, timestamp: 1 }] })
  t.ok(small.body.length < 80)
  const res2 = await app.inject({ method: 'POST', url: '/acct2', headers: small.headers, payload: small.body })
  t.equal(res2.statusCode, 403)
  t.equal(res2.json().code, 'customer_not_allowed')
  t.equal(calls, 1)
})

t.test('a config object shared by two routes sets up both', async (t) => {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false })
  const config = { mailchannelsWebhooks: true }
  const seen: number[] = []
  app.post('/a', { config }, async (request) => { seen.push(request.webhookEvents.length); return {} })
  app.post('/b', { config }, async (request) => { seen.push(request.webhookEvents.length); return {} })
  t.teardown(() => app.close())
  for (const url of ['/a', '/b']) {
    const d = delivery()
    t.equal((await app.inject({ method: 'POST', url, headers: d.headers, payload: d.body })).statusCode, 200)
    t.equal((await app.inject({ method: 'POST', url, headers: d.headers, payload: Buffer.from('[]') })).statusCode, 401)
  }
  t.same(seen, [1, 1])
})

t.test('routes declared after `await app.register` work, also in child plugins registered later', async (t) => {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false })
  await app.register(async (child) => {
    child.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request) => ({ n: request.webhookEvents.length }))
  }, { prefix: '/child' })
  t.teardown(() => app.close())
  const d = delivery()
  const res = await app.inject({ method: 'POST', url: '/child/wh', headers: d.headers, payload: d.body })
  t.equal(res.statusCode, 200)
  t.same(res.json(), { n: 1 })
})

t.test('registering twice in one scope is refused', async (t) => {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
  app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
  await t.rejects(async () => { await app.ready() }, /already registered/)
  await app.close()
})

t.test('a user error handler still sees handler errors; webhook 413 keeps its shape', async (t) => {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, bodyLimit: 200 })
  app.setErrorHandler((error: Error, _request, reply) => { reply.code(418).send({ mine: error.message }) })
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async () => { throw new Error('boom') })
  t.teardown(() => app.close())
  const d = delivery()
  const res = await app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  t.equal(res.statusCode, 418)
  t.same(res.json(), { mine: 'boom' })
  const { Readable } = await import('node:stream')
  const big = delivery({ payload: `[${' '.repeat(300)}]` })
  const tooBig = await app.inject({ method: 'POST', url: '/wh', headers: big.headers, payload: Readable.from([big.body]) })
  t.equal(tooBig.statusCode, 413)
  t.equal(tooBig.json().code, 'payload_too_large')
})

t.test('a startup warning when requestTimeout is 0 (Fastify default); none when set', async (t) => {
  for (const requestTimeout of [undefined, 30_000]) {
    const logs = logCapture()
    const app = Fastify({ loggerInstance: pino(logs.stream), ...(requestTimeout === undefined ? {} : { requestTimeout }) })
    await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
    await app.ready()
    const warned = logs.lines().some((l) => l.level === 40 && /requestTimeout/.test(String(l.msg)))
    t.equal(warned, requestTimeout === undefined, `requestTimeout ${requestTimeout}`)
    await app.close()
  }
})

t.test('registration errors carry a Fastify-style code', async (t) => {
  const cases: Array<[(app: ReturnType<typeof Fastify>) => void, string, RegExp]> = [
    [(app) => { app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], maxAge: -1 }) }, 'FST_MCWH_INVALID_OPTION', /maxAge/],
    [(app) => { app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], nope: 1 } as never) }, 'FST_MCWH_INVALID_OPTION', /nope is not a known option/],
    [(app) => { app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], path: 'webhooks' } as never) }, 'FST_MCWH_INVALID_OPTION', /path must be a URL path/],
    [(app) => { app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], path: '/webhooks' }) }, 'FST_MCWH_INVALID_OPTION', /give handlers .* or enqueue/],
    [(app) => { app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] }); app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] }) }, 'FST_MCWH_ALREADY_REGISTERED', /already registered in this scope/],
    [(app) => { app.decorateRequest('webhookEvents', null); app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] }) }, 'FST_MCWH_DECORATOR_PRESENT', /request\.webhookEvents is already decorated/],
  ]
  for (const [build, code, message] of cases) {
    const app = Fastify()
    build(app)
    await t.rejects(async () => { await app.ready() }, { code, message }, code)
    await app.close().catch(() => {})
  }
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
  t.throws(() => app.post('/a', { config: { mailchannelsWebhooks: { maxAge: -5 } } }, async () => ({})), { code: 'FST_MCWH_INVALID_OPTION', message: /maxAge/ })
  t.throws(() => app.post('/b', { config: { mailchannelsWebhooks: 'yes' as never } }, async () => ({})), { code: 'FST_MCWH_INVALID_ROUTE', message: /config\.mailchannelsWebhooks of POST \/b must be true, false or an options object/ })
  await app.close()
})
