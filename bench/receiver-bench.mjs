// The receiver's own cost per request, in process, paired: the Express middleware and the bare
// receiver (`receiver.receive`) with replay protection on (the default memory store) and off,
// each case timed in CPU time (process.cpuUsage: every thread, so a verify on the libuv pool
// counts too) over the same signed deliveries, interleaved in blocks of 100 requests within one
// process, so the shared machine's drift hits every case alike. Figures are the median µs per request over the
// repetitions, and the median of the per-repetition ratios.
//
//   node node_modules/typescript/bin/tsc -p tsconfig.build.json   # dist/ (emits without clearing)
//   node bench/receiver-bench.mjs                                  # 4 events (~1 KiB), ~1 min
//   node bench/receiver-bench.mjs --lib dist,/tmp/old/dist         # two builds side by side (before / after)
//   node bench/receiver-bench.mjs --events 4 --deliveries 4000 --reps 9
//   node bench/receiver-bench.mjs --pool false                     # verify on the event loop (default 'auto')
//
// `--lib` takes built trees (each a dist/ folder whose parent has the package.json, for the
// #crypto import); cases are named after the folder. Every repetition builds a fresh middleware or
// receiver (outside the timed region), so each delivery is new to its replay store: no request
// is answered as a duplicate. Its store is filled first (`--fill`, 100,000: the default store's cap). Deliveries are signed once at the start (`created` = now) and stay
// fresh for the 300 s window; the run stops with an error rather than time stale ones.
import { EventEmitter } from 'node:events'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { buildsBenchArgs } from './lib/args.mjs'
import { CUSTOMER_HANDLE, contentDigest, makeBody, makeKeyPair, signedHeaders } from './lib/fixtures.mjs'

const { args, events: EVENTS, deliveries: N, reps: REPS, libs, cases: wanted } = buildsBenchArgs(
  'node bench/receiver-bench.mjs [--lib dist[,other/dist]] [--events 4] [--deliveries 3000] [--reps 7] [--pool auto|false] [--fill 100000] [--cases express-replay,express-noreplay,receive-replay,receive-noreplay]',
  { events: '4', deliveries: '3000', cases: 'express-replay,express-noreplay,receive-replay,receive-noreplay' },
  { pool: { type: 'string', default: 'auto' }, fill: { type: 'string', default: '100000' } },
)
const FILL = Number(args.fill)

const { privateKey, spkiB64 } = makeKeyPair()
const body = makeBody(EVENTS)
const signedAt = Date.now()
const created = Math.floor(signedAt / 1000)
// Every delivery distinct: its own `created` (within the last 50 s) and, every 50
// deliveries, one more space after the array (the same events), so its own digest, base and
// signature.
const deliveries = Array.from({ length: N }, (_, i) => {
  const b = Buffer.concat([body, Buffer.from(' '.repeat(Math.floor(i / 50)))])
  return { body: b, headers: signedHeaders(contentDigest(b), privateKey, { created: created - (i % 50) }) }
})
// --pool false keeps the Ed25519 verify on the event loop: the receiver's own work stands out.
const opts = { publicKey: spkiB64, customerHandles: [CUSTOMER_HANDLE], verifyOnThreadPool: args.pool === 'false' ? false : 'auto' }
const noop = () => {}
const log = { info: noop, warn: noop, error: noop, debug: noop, trace: noop, fatal: noop, child () { return log } }

/** A request that streams its body when the middleware resumes it (no socket: the parser's work is not the receiver's). */
function fakeRequest (d) {
  const req = new EventEmitter()
  req.method = 'POST'
  req.url = '/webhooks'
  req.headers = d.headers
  req.readableEnded = false
  req.socket = { server: { requestTimeout: 300000 } }
  req.resume = () => { req.emit('data', d.body); req.readableEnded = true; req.emit('end'); return req }
  req.pause = () => req
  return req
}
function fakeResponse (done) {
  return {
    statusCode: 200,
    headersSent: false,
    headers: {},
    setHeader (k, v) { this.headers[k] = v },
    end () { this.headersSent = true; done(this.statusCode) },
    destroy () { done(-1) },
  }
}

