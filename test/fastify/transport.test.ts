// Real server on 127.0.0.1 with raw sockets: what Node's HTTP parser does to duplicate
// header lines, trailers, chunked bodies and slow clients.
import http from 'node:http'
import net from 'node:net'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { delivery, HANDLE, KEYS, parseRaw, rawRequest, requestHead } from './helpers/fixtures.js'

async function listen (t: Test, opts: Record<string, unknown> = {}): Promise<{ app: FastifyInstance, port: number, calls: () => number }> {
  const app = Fastify(opts as FastifyServerOptions) as unknown as FastifyInstance
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false, bodyLimit: 4096 })
  let calls = 0
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request) => { calls++; return { n: request.webhookEvents.length } })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { app, port: (app.server.address() as net.AddressInfo).port, calls: () => calls }
}

t.test('a valid delivery over a raw socket (Content-Length and chunked)', async (t) => {
  const { port, calls } = await listen(t)
  const d = delivery()
  const r1 = parseRaw(await rawRequest(port, requestHead('/wh', d, [`Content-Length: ${d.body.length}`]) + '\r\n' + d.body.toString()))
  t.equal(r1.status, 200)
  const chunked = `${(50).toString(16)}\r\n${d.body.subarray(0, 50).toString()}\r\n${(d.body.length - 50).toString(16)}\r\n${d.body.subarray(50).toString()}\r\n0\r\n\r\n`
  const r2 = parseRaw(await rawRequest(port, requestHead('/wh', d, ['Transfer-Encoding: chunked']) + '\r\n' + chunked))
  t.equal(r2.status, 200)
  t.equal(calls(), 2)
})

t.test('C2: two Signature-Input lines (joined by Node) -> 400 malformed_header', async (t) => {
  const { port, calls } = await listen(t)
  const d = delivery()
  const evil = d.headers['signature-input'].replace('keyid="mckey"', 'keyid="evil"')
  const head = requestHead('/wh', d, [`Signature-Input: ${evil}`, `Content-Length: ${d.body.length}`])
  const r = parseRaw(await rawRequest(port, head + '\r\n' + d.body.toString()))
  t.equal(r.status, 400)
  t.equal(r.body?.code, 'malformed_header')
  t.equal(calls(), 0)
})

t.test('C10: signature headers only as trailers -> 400 missing_header', async (t) => {
  const { port, calls } = await listen(t)
  const d = delivery()
  const body = d.body.toString()
  const trailers = `content-digest: ${d.headers['content-digest']}\r\nsignature-input: ${d.headers['signature-input']}\r\nsignature: ${d.headers.signature}\r\n`
  const head = requestHead('/wh', d, ['Transfer-Encoding: chunked', 'Trailer: Content-Digest, Signature-Input, Signature'], ['content-digest', 'signature-input', 'signature'])
  const r = parseRaw(await rawRequest(port, `${head}\r\n${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n${trailers}\r\n`))
  t.equal(r.status, 400)
  t.equal(r.body?.code, 'missing_header')
  t.equal(calls(), 0)
})

t.test('F1 over a socket: Content-Length over the limit -> 413 before the body is sent; chunked over the limit -> 413', async (t) => {
  const { port, calls } = await listen(t)
  const d = delivery()
  const r1 = parseRaw(await rawRequest(port, requestHead('/wh', d, ['Content-Length: 5000']) + '\r\n'))
  t.equal(r1.status, 413, 'answered without sending any body byte')
  t.equal(r1.body?.code, 'payload_too_large')
  t.match(r1.head, /connection: close/i)
  const chunk = `[${' '.repeat(4998)}]`
  const r2 = parseRaw(await rawRequest(port, requestHead('/wh', d, ['Transfer-Encoding: chunked']) + `\r\n${(5000).toString(16)}\r\n${chunk}\r\n0\r\n\r\n`))
  t.equal(r2.status, 413)
  t.equal(r2.body?.code, 'payload_too_large')
  t.equal(calls(), 0)
})

t.test('G2: a trickled body is cut off by requestTimeout', async (t) => {
  // Node enforces requestTimeout on a timer (connectionsCheckingInterval, 30 s by default): shorten both here.
  const serverFactory = (handler: http.RequestListener) => http.createServer({ requestTimeout: 300, connectionsCheckingInterval: 50 }, handler)
  const { port, calls } = await listen(t, { requestTimeout: 300, serverFactory })
  const d = delivery()
  const socket = net.connect(port, '127.0.0.1')
  const received: Buffer[] = []
  socket.on('data', (c) => received.push(c))
  socket.on('error', () => {})
  socket.write(requestHead('/wh', d, ['Content-Length: 1000']) + '\r\n')
  const started = Date.now()
  const timer = setInterval(() => { if (!socket.destroyed) socket.write('[') }, 100)
  const closed = await new Promise<boolean>((resolve) => {
    const limit = setTimeout(() => resolve(false), 5000)
    socket.on('close', () => { clearTimeout(limit); resolve(true) })
  })
  clearInterval(timer)
  socket.destroy()
  const elapsed = Date.now() - started
  const text = Buffer.concat(received).toString('latin1')
  t.ok(closed, `closed after ${elapsed} ms`)
  t.ok(text === '' || /^HTTP\/1\.1 408/.test(text), `408 or closed: ${text.slice(0, 20)}`)
  t.ok(elapsed < 5000)
  t.equal(calls(), 0)
})
