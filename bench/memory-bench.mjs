// Memory of a receiver under 1 MiB deliveries (after `npm run build`):
//   node --expose-gc bench/memory-bench.mjs [--concurrent 100] [--rounds 5] [--slow 100] [variants...]
// Variants: fastify-plugin, express-middleware, fastify-ideal (default: all three). Each runs in its
// own child process (so the load's buffers do not count), configured as the library's defaults
// (bodyLimit 1 MiB, verifyOnThreadPool 'auto', replay on with the memory store), and reports
// /proc/self/status (VmRSS, VmHWM: the peak RSS since the last reset through /proc/self/clear_refs).
//  1. burst: `--concurrent` deliveries of ~1 MiB (4,000 events, distinct signatures) sent at once,
//     `--rounds` times: the peak RSS over the rounds, minus the settled RSS before them.
//  2. slow uploads: `--slow` connections each send the headers and all but the last byte of a
//     1 MiB delivery, then stall: what the server holds per stalled upload (RSS and ArrayBuffer
//     memory, after a GC), then the last bytes are sent and every delivery must be accepted.
import { fork } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { fileURLToPath } from 'node:url'
import { CUSTOMER_HANDLE, contentDigest, makeBody, makeKeyPair, signedHeaders } from './lib/fixtures.mjs'

const MiB = 1024 * 1024

function procStatus () {
  const s = fs.readFileSync('/proc/self/status', 'utf8')
  const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? NaN) * 1024
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') }
}

