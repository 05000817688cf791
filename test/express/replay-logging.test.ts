import type { Express as ExpressApp, NextFunction, Request, Response } from 'express'
import t, { type Test } from 'tap'
import { mailchannelsWebhooks } from '../../src/express/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import type { ReplayStore } from '../../src/replay/types.js'
import { closedPort, delivery, event, failingStore, flakyOutcomeStore, HANDLE, KEYS, OTHER_KEYS, post, recordingLogger, serve } from './helpers/server.js'
import { conformance, EXPRESS_VERSIONS, type Express } from './helpers/server.js'

let express: Express = EXPRESS_VERSIONS[0]![1]
const { test, run } = conformance((e) => { express = e })

type Handler = (req: Request, res: Response) => void | Promise<void>

async function app (t: Test, replay: ReplayStore | undefined, handler?: Handler) {
  const { logger, entries } = recordingLogger()
  const a = express()
  let calls = 0
  a.post('/wh', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], logger, ...(replay === undefined ? {} : { replay }) }), async (req, res, next) => {
    calls++
    // Errors go to next(): Express 4 does not catch a rejected async handler.
    if (handler !== undefined) return await Promise.resolve(handler(req, res)).catch(next)
    res.json({ received: req.webhookEvents!.length })
  })
  const port = await serve(t, a)
  return { port, entries, calls: () => calls }
}

const tick = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 10))

test('B1: exact resend -> 200 duplicate, handler ran once (default MemoryReplayStore)', async (t) => {
  const { port, calls, entries } = await app(t, undefined)
  const d = delivery()
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { received: 1 })
  await tick()
  const again = await post(port, '/wh', d.headers, d.body)
  t.equal(again.status, 200)
  t.same(again.json(), { duplicate: true })
  t.equal(calls(), 1)
  t.ok(entries.some((e) => e.level === 'info' && /duplicate/.test(e.msg ?? '')))
})

test('B2: two concurrent identical deliveries run the handler once', async (t) => {
  let open!: () => void
  const gate = new Promise<void>((resolve) => { open = resolve })
  const { port, calls } = await app(t, new MemoryReplayStore(), async (_req, res) => { await gate; res.json({ ok: true }) })
  const d = delivery()
  const a = post(port, '/wh', d.headers, d.body)
  const b = post(port, '/wh', d.headers, d.body)
  const first = await Promise.race([a, b])
  t.same(first.json(), { duplicate: true })
  open()
  const all = await Promise.all([a, b])
  t.same(all.map((r) => r.status), [200, 200])
  t.equal(calls(), 1)
})

test('B11: handler throws -> 500, the retry is processed', async (t) => {
  let fail = true
  const { port, calls } = await app(t, new MemoryReplayStore(), async (_req, res) => {
    if (fail) throw new Error('db down')
    res.json({ ok: true })
  })
  const d = delivery()
  t.equal((await post(port, '/wh', d.headers, d.body)).status, 500)
  fail = false
  await tick()
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { ok: true })
  await tick()
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { duplicate: true })
  t.equal(calls(), 2)
})

test('the first res.end() settles the claim, with its arguments passed on as given; a later end() changes nothing', async (t) => {
  let attempt = 0
  const callbacks: string[] = []
  const { port, calls } = await app(t, new MemoryReplayStore(), (_req, res) => {
    attempt++
    if (attempt === 1) {
      res.statusCode = 503
      res.end('busy', 'utf8', () => { callbacks.push('503') })
      return
    }
    res.statusCode = 200
    res.end(Buffer.from('done'), () => { callbacks.push('200') })
    // A second end() (a bug in a handler) neither answers again nor releases the completed claim.
    res.statusCode = 500
    res.end()
  })
  const d = delivery()
  const busy = await post(port, '/wh', d.headers, d.body)
  t.equal(busy.status, 503)
  t.equal(busy.text, 'busy', 'chunk and encoding reached end()')
  await tick()
  const done = await post(port, '/wh', d.headers, d.body)
  t.equal(done.status, 200, 'the 503 released the claim: the retry ran')
  t.equal(done.text, 'done')
  await tick()
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { duplicate: true }, 'the 200 completed it; the later end() with 500 did not release it')
  t.equal(calls(), 2)
  t.same(callbacks, ['503', '200'], "end()'s callback runs")
})

