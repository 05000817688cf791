// Routes that accept any method: the middleware verifies POST only and lets the rest through
// (app.use mounting, health checks), so on `app.all(path, mailchannelsWebhooks(...), handler)`
// a GET reaches the handler unverified. Reading req.webhookEvents there must throw, saying why,
// never hand the handler `undefined` where its type says WebhookEvent[]. Express 4 and 5.
import http from 'node:http'
import util from 'node:util'
import t from 'tap'
import { mailchannelsWebhooks } from '../../src/express/index.js'
import { conformance, delivery, EXPRESS_VERSIONS, HANDLE, KEYS, OTHER_KEYS, post, serve, type Express } from './helpers/server.js'

let express: Express = EXPRESS_VERSIONS[0]![1]
const { test, run } = conformance((e) => { express = e })

/** Sends a request of any method with a body; resolves with the status and the body text. */
async function send (port: number, method: string, path: string, headers: Record<string, string>, body: Buffer): Promise<{ status: number, text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method, headers: { ...headers, 'content-length': String(body.length) }, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }) })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

test('app.all(path, mailchannelsWebhooks(), handler): a GET/PUT/DELETE with a forged signed body never proceeds with events undefined', async (t) => {
  const app = express()
  const reads: Array<{ method: string, threw: string | null }> = []
  app.all('/hook', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false }), (req, res) => {
    let events
    try {
      events = req.webhookEvents
      reads.push({ method: req.method, threw: null })
    } catch (err) {
      reads.push({ method: req.method, threw: (err as Error).message })
      throw err
    }
    // A handler written as the type allows: it trusts the array.
    res.status(200).json({ received: events?.length ?? 0 })
  })
  const port = await serve(t, app)
  const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
  for (const method of ['GET', 'PUT', 'DELETE', 'PATCH']) {
    const res = await send(port, method, '/hook', forged.headers, forged.body)
    t.equal(res.status, 500, `${method}: the handler cannot answer 2xx without verified events`)
    t.notMatch(res.text, /received/, `${method}: the handler never answered`)
  }
  t.equal(reads.length, 4)
  for (const r of reads) {
    t.ok(r.threw !== null, `${r.method}: reading req.webhookEvents throws`)
    t.match(r.threw, /req\.webhookEvents is not set/)
    t.match(r.threw, new RegExp(`POST requests only.*${r.method} request`), 'the message says why')
    t.match(r.threw, /app\.post\(path, mailchannelsWebhooks\(options\), handler\)/, 'and what to do')
  }
  // POST is verified as before.
  const d = delivery()
  const ok = await post(port, '/hook', d.headers, d.body)
  t.same(ok.json(), { received: 1 })
  t.equal((await post(port, '/hook', forged.headers, forged.body)).status, 401)
})

test('let through untouched: GET /health under app.use(mailchannelsWebhooks()) answers as before; the getter is invisible to logs', async (t) => {
  const app = express()
  app.use(mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false }))
  let seen: { keys: string[], inspected: string } | null = null
  app.get('/health', (req, res) => {
    // What an access logger or a serializer does with the request: none of it reads the getter.
    seen = { keys: Object.keys(req), inspected: util.inspect(req, { depth: 0 }) }
    res.json({ ok: true })
  })
  app.put('/mine', (req, res) => {
    // The app may set its own value on a request the middleware let through.
    (req as { webhookEvents?: unknown }).webhookEvents = []
    res.json({ own: req.webhookEvents })
  })
  const port = await serve(t, app)
  const health = await fetch(`http://127.0.0.1:${port}/health`)
  t.equal(health.status, 200)
  t.same(await health.json(), { ok: true })
  t.ok(seen !== null)
  t.notOk(seen!.keys.includes('webhookEvents'), 'not enumerable')
  t.notMatch(seen!.inspected, /webhookEvents/)
  const mine = await send(port, 'PUT', '/mine', {}, Buffer.alloc(0))
  t.equal(mine.status, 200)
  t.same(JSON.parse(mine.text), { own: [] })
})

run(t)