if (process.argv[2] === '--server') {
  const variant = process.argv[3]
  const publicKey = process.env.BENCH_PUBLIC_KEY
  let server
  if (variant === 'fastify-plugin') {
    const { default: Fastify } = await import('fastify')
    const { default: plugin } = await import('../dist/fastify/index.js')
    const app = Fastify({ logger: false })
    await app.register(plugin, { publicKey, customerHandles: [CUSTOMER_HANDLE] })
    app.post('/webhook', { config: { mailchannelsWebhooks: true } }, (request, reply) => { reply.code(204).send() })
    await app.listen({ host: '127.0.0.1', port: 0 })
    server = app.server
  } else if (variant === 'express-middleware') {
    const { default: express } = await import('express')
    const { mailchannelsWebhooks } = await import('../dist/express/index.js')
    const app = express()
    app.post('/webhook', mailchannelsWebhooks({ publicKey, customerHandles: [CUSTOMER_HANDLE] }), (req, res) => { res.status(204).end() })
    server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
  } else if (variant === 'fastify-ideal') {
    const { default: Fastify } = await import('fastify')
    const { createIdealVerifier } = await import('./lib/ideal.mjs')
    const { KEY_ID } = await import('./lib/fixtures.mjs')
    const ideal = createIdealVerifier({ [KEY_ID]: publicKey })
    const app = Fastify({ logger: false, bodyLimit: MiB })
    app.removeContentTypeParser('application/json')
    app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => { done(null, body) })
    app.post('/webhook', async (request, reply) => reply.code(ideal.verifyAndParse(request.body, request.headers) === null ? 401 : 204).send())
    await app.listen({ host: '127.0.0.1', port: 0 })
    server = app.server
  } else {
    throw new Error(`unknown variant ${variant}`)
  }
  process.on('message', (m) => {
    if (m === 'gc') globalThis.gc?.()
    if (m === 'reset') fs.writeFileSync('/proc/self/clear_refs', '5') // resets VmHWM to the current RSS
    const { arrayBuffers, heapUsed } = process.memoryUsage()
    process.send({ ...procStatus(), arrayBuffers, heapUsed })
  })
  process.on('disconnect', () => process.exit(0)) // the bench ended, however it ended
  process.send({ port: server.address().port })
} else {
  const args = process.argv.slice(2)
  const opt = (name, def) => { const i = args.indexOf(name); if (i === -1) return def; const v = Number(args[i + 1]); args.splice(i, 2); return v }
  const concurrent = opt('--concurrent', 100)
  const rounds = opt('--rounds', 5)
  const slow = opt('--slow', 100)
  const variants = args.length > 0 ? args : ['fastify-plugin', 'express-middleware', 'fastify-ideal']

  const keys = makeKeyPair()
  const body = makeBody(4000)
  if (body.length > MiB) throw new Error('body over 1 MiB')
  // Every delivery differs (a counter in the first event's padding), as real ones do: replay
  // protection is on, and an identical delivery would be answered as a duplicate.
  const SEED_AT = body.indexOf('xxxxxxxxxx')
  let deliveries = 0
  const delivery = () => {
    const b = Buffer.from(body)
    b.write(String(1_000_000_000 + deliveries++), SEED_AT, 'latin1')
    return { body: b, headers: signedHeaders(contentDigest(b), keys.privateKey) }
  }
  const fmt = (b) => `${(b / MiB).toFixed(1)} MiB`

  const children = new Set()
  process.on('exit', () => { for (const c of children) c.kill() })
  function startServer (variant) {
    const child = fork(fileURLToPath(import.meta.url), ['--server', variant], {
      env: { ...process.env, BENCH_PUBLIC_KEY: keys.spkiB64 },
      execArgv: ['--expose-gc'],
    })
    children.add(child)
    const replies = []
    let waiting = null
    child.on('message', (m) => { if (waiting) { const w = waiting; waiting = null; w(m) } else replies.push(m) })
    const next = () => new Promise((resolve) => { if (replies.length) resolve(replies.shift()); else waiting = resolve })
    const ask = async (cmd) => { child.send(cmd); return next() }
    return next().then(({ port }) => ({ child, port, ask }))
  }

  function post (agent, port) {
    const { body, headers } = delivery()
    return new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, path: '/webhook', method: 'POST', agent, headers: { ...headers, 'content-length': body.length } }, (res) => {
        res.resume(); res.on('end', () => resolve(res.statusCode))
      })
      req.on('error', reject)
      req.end(body)
    })
  }

  async function stalledUploads (port, n) {
    const sockets = await Promise.all(Array.from({ length: n }, () => new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(s)); s.on('error', reject)
    })))
    const statuses = sockets.map((s) => new Promise((resolve) => {
      let data = ''
      s.on('data', (d) => { data += d; const m = /^HTTP\/1\.1 (\d+)/.exec(data); if (m) { resolve(Number(m[1])); s.destroy() } })
    }))
    const bodies = sockets.map(() => delivery())
    for (const [i, s] of sockets.entries()) {
      const { body, headers: h } = bodies[i]
      s.write(`POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n` +
        `Content-Digest: ${h['content-digest']}\r\nSignature-Input: ${h['signature-input']}\r\nSignature: ${h.signature}\r\n\r\n`)
      s.write(body.subarray(0, body.length - 1))
    }
    return { finish: () => { for (const [i, s] of sockets.entries()) s.end(bodies[i].body.subarray(body.length - 1)); return Promise.all(statuses) } }
  }

  console.log('## Memory bench')
  console.log(`Settings: ${concurrent} concurrent deliveries of ${body.length.toLocaleString('en')} B (4,000 events) × ${rounds} rounds; ${slow} stalled 1 MiB uploads; ` +
    `library defaults (bodyLimit 1 MiB, verifyOnThreadPool 'auto', replay: MemoryReplayStore); Node ${process.version}.`)
  console.log('| receiver | settled RSS | peak RSS, burst | peak − settled | per delivery | stalled uploads: RSS held | ArrayBuffers held | per stalled upload | statuses |')
  console.log('|---|---|---|---|---|---|---|---|---|')
  for (const variant of variants) {
    const { child, port, ask } = await startServer(variant)
    process.stderr.write(`${variant}: started on ${port}\n`)
    const agent = new http.Agent({ keepAlive: true, maxSockets: concurrent })
    // Warm-up: a few deliveries, so code and buffers that every request needs are in place.
    for (let i = 0; i < 3; i++) { const st = await post(agent, port); if (st !== 204) throw new Error(`${variant} rejected a valid delivery (${st})`) }
    process.stderr.write(`${variant}: warm\n`)
    await ask('gc')
    const settled = await ask('reset')
    const codes = new Map()
    for (let r = 0; r < rounds; r++) {
      const all = await Promise.all(Array.from({ length: concurrent }, () => post(agent, port)))
      for (const c of all) codes.set(c, (codes.get(c) ?? 0) + 1)
    }
    const burst = await ask('status')
    agent.destroy()
    await ask('gc')
    const before = await ask('gc')
    const stalled = await stalledUploads(port, slow)
    await new Promise((resolve) => setTimeout(resolve, 1000))
    await ask('gc')
    const held = await ask('gc')
    const slowCodes = await stalled.finish()
    for (const c of slowCodes) codes.set(`slow ${c}`, (codes.get(`slow ${c}`) ?? 0) + 1)
    const heldRss = held.rss - before.rss
    const heldAb = held.arrayBuffers - before.arrayBuffers
    console.log(`| ${variant} | ${fmt(settled.rss)} | ${fmt(burst.hwm)} | ${fmt(burst.hwm - settled.rss)} | ${fmt((burst.hwm - settled.rss) / concurrent)} | ` +
      `${fmt(heldRss)} | ${fmt(heldAb)} | ${fmt(Math.max(heldRss, heldAb) / slow)} | ${[...codes].map(([c, n]) => `${c}: ${n}`).join(', ')} |`)
    child.kill()
  }
}
