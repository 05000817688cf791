// Hostile clients on a real socket (rows C13, F2, G1, G3 in test/README.md): what Node's
// HTTP parser and the server timeouts must stop before (or without) the plugin's handler.
// A real Fastify server with the plugin on 127.0.0.1:0, small timeouts so the file is fast.
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import { failOnUnhandledRejection, KEYS, sign } from './helpers/fixtures.js'
import plugin from '../../src/fastify/index.js'

failOnUnhandledRejection(t)

const HEADERS_TIMEOUT = 600
const KEEP_ALIVE_TIMEOUT = 300

async function server (t: Test) {
  const app = Fastify({
    requestTimeout: 2000,
    serverFactory: (handler) => http.createServer({
      requestTimeout: 2000,
      headersTimeout: HEADERS_TIMEOUT,
      keepAliveTimeout: KEEP_ALIVE_TIMEOUT,
      connectionsCheckingInterval: 100,
    }, handler),
  })
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: ['acct_1'], replay: false })
  let calls = 0
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request) => {
    calls++
    return { received: request.webhookEvents.length }
  })
  app.get('/health', async () => ({ ok: true }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { port: (app.server.address() as AddressInfo).port, calls: () => calls }
}

/** Writes raw bytes (optionally in timed pieces) and collects everything until the server closes. */
function raw (port: number, pieces: Array<string | Buffer>, gapMs = 0): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let out = ''
    let timer: NodeJS.Timeout | undefined
    const guard = setTimeout(() => { socket.destroy(); reject(new Error('the server never closed the connection')) }, 8000)
    socket.on('data', (c) => { out += c.toString('latin1') })
    socket.on('error', () => {})
    socket.on('close', () => { clearTimeout(guard); clearInterval(timer); resolve(out) })
    socket.on('connect', () => {
      if (gapMs === 0) {
        for (const p of pieces) socket.write(p)
        return
      }
      let i = 0
      timer = setInterval(() => {
        if (i < pieces.length && socket.writable) socket.write(pieces[i++]!)
      }, gapMs)
    })
  })
}

function requestHead (port: number, headers: Record<string, string>, extra = ''): string {
  return `POST /wh HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nconnection: close\r\n` +
    Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') + extra + '\r\n'
}

t.test('C13: obs-fold or a bare CR inside Signature-Input -> 400 from the HTTP parser; the handler never runs', async (t) => {
  const s = await server(t)
  const d = sign()
  const [head, tail] = d.headers['signature-input']!.split(';created=') as [string, string]
  const base = { 'content-type': 'application/json', 'content-digest': d.headers['content-digest']!, signature: d.headers.signature!, 'content-length': String(d.body.length) }
  for (const [name, folded] of [['obs-fold', `${head}\r\n ;created=${tail}`], ['bare CR', `${head}\r;created=${tail}`]] as const) {
    const res = await raw(s.port, [requestHead(s.port, { ...base, 'signature-input': folded }), d.body])
    t.match(res, /^HTTP\/1\.1 400 /, `${name}: 400`)
  }
  t.equal(s.calls(), 0)
})

t.test('F2: Content-Length 50 with 100 bytes sent -> rejected (truncated body), the leftover bytes -> 400; never 2xx', async (t) => {
  const s = await server(t)
  const body = Buffer.alloc(100, 0x20)
  body.write('[]')
  const d = sign({ body })
  const head = requestHead(s.port, { 'content-type': 'application/json', ...d.headers, 'content-length': '50' }).replace('connection: close\r\n', '')
  const res = await raw(s.port, [head, body])
  const statuses = [...res.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]))
  t.ok(statuses.length >= 1, `answered: ${statuses.join(', ')}`)
  // Node answers the leftover bytes (a malformed second request) with 400 and closes, which
  // may pre-empt the 401 digest_mismatch of the truncated first body.
  t.ok(statuses[0] === 400 || statuses[0] === 401, `first answer 400 or 401 (got ${statuses[0]})`)
  t.ok(statuses.includes(400), 'the leftover bytes are refused by the HTTP parser')
  t.ok(statuses.every((x) => x >= 400), 'nothing accepted')
  t.equal(s.calls(), 0)
})

t.test('G1: headers trickled byte by byte are cut off at headersTimeout with 408', async (t) => {
  const s = await server(t)
  const d = sign()
  const head = requestHead(s.port, { 'content-type': 'application/json', ...d.headers, 'content-length': String(d.body.length) })
  // 1 byte per 100 ms: the whole head would take minutes.
  const res = await raw(s.port, head.split(''), 100)
  t.match(res, /^HTTP\/1\.1 408 /, '408 Request Timeout, then closed')
  t.equal(s.calls(), 0)
})

t.test('G3: 200 idle keep-alive sockets and 50 silent ones are closed by the server; a valid delivery is served meanwhile', async (t) => {
  const s = await server(t)
  const closed: Array<Promise<void>> = []
  const open = (send: boolean): void => {
    const socket = net.connect(s.port, '127.0.0.1')
    socket.on('error', () => {})
    socket.resume()
    closed.push(new Promise((resolve) => socket.on('close', () => resolve())))
    if (send) socket.on('connect', () => socket.write(`GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: keep-alive\r\n\r\n`))
  }
  for (let i = 0; i < 200; i++) open(true)
  for (let i = 0; i < 50; i++) open(false)

  const d = sign({ created: Math.floor(Date.now() / 1000) })
  const res = await fetch(`http://127.0.0.1:${s.port}/wh`, { method: 'POST', headers: { 'content-type': 'application/json', ...d.headers }, body: d.body })
  t.equal(res.status, 200, 'a valid delivery is still served')
  t.same(await res.json(), { received: 1 })

  let guard: NodeJS.Timeout | undefined
  const outcome = await Promise.race([
    Promise.all(closed).then(() => 'all closed' as const),
    new Promise((resolve) => { guard = setTimeout(() => resolve('some sockets still open'), 8000) }),
  ])
  clearTimeout(guard)
  t.equal(outcome, 'all closed', 'keepAliveTimeout closes idle sockets, headersTimeout the silent ones')
})