const cases = []
for (const lib of libs) {
  const tag = libs.length > 1 ? `${path.basename(path.dirname(lib))}/` : ''
  const url = (p) => pathToFileURL(path.join(lib, p)).href
  const express = await import(url('express/index.js'))
  const receiverMod = await import(url('receiver/index.js'))
  // Internal since the entry lost its aliases; older builds exported them from the entry.
  const entry = await import(url('index.js'))
  const MemoryReplayStore = entry.MemoryReplayStore ?? (await import(url('replay/memory-store.js'))).MemoryReplayStore
  const deliveryId = entry.deliveryId ?? (await import(url('replay/types.js'))).deliveryId
  // The store as a busy receiver has it: full (100,000 deliveries by default), so every new claim
  // evicts the oldest and the garbage collector carries the whole store, as in a long load run.
  const fullStore = () => {
    const store = new MemoryReplayStore()
    const sig = Buffer.alloc(64, 9)
    const base = Buffer.alloc(150, 1)
    for (let i = 0; i < FILL; i++) {
      sig.writeUInt32BE(i)
      void store.claim(deliveryId.length === 2 ? deliveryId(base, sig) : deliveryId(sig), 360)
    }
    return store
  }
  const makeMiddleware = (replay) => express.mailchannelsWebhooks(replay ? { ...opts, replay: fullStore() } : { ...opts, replay: false })
  const makeReceiver = (replay) => {
    const options = replay ? { ...opts, replay: fullStore() } : { ...opts, replay: false }
    if (receiverMod.createWebhookPipeline === undefined) {
      // A build from before the one pipeline (src/receiver/pipeline.ts): its receiver's own steps.
      const r = receiverMod.createStandaloneReceiver(options).receiver
      return { receive: (d) => r.receive(d.body, d.headers, log), settle: (o, s) => { r.settle(o, s) } }
    }
    // The pipeline through a port that hands back what it decided (the case settles the claim).
    const p = receiverMod.createWebhookPipeline(options, { headers: (d) => d.headers, readBody: (d) => d.body, reply: (_d, reply) => ({ kind: 'answered', reply }), run: (_d, outcome) => outcome })
    return { receive: (d) => p.handle(d), settle: (o, s) => { receiverMod.settle(o, s) } }
  }

  for (const replay of [true, false]) {
    const suffix = replay ? 'replay' : 'noreplay'
    if (wanted.includes(`express-${suffix}`)) {
      cases.push({
        name: `${tag}express-${suffix}`,
        setup: () => makeMiddleware(replay),
        async run (mw, from, to) {
          for (let i = from; i < to; i++) {
            const d = deliveries[i]
            const status = await new Promise((resolve) => {
              const res = fakeResponse(resolve)
              mw(fakeRequest(d), res, (err) => { if (err !== undefined) resolve(-2); else { res.statusCode = 200; res.end('ok') } })
            })
            if (status !== 200) throw new Error(`${this.name}: delivery ${i} answered ${status}`)
          }
        },
      })
    }
    if (wanted.includes(`receive-${suffix}`)) {
      cases.push({
        name: `${tag}receive-${suffix}`,
        setup: () => makeReceiver(replay),
        async run (receiver, from, to) {
          for (let i = from; i < to; i++) {
            const d = deliveries[i]
            let outcome = receiver.receive(d)
            if (outcome instanceof Promise) outcome = await outcome
            if (outcome.kind !== 'accepted') throw new Error(`${this.name}: delivery ${i} was ${outcome.kind}`)
            receiver.settle(outcome, 200)
          }
        },
      })
    }
  }
}

const cpuMicros = () => { const u = process.cpuUsage(); return u.user + u.system }
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 }

/**
 * One repetition: every case gets a fresh subject, then the deliveries are run in blocks of
 * `BLOCK`, every case taking its turn on each block (in a rotating order), so a drift of the
 * machine within the repetition hits every case alike. Returns µs CPU per request, by case.
 */
async function repetition (r) {
  const subjects = cases.map((c) => c.setup())
  const cpu = cases.map(() => 0)
  for (let from = 0, b = 0; from < N; from += BLOCK, b++) {
    const to = Math.min(N, from + BLOCK)
    for (let j = 0; j < cases.length; j++) {
      const k = (j + b + r) % cases.length
      const t0 = cpuMicros()
      await cases[k].run(subjects[k], from, to)
      cpu[k] += cpuMicros() - t0
    }
  }
  return cpu.map((us) => us / N)
}

const BLOCK = 100
await repetition(0) // warm-up: JIT, key cache
const results = new Map(cases.map((c) => [c.name, []]))
for (let r = 0; r < REPS; r++) {
  if (Date.now() - signedAt > 240_000) throw new Error('the deliveries are about to go stale: use fewer --deliveries or --reps')
  const us = await repetition(r)
  cases.forEach((c, k) => results.get(c.name).push(us[k]))
  process.stderr.write(`  rep ${r + 1}/${REPS}\n`)
}

const os = await import('node:os')
console.log(`Settings: ${EVENTS} events (${body.length} B), ${N} distinct deliveries per repetition (cases interleaved in blocks of ${BLOCK}), ${REPS} reps, verifyOnThreadPool ${opts.verifyOnThreadPool}, replay stores filled with ${FILL} deliveries, CPU time per request (process.cpuUsage), Node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`)
console.log('')
console.log('| case | µs CPU / request (median) | min–max |')
console.log('|---|---|---|')
for (const c of cases) {
  const xs = results.get(c.name)
  console.log(`| ${c.name} | ${median(xs).toFixed(1)} | ${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)} |`)
}
console.log('')
console.log('| ratio (per rep, median) | value | min–max |')
console.log('|---|---|---|')
const ratio = (a, b) => {
  const xs = results.get(a); const ys = results.get(b)
  if (xs === undefined || ys === undefined) return
  const rs = xs.map((x, i) => x / ys[i])
  console.log(`| ${a} ÷ ${b} | ${median(rs).toFixed(3)} | ${Math.min(...rs).toFixed(3)}–${Math.max(...rs).toFixed(3)} |`)
}
const tags = libs.length > 1 ? libs.map((lib) => `${path.basename(path.dirname(lib))}/`) : ['']
for (const tag of tags) {
  ratio(`${tag}express-replay`, `${tag}express-noreplay`)
  ratio(`${tag}receive-replay`, `${tag}receive-noreplay`)
}
if (tags.length > 1) {
  for (const kind of ['express-replay', 'express-noreplay', 'receive-replay', 'receive-noreplay']) ratio(`${tags[0]}${kind}`, `${tags[1]}${kind}`)
}
