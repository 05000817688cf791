// The Fastify plugin or the Express middleware of two or more builds, side by side in one process:
// whole requests through the framework on node:http's own IncomingMessage and ServerResponse (no
// socket, no load generator), each case timed in CPU time (process.cpuUsage) over blocks of
// deliveries, the cases rotated within each round, so the shared machine's drift hits all alike.
// Every delivery is new (its own events and signature). The handler after the library answers 204.
//
//   node node_modules/typescript/bin/tsc -p tsconfig.build.json
//   node bench/harness/adapters-pair.mjs --framework fastify --lib /tmp/old/dist,dist
//   node bench/harness/adapters-pair.mjs --framework express --lib /tmp/old/dist,dist,/tmp/old/dist --rounds 300
//   node bench/harness/adapters-pair.mjs --framework express-writes   # no library: what the writes cost
//   node bench/harness/adapters-pair.mjs --framework fastify --ideal --lib dist   # + the ideal receiver, node:crypto and libsodium
//
// `--lib` takes built trees (each a dist/ folder whose parent has the package.json); the ratios are
// each case's time ÷ the first's, median of per-round ratios: over every round, and over the
// "calm" rounds, those in which the cases' times were within 1.25× of each other (in the others
// another process had taken the core). `--pool false` (the default here) verifies on the event
// loop, so the adapters' own work is not hidden behind the pool's wake-ups.
//
// `--framework express-writes` loads no library: three Express apps whose middleware makes only
// the writes on the request and response that the Express middleware made before (a symbol on the
// request, `req.webhookEvents`, `res.end` wrapped and put back at its first call), the ones it
// makes now (a WeakSet entry, `req.webhookEvents`, `res.end` wrapped once), and none.
//
// `--ideal` (Fastify only) puts two anchors first: bench/lib/ideal.mjs on Fastify with a raw-Buffer
// parser, as bench/http-server.mjs's ideal Fastify receiver, with node:crypto's Ed25519 (the ratios'
// baseline) and with libsodium's (sodium-native): what is left between the second and the library is
// what the library adds (its checks, typed events, replay claim, hooks), its Ed25519 aside.
import http from 'node:http'
import { createRequire } from 'node:module'
import net from 'node:net'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { CUSTOMER_HANDLE, KEY_ID, contentDigest, makeBody, makeKeyPair, signedHeaders } from '../lib/fixtures.mjs'
import { createIdealVerifier } from '../lib/ideal.mjs'

const { values: args } = parseArgs({
  options: {
    framework: { type: 'string', default: 'fastify' },
    lib: { type: 'string', default: 'dist' },
    events: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '200' },
    block: { type: 'string', default: '100' },
    pool: { type: 'string', default: 'false' },
    ideal: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
})
if (args.help || !['fastify', 'express', 'express-writes'].includes(args.framework)) {
  console.log('node bench/harness/adapters-pair.mjs --framework fastify|express|express-writes --lib a/dist,b/dist [--events 4] [--rounds 200] [--block 100] [--pool false|auto] [--ideal]')
  process.exit(args.help ? 0 : 1)
}
const ROUNDS = Number(args.rounds)
const BLOCK = Number(args.block)
const libs = args.lib.split(',').map((d) => path.resolve(d))
const require = createRequire(path.resolve('package.json'))
const BODY_LIMIT = 16 * 1024 * 1024
const pool = args.pool === 'false' ? false : 'auto'

const { privateKey, spkiB64 } = makeKeyPair()
const template = makeBody(Number(args.events))
// Distinct deliveries of the same size: a counter written over the first event's request id makes
// each body, digest and signature its own. Each case has its own replay store (its own plugin or
// middleware), so every case gets the same deliveries, each new to it.
const idAt = template.indexOf('"request_id":"req_') + '"request_id":"req_'.length
const created = Math.floor(Date.now() / 1000)
const DELIVERIES = Array.from({ length: ROUNDS * BLOCK + 1000 }, (_, i) => {
  const body = Buffer.from(template)
  body.write(i.toString(16).padStart(8, '0'), idAt, 'latin1')
  return { body, headers: signedHeaders(contentDigest(body), privateKey, { created }) }
})

function expressApp () {
  const express = require('express')
  const app = express()
  app.disable('x-powered-by')
  app.set('etag', false)
  return app
}

async function setup (lib) {
  const options = { publicKey: spkiB64, customerHandles: [CUSTOMER_HANDLE], bodyLimit: BODY_LIMIT, verifyOnThreadPool: pool }
  const url = (p) => pathToFileURL(path.join(lib, p)).href
  let handle
  if (args.framework === 'express') {
    const app = expressApp()
    const { mailchannelsWebhooks } = await import(url('express/index.js'))
    app.post('/webhook', mailchannelsWebhooks(options), (_req, res) => { res.status(204).end() })
    handle = app
  } else {
    const Fastify = require('fastify')
    const app = Fastify({ logger: false, bodyLimit: BODY_LIMIT })
    await app.register((await import(url('fastify/index.js'))).default, options)
    app.post('/webhook', { config: { mailchannelsWebhooks: true } }, (_request, reply) => { reply.code(204).send() })
    await app.ready()
    handle = app.routing
  }
  return { name: `${path.basename(path.dirname(lib))}/${path.basename(lib)}`, handle, next: 0, us: [] }
}

