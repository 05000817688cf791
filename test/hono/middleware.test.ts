// The Hono middleware: typed events on the context, failures answered exactly as the web
// handler answers them, the claim settled by the handler's answer (a throw releases it).
import { Hono } from 'hono'
import t from 'tap'
import { mailchannelsWebhooks, type MailChannelsWebhooksEnv } from '../../src/hono/index.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { createWebhookHandler, type WebhookEvent } from '../../src/web/index.js'

const keys = generateSigningKeyPair()
const CUSTOMER = 'acct_hono'
let n = 0
const sign = (extra: Record<string, unknown> = {}): SignedWebhook => signWebhook({
  events: [{ event: 'delivered', customer_handle: CUSTOMER, timestamp: 1, request_id: `h${++n}`, ...extra }],
  privateKey: keys.privateKey,
})
const post = (signed: SignedWebhook, init: RequestInit = {}): Request =>
  new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: signed.body, ...init })
const base = { publicKey: keys.publicKey, customerHandles: [CUSTOMER] }

t.test('options are validated when the middleware is created', async (t) => {
  t.throws(() => mailchannelsWebhooks({ publicKey: keys.publicKey } as never), { name: 'TypeError', message: /customerHandles is required/ })
  t.throws(() => mailchannelsWebhooks({ ...base, bodylimit: 5 } as never), { name: 'TypeError', message: /bodylimit is not a known option/ })
})

t.test('the verified events are typed on the context; the handler answers', async (t) => {
  const app = new Hono<MailChannelsWebhooksEnv>()
  app.post('/hook', mailchannelsWebhooks(base), (c) => {
    const events: WebhookEvent[] = c.get('webhookEvents')
    return c.json({ handles: events.map((e) => e.customerHandle) })
  })
  const signed = sign()
  const res = await app.request(post(signed))
  t.equal(res.status, 200)
  t.strictSame(await res.json(), { handles: [CUSTOMER] })
  const again = await app.request(post(signed))
  t.equal(again.status, 200)
  t.strictSame(await again.json(), { duplicate: true }, 'a resend does not reach the handler')
})

t.test('failures are answered exactly as the web handler answers them', async (t) => {
  const app = new Hono<MailChannelsWebhooksEnv>()
  app.post('/hook', mailchannelsWebhooks({ ...base, bodyLimit: 2048 }), (c) => c.text('handled'))
  const web = createWebhookHandler({ ...base, bodyLimit: 2048, onEvents: () => new Response('handled') })
  const signed = sign()
  const tampered = new Uint8Array(signed.body)
  tampered[3] = tampered[3]! ^ 1
  const cases: Array<[string, () => Request]> = [
    ['tampered', () => post(signed, { body: tampered })],
    ['other customer', () => post(sign({ customer_handle: 'acct_x' }))],
    ['missing headers', () => new Request('http://127.0.0.1/hook', { method: 'POST', body: '[]' })],
    ['too large', () => post(signed, { body: new Uint8Array(4096) })],
    ['gzip', () => post(signed, { headers: { ...signed.headers, 'content-encoding': 'gzip' } })],
  ]
  for (const [name, make] of cases) {
    const viaHono = await app.request(make())
    const viaWeb = await web(make())
    t.equal(viaHono.status, viaWeb.status, `${name}: status ${viaWeb.status}`)
    t.ok(viaHono.status >= 400)
    t.strictSame(await viaHono.json(), await viaWeb.json(), `${name}: body`)
    t.equal(viaHono.headers.get('content-type'), viaWeb.headers.get('content-type'))
  }
})

t.test('a handler that throws: Hono answers 500 and the claim is released, so the retry is handled', async (t) => {
  const app = new Hono<MailChannelsWebhooksEnv>()
  let calls = 0
  app.post('/hook', mailchannelsWebhooks(base), (c) => {
    if (++calls === 1) throw new Error('boom')
    return c.text('ok')
  })
  const signed = sign()
  t.equal((await app.request(post(signed))).status, 500)
  t.equal((await app.request(post(signed))).status, 200)
  t.equal(calls, 2)
  t.strictSame(await (await app.request(post(signed))).json(), { duplicate: true })
})

t.test('requests other than POST pass through untouched (app.use on a path)', async (t) => {
  const app = new Hono<MailChannelsWebhooksEnv>()
  app.use('/hooks/*', mailchannelsWebhooks(base))
  app.get('/hooks/health', (c) => c.text('up'))
  app.post('/hooks/mc', (c) => c.json(c.get('webhookEvents').length))
  const health = await app.request('http://127.0.0.1/hooks/health')
  t.equal(health.status, 200)
  t.equal(await health.text(), 'up')
  const res = await app.request(new Request('http://127.0.0.1/hooks/mc', { method: 'POST', headers: sign().headers, body: sign().body }))
  t.equal(res.status, 401, 'a POST under the path is verified (body and signature of different deliveries)')
})
