// The app's other routes must parse JSON exactly as Fastify does without the plugin:
// same bodies, same statuses and error codes, same prototype-poisoning protection.
import { Readable } from 'node:stream'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { HANDLE, KEYS } from './helpers/fixtures.js'

/**
 * The same routes in an app without the plugin and in one with it. `layout` says where the
 * plugin is: 'same-scope' registers it at the root, next to the app's routes (which do not opt
 * in); 'own-scope' registers it in an encapsulated scope of its own.
 */
async function pair (t: Test, opts: FastifyServerOptions = {}, layout: 'same-scope' | 'own-scope' = 'same-scope'): Promise<[FastifyInstance, FastifyInstance]> {
  const build = async (withPlugin: boolean): Promise<FastifyInstance> => {
    const app = Fastify(opts)
    const config = {}
    if (withPlugin && layout === 'same-scope') {
      await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
      app.post('/wh', { config: { mailchannelsWebhooks: true } }, async () => ({}))
    }
    if (withPlugin && layout === 'own-scope') {
      await app.register(async (webhooks) => {
        await webhooks.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE] })
        webhooks.post('/wh', { config: { mailchannelsWebhooks: true } }, async () => ({}))
      })
    }
    app.post('/json', { config }, async (request) => ({ body: request.body, proto: Object.getPrototypeOf(request.body ?? {}) === Object.prototype }))
    app.post('/small', { bodyLimit: 10, config }, async (request) => ({ body: request.body }))
    await app.ready()
    t.teardown(() => app.close())
    return app
  }
  return [await build(false), await build(true)]
}

interface Case { name: string, url?: string, headers?: Record<string, string>, payload?: string | Buffer | (() => Readable) }

const cases: Case[] = [
  { name: 'valid JSON object', payload: '{"a":1,"b":[true,null,"é"]}' },
  { name: 'valid JSON with charset', headers: { 'content-type': 'application/json; charset=utf-8' }, payload: '{"a":"x"}' },
  { name: 'valid JSON array', payload: '[1,2,3]' },
  { name: 'invalid JSON', payload: '{"a":' },
  { name: 'empty body', payload: '' },
  { name: '__proto__ key', payload: '{"__proto__":{"polluted":true}}' },
  { name: 'escaped __proto__ key', payload: '{"\\u005f_proto__":{"polluted":true}}' },
  { name: 'constructor.prototype', payload: '{"constructor":{"prototype":{"polluted":true}}}' },
  { name: 'invalid UTF-8 bytes', payload: Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]) },
  { name: 'multibyte split across chunks', payload: () => { const b = Buffer.from('{"a":"é"}'); return Readable.from([b.subarray(0, 7), b.subarray(7)]) } },
  { name: 'over the app bodyLimit (Content-Length)', payload: `{"a":"${'x'.repeat(200)}"}` },
  { name: 'over the route bodyLimit', url: '/small', payload: '{"a":"0123456789"}' },
  { name: 'over the route bodyLimit, chunked', url: '/small', payload: () => Readable.from([Buffer.from('{"a":'), Buffer.from('"0123456789"}')]) },
  { name: 'text/plain still parsed as text', headers: { 'content-type': 'text/plain' }, payload: 'hello' },
  { name: 'unknown content type still 415', headers: { 'content-type': 'application/xml' }, payload: '<a/>' },
  { name: 'octet-stream still 415', headers: { 'content-type': 'application/octet-stream' }, payload: Buffer.from([1, 2, 3]) },
  { name: 'no content type with a body still 415', headers: { 'content-type': '' }, payload: 'x' },
  { name: 'text/plain invalid UTF-8 decoded the same', headers: { 'content-type': 'text/plain; charset=utf-8' }, payload: Buffer.from([0x61, 0xff, 0x62]) },
]

for (const layout of ['same-scope', 'own-scope'] as const) t.test(`other routes (${layout}) behave exactly as without the plugin`, async (t) => {
  const [plain, withPlugin] = await pair(t, { bodyLimit: 100 }, layout)
  for (const c of cases) {
    const inject = (app: FastifyInstance) => app.inject({
      method: 'POST',
      url: c.url ?? '/json',
      headers: { 'content-type': 'application/json', ...c.headers },
      payload: typeof c.payload === 'function' ? c.payload() : c.payload,
    })
    const [a, b] = [await inject(plain), await inject(withPlugin)]
    t.equal(b.statusCode, a.statusCode, `${c.name}: status ${a.statusCode}`)
    t.equal(b.body, a.body, `${c.name}: body`)
    t.equal(b.headers['content-type'], a.headers['content-type'], `${c.name}: content type`)
  }
  t.equal(({} as Record<string, unknown>).polluted, undefined)
})

t.test('the expected Fastify statuses are what both give', async (t) => {
  const [, app] = await pair(t, { bodyLimit: 100 })
  const post = (payload: string) => app.inject({ method: 'POST', url: '/json', headers: { 'content-type': 'application/json' }, payload })
  t.equal((await post('{"a":1}')).statusCode, 200)
  t.equal((await post('{')).statusCode, 400)
  t.equal((await post('')).json().code, 'FST_ERR_CTP_EMPTY_JSON_BODY')
  t.equal((await post('{"__proto__":{"x":1}}')).statusCode, 400)
  t.equal((await post('{"constructor":{"prototype":{"x":1}}}')).statusCode, 400)
  const big = await post(`{"a":"${'x'.repeat(200)}"}`)
  t.equal(big.statusCode, 413)
  t.equal(big.json().code, 'FST_ERR_CTP_BODY_TOO_LARGE')
})

t.test("the app's onProtoPoisoning / onConstructorPoisoning settings are kept", async (t) => {
  const [plain, withPlugin] = await pair(t, { onProtoPoisoning: 'remove', onConstructorPoisoning: 'ignore' })
  for (const payload of ['{"__proto__":{"x":1},"a":1}', '{"constructor":{"prototype":{"x":1}}}']) {
    const inject = (app: FastifyInstance) => app.inject({ method: 'POST', url: '/json', headers: { 'content-type': 'application/json' }, payload })
    const [a, b] = [await inject(plain), await inject(withPlugin)]
    t.equal(a.statusCode, 200)
    t.equal(b.statusCode, a.statusCode)
    t.equal(b.body, a.body)
  }
})