test('store failures: claim -> 503 + Retry-After; complete/release failures only logged', async (t) => {
  const down = await app(t, failingStore())
  const d = delivery()
  const res = await post(down.port, '/wh', d.headers, d.body)
  t.equal(res.status, 503)
  t.equal(res.json().code, 'replay_store_unavailable')
  t.match(res.headers['retry-after'], /^\d+$/)
  t.equal(down.calls(), 0)

  let fail = false
  const store = flakyOutcomeStore()
  const flaky = await app(t, store, async (_req, res) => { if (fail) throw new Error('x'); res.json({}) })
  t.equal((await post(flaky.port, '/wh', d.headers, d.body)).status, 200)
  fail = true
  t.equal((await post(flaky.port, '/wh', d.headers, d.body)).status, 500)
  await tick()
  t.same(store.calls, ['claim', 'complete', 'claim', 'release'])
  t.equal(flaky.entries.filter((e) => e.level === 'error' && /replay store/.test(e.msg ?? '')).length, 2)
})

test('log lines: one per rejection with reason and keyid; no signature, body or API key', async (t) => {
  const port = await closedPort()
  const { logger, entries } = recordingLogger()
  const a = express()
  a.post('/wh', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, logger }), (_req, res) => { res.end() })
  a.post('/down', mailchannelsWebhooks({ baseUrl: `http://127.0.0.1:${port}`, customerHandles: [HANDLE], replay: false, logger }), (_req, res) => { res.end() })
  const p = await serve(t, a)
  const secret = 'private-recipient@example.com'
  const apiKey = 'SECRET_API_KEY_42'
  const forged = delivery({ events: [event({ email: secret })], privateKey: OTHER_KEYS.privateKey })
  const good = delivery({ events: [event({ email: secret })] })
  const extra = { 'x-api-key': apiKey }
  await post(p, '/wh', { ...forged.headers, ...extra }, forged.body)
  await post(p, '/wh', { ...good.headers, ...extra, 'content-encoding': 'gzip' }, good.body)
  await post(p, '/down', { ...good.headers, ...extra }, good.body)
  const rejections = entries.filter((e) => e.msg === 'mailchannels webhook rejected')
  t.same(rejections.map((e) => [e.level, (e.obj as { reason: string }).reason]), [['info', 'signature_invalid'], ['info', 'unsupported_media_type'], ['warn', 'key_unavailable']])
  t.equal((rejections[0]!.obj as { keyId: string }).keyId, 'mckey')
  const text = JSON.stringify(entries)
  t.notOk(text.includes(forged.headers.signature.split(':')[1]!))
  t.notOk(text.includes(secret))
  t.notOk(text.includes(apiKey))
})

test('a client that disconnects before the reply settles nothing: the handler still runs and its answer decides', async (t) => {
  let open!: () => void
  const gate = new Promise<void>((resolve) => { open = resolve })
  let entered!: () => void
  const inHandler = new Promise<void>((resolve) => { entered = resolve })
  const { port, calls } = await app(t, new MemoryReplayStore(), async (_req, res) => {
    entered()
    await gate
    // Answering a client that has gone is still the handler's outcome.
    res.json({ ok: true, destroyed: res.destroyed })
  })
  const d = delivery()
  const http = await import('node:http')
  const req = http.request({ host: '127.0.0.1', port, path: '/wh', method: 'POST', headers: { ...d.headers, 'content-length': String(d.body.length) }, agent: false })
  req.on('error', () => {})
  req.end(d.body)
  await inHandler
  req.destroy()
  await tick()
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { duplicate: true }, 'while the handler runs, a copy is a duplicate')
  open()
  await tick()
  t.same((await post(port, '/wh', d.headers, d.body)).json(), { duplicate: true }, 'after it answered 2xx, the delivery is done')
  t.equal(calls(), 1)
})

run(t)
