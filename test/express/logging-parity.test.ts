// The Express middleware's `logger` option: a pino logger given to the
// middleware gets the same lines, at the same levels and with the same fields, as the Fastify
// plugin writes to `request.log`, for the same traffic. Only the plugin's startup list of
// verified routes has no Express counterpart (a middleware does not know its path).
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import pino from 'pino'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { mailchannelsWebhooks } from '../../src/express/index.js'
import type { ReplayStore } from '../../src/replay/types.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import { closedPort, delivery, event, failingStore, flakyOutcomeStore, HANDLE, KEYS, logCapture, OTHER_KEYS } from '../fastify/helpers/fixtures.js'
import { EXPRESS_VERSIONS } from './helpers/server.js'

interface Receiver { url: (path: string) => string, lines: () => Array<Record<string, unknown>> }
type Stores = { memory: ReplayStore, down: ReplayStore, flaky: ReplayStore }

const SECRET = 'parity-secret@example.com'

async function fastifyReceiver (t: Test, keyPort: number, stores: Stores): Promise<Receiver> {
  const logs = logCapture()
  const app = Fastify({ loggerInstance: pino({ level: 'debug' }, logs.stream), requestTimeout: 30_000 })
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: 'any', replay: stores.memory })
  app.post('/wh', { config: { mailchannelsWebhooks: { customerHandles: [HANDLE] } } }, async () => ({ ok: true }))
  app.post('/down', { config: { mailchannelsWebhooks: { customerHandles: [HANDLE], publicKey: undefined, baseUrl: `http://127.0.0.1:${keyPort}` } } }, async () => ({ ok: true }))
  app.post('/store', { config: { mailchannelsWebhooks: { customerHandles: [HANDLE], replay: stores.down } } }, async () => ({ ok: true }))
  app.post('/flaky', { config: { mailchannelsWebhooks: { customerHandles: [HANDLE], replay: stores.flaky } } }, async () => ({ ok: true }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const port = (app.server.address() as AddressInfo).port
  return { url: (path) => `http://127.0.0.1:${port}${path}`, lines: logs.lines }
}

async function expressReceiver (t: Test, keyPort: number, stores: Stores, express: (typeof EXPRESS_VERSIONS)[number][1]): Promise<Receiver> {
  const logs = logCapture()
  const logger = pino({ level: 'debug' }, logs.stream)
  const app = express()
  const ok = (_req: unknown, res: { json: (b: unknown) => void }): void => { res.json({ ok: true }) }
  // The plugin's registration-level 'any' warning: here one middleware is built with it.
  mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: 'any', replay: stores.memory, logger })
  app.post('/wh', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: stores.memory, logger }), ok)
  app.post('/down', mailchannelsWebhooks({ customerHandles: [HANDLE], baseUrl: `http://127.0.0.1:${keyPort}`, replay: stores.memory, logger }), ok)
  app.post('/store', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: stores.down, logger }), ok)
  app.post('/flaky', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: stores.flaky, logger }), ok)
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const port = (server.address() as AddressInfo).port
  return { url: (path) => `http://127.0.0.1:${port}${path}`, lines: logs.lines }
}

/** The same traffic for both receivers. */
async function traffic (r: Receiver): Promise<void> {
  const send = async (path: string, d: { headers: Record<string, string>, body: Buffer }, extra: Record<string, string> = {}): Promise<void> => {
    const res = await fetch(r.url(path), { method: 'POST', headers: { ...d.headers, ...extra }, body: d.body })
    await res.arrayBuffer()
  }
  const good = delivery({ events: [event({ email: SECRET })] })
  await send('/wh', delivery({ events: [event({ email: SECRET })], privateKey: OTHER_KEYS.privateKey }))
  await send('/wh', { headers: good.headers, body: Buffer.from(good.body.toString().replace('delivered', 'dropped')) })
  await send('/wh', delivery({ events: [event({ customer_handle: 'acct_other' })] }))
  await send('/wh', good, { 'content-encoding': 'gzip' })
  await send('/wh', good)
  await new Promise((resolve) => setTimeout(resolve, 10))
  await send('/wh', good)
  await send('/down', delivery())
  await send('/store', delivery())
  await send('/flaky', delivery())
  await new Promise((resolve) => setTimeout(resolve, 20))
}

/** The library's own lines: level, message and the fields it sets (not Fastify's request logs). */
function libraryLines (lines: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  return lines
    .filter((l) => typeof l.msg === 'string' && /mailchannels/i.test(l.msg) && !/verifying MailChannels deliveries on these routes/.test(l.msg))
    .map((l) => {
      const { level, msg, reason, keyId, statusCode, state, op } = l
      return Object.fromEntries(Object.entries({ level, msg, reason, keyId, statusCode, state, op }).filter(([, v]) => v !== undefined))
    })
}

for (const [version, express] of EXPRESS_VERSIONS) {
  t.test(`${version}: the middleware logs what the Fastify plugin logs, line for line`, async (t) => {
    const keyPort = await closedPort()
    const stores = (): Stores => ({ memory: new MemoryReplayStore(), down: failingStore(), flaky: flakyOutcomeStore() })
    const f = await fastifyReceiver(t, keyPort, stores())
    const e = await expressReceiver(t, keyPort, stores(), express)
    await traffic(f)
    await traffic(e)
    const fl = libraryLines(f.lines())
    const el = libraryLines(e.lines())
    t.same(el, fl, 'the same lines')
    const levels = fl.map((l) => l.level)
    t.ok(fl.length >= 9, `${fl.length} lines: ${JSON.stringify(fl.map((l) => l.msg))}`)
    t.ok(levels.includes(30) && levels.includes(40) && levels.includes(50), 'info, warn and error lines')
    for (const text of [JSON.stringify(f.lines()), JSON.stringify(e.lines())]) {
      t.notOk(text.includes(SECRET), 'no body content')
      t.notOk(text.includes(KEYS.publicKey), 'no key material')
    }
  })
}

t.test('the requestTimeout warning: the plugin at startup, the middleware at its first delivery', async (t) => {
  const f = logCapture()
  const app = Fastify({ loggerInstance: pino(f.stream) })
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
  await app.ready()
  await app.close()
  const e = logCapture()
  const mw = mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], logger: pino(e.stream) })
  const server = http.createServer((req, res) => { mw(req, res, () => { res.end() }) })
  server.requestTimeout = 0
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const d = delivery()
  for (let i = 0; i < 2; i++) await (await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { method: 'POST', headers: d.headers, body: d.body })).arrayBuffer()
  const warned = (lines: Array<Record<string, unknown>>): number => lines.filter((l) => l.level === 40 && /requestTimeout is 0/.test(String(l.msg))).length
  t.equal(warned(f.lines()), 1, 'the plugin warns once')
  t.equal(warned(e.lines()), 1, 'the middleware warns once')
})