/** The ideal Fastify receiver (bench/http-server.mjs's), Ed25519 from node:crypto or, with `sodium`, libsodium. */
async function idealCase (name, sodium) {
  const ideal = createIdealVerifier({ [KEY_ID]: spkiB64 }, { sodium })
  const app = require('fastify')({ logger: false, bodyLimit: BODY_LIMIT })
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: BODY_LIMIT }, (_request, body, done) => { done(null, body) })
  app.post('/webhook', (request, reply) => {
    const events = ideal.verifyAndParse(request.body, request.headers)
    reply.code(events === null ? 401 : 204).send()
  })
  await app.ready()
  return { name, handle: app.routing, next: 0, us: [] }
}

const kMark = Symbol('verified')
const marked = new WeakSet()
const WRITES = {
  before (req, res, next) {
    if (req[kMark] === true) return next()
    req[kMark] = true
    req.webhookEvents = []
    const end = res.end
    res.end = function (...a) { res.end = end; return end.apply(this, a) }
    next()
  },
  now (req, res, next) {
    if (marked.has(req)) return next()
    marked.add(req)
    req.webhookEvents = []
    const end = res.end
    let settled = false
    res.end = function () { if (!settled) settled = true; return end.apply(this, arguments) }
    next()
  },
  none (_req, _res, next) { next() },
}

function writesCase (name) {
  const app = expressApp()
  app.post('/webhook', WRITES[name], (_req, res) => { res.status(204).end() })
  return { name: `writes: ${name}`, handle: app, next: 0, us: [] }
}

const socket = new net.Socket()
function one (c) {
  return new Promise((resolve, reject) => {
    const d = DELIVERIES[c.next++]
    const req = new http.IncomingMessage(socket)
    req.method = 'POST'
    req.url = '/webhook'
    req.headers = { host: '127.0.0.1', 'content-length': String(d.body.length), ...d.headers }
    const res = new http.ServerResponse(req)
    const end = res.end
    res.end = function (...a) {
      const r = end.apply(this, a)
      if (res.statusCode === 204) resolve()
      else reject(new Error(`${c.name} answered ${res.statusCode}`))
      return r
    }
    c.handle(req, res)
    req.push(d.body)
    req.push(null)
  })
}

async function block (c, n) {
  const start = process.cpuUsage()
  for (let i = 0; i < n; i++) await one(c)
  const used = process.cpuUsage(start)
  return (used.user + used.system) / n
}

const cases = []
if (args.ideal && args.framework === 'fastify') cases.push(await idealCase('ideal (node:crypto)'), await idealCase('ideal (libsodium)', require('sodium-native')))
if (args.framework === 'express-writes') cases.push(...Object.keys(WRITES).map(writesCase))
else for (const lib of libs) cases.push(await setup(lib))
for (const c of cases) await block(c, 1000)
for (let r = 0; r < ROUNDS; r++) {
  for (let i = 0; i < cases.length; i++) {
    const c = cases[(i + r) % cases.length]
    c.us.push(await block(c, BLOCK))
  }
}

const quantile = (xs, q) => { const s = [...xs].sort((a, b) => a - b); return s[Math.round(q * (s.length - 1))] }
const median = (xs) => quantile(xs, 0.5)
const calm = []
for (let r = 0; r < ROUNDS; r++) {
  const t = cases.map((c) => c.us[r])
  if (Math.max(...t) / Math.min(...t) < 1.25) calm.push(r)
}
console.log(`${args.framework}, ${args.events} events, ${ROUNDS} rounds of ${BLOCK} deliveries per case, verifyOnThreadPool ${pool}; ${calm.length} calm rounds`)
for (const c of cases) console.log(`${c.name.padEnd(32)} ${median(c.us).toFixed(2)} µs CPU per delivery (p25 ${quantile(c.us, 0.25).toFixed(1)}, p75 ${quantile(c.us, 0.75).toFixed(1)})`)
// With --ideal, each library case is also compared with the libsodium anchor (the second case).
for (const base of args.ideal && args.framework === 'fastify' ? [cases[0], cases[1]] : [cases[0]]) {
  for (const c of cases.slice(cases.indexOf(base) + 1)) {
    const all = c.us.map((u, r) => u / base.us[r])
    const quiet = calm.map((r) => all[r])
    const fmt = (xs) => xs.length === 0 ? 'n/a' : `${median(xs).toFixed(3)} (p25–p75 ${quantile(xs, 0.25).toFixed(3)}–${quantile(xs, 0.75).toFixed(3)})`
    console.log(`${c.name} ÷ ${base.name}: calm ${fmt(quiet)}, all ${fmt(all)}`)
  }
}
