// The HTTP bench: each receiver runs in its own child process (bench/http-server.mjs) on
// 127.0.0.1; this process loads them in turn with autocannon and prints throughput, latency
// and CPU per request, and ratios vs the ideal receivers. bench/run.mjs starts it with its own
// arguments (see bench/options.mjs); it can also be run directly after `npm run build`:
//   node bench/http-bench.mjs --duration 5 --http-reps 3
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { installedVersion, machine } from './lib/env.mjs'
import { contentDigest, makeBody, makeKeyPair, signedHeaders, tamper } from './lib/fixtures.mjs'
import { fmtBytes, fmtOps, fmtRatio, mdTable, median, ratio, stats } from './lib/measure.mjs'
import { SERVERS, parseBenchArgs } from './options.mjs'

const here = path.dirname(fileURLToPath(import.meta.url))
const s = parseBenchArgs(process.argv.slice(2)).httpBench
const log = (line) => process.stderr.write(line + '\n')

const FASTIFY_IDEAL = 'fastify-ideal'
const EXPRESS_IDEAL = 'express-ideal'
const SUBSCRIBED = 'fastify-router-subscribed'
const VARIANTS = [FASTIFY_IDEAL, EXPRESS_IDEAL, ...SERVERS.filter((v) => s.servers === undefined || s.servers.includes(v))]
const LABELS = {
  'fastify-ideal': 'ideal Fastify receiver',
  'express-ideal': 'ideal Express receiver',
  'fastify-plugin': 'Fastify plugin',
  'fastify-router': 'Fastify plugin, handlers: router',
  [SUBSCRIBED]: 'Fastify plugin, handlers: router, delivery channel subscribed',
  'web-handler': 'web handler (@hono/node-server)',
  'express-middleware': 'Express middleware',
  'fastify-plugin-node-crypto': 'Fastify plugin without sodium-native (node:crypto)',
  'express-middleware-node-crypto': 'Express middleware without sodium-native (node:crypto)',
}

function canPin () {
  if (os.cpus().length < 2) return false
  try { execFileSync('taskset', ['-V'], { stdio: 'ignore' }); return true } catch { return false }
}
const PIN = s.pin && canPin()
if (s.pin && !PIN) log('--pin ignored: it needs taskset and at least 2 CPUs')
if (PIN) execFileSync('taskset', ['-a', '-cp', '0', String(process.pid)], { stdio: 'ignore' })

const poolSetting = s.verifyOnThreadPool === 'auto' ? "'auto'" : String(s.verifyOnThreadPool)
const settings = [
  `${s.duration} s × ${s.reps} rep${s.reps === 1 ? '' : 's'}, ${s.warmup} s warm-up per server and body`,
  s.unique === 'auto'
    ? 'every request a new delivery with its own events and signature (bodies built ahead up to 192 MiB per run, the rest made as they are sent; no request repeats a delivery, no two runs share an event)'
    : s.unique > 0 ? `unique deliveries: ${s.unique.toLocaleString('en')} per run (distinct events and signatures, cycled; no two runs share an event)` : 'unique deliveries: off (every request of a run is identical)',
  `verifyOnThreadPool: ${poolSetting}`,
  `Ed25519: ${installedVersion('sodium-native') !== '?' ? `libsodium (sodium-native ${installedVersion('sodium-native')}), node:crypto in the *without sodium-native* rows` : 'node:crypto (sodium-native is not installed)'}`,
  s.replay === 'memory' ? 'replay protection: on (the default MemoryReplayStore; every delivery is new, so each is claimed and completed)' : 'replay protection: off',
  'router rows: path + handlers (WebhookEventRouter, MemoryClaimStore, one empty handler per event type)',
  'web handler: createWebhookHandler (mailchannels-webhooks/web) served by @hono/node-server serve() (node:http ↔ fetch Request/Response)',
  PIN ? 'pinned (server on CPU 1, load generator on CPU 0)' : 'unpinned (server and load generator share every CPU)',
  `autocannon ${installedVersion('autocannon')}, Fastify ${installedVersion('fastify')}, Express ${installedVersion('express')}, @hono/node-server ${installedVersion('@hono/node-server')}, ${machine()}`,
].join('; ')

// ------------------------------------------------------------------ servers
const keys = makeKeyPair()
const servers = new Map() // variant -> { pid, port }

function stopServers () {
  for (const { pid } of servers.values()) {
    try { process.kill(pid, 'SIGTERM') } catch {}
  }
}
process.on('exit', stopServers)
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => { stopServers(); process.exit(130) })

function startServer (variant) {
  return new Promise((resolve, reject) => {
    // BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=prof": Node options for the servers only (profiling).
    const argv = [...(process.env.BENCH_SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? []), path.join(here, 'http-server.mjs'), variant]
    const child = spawn(PIN ? 'taskset' : process.execPath, PIN ? ['-c', '1', process.execPath, ...argv] : argv, {
      env: { ...process.env, BENCH_PUBLIC_KEY: keys.spkiB64, BENCH_VERIFY_ON_THREAD_POOL: String(s.verifyOnThreadPool), BENCH_REPLAY: s.replay },
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const timer = setTimeout(() => { child.kill(); reject(new Error(`${variant}: not listening after 20 s`)) }, 20_000)
    let out = ''
    child.stdout.on('data', (d) => {
      out += d
      const m = /READY (\d+)/.exec(out)
      if (m) { clearTimeout(timer); resolve({ pid: child.pid, port: Number(m[1]) }) }
    })
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`${variant} exited with ${code} before listening`)) })
  })
}

/** CPU seconds (user + system) a process has used so far, from /proc (Linux); NaN elsewhere. */
const CLK_TCK = (() => { try { return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100 } catch { return 100 } })()
function cpuSeconds (pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(f[11]) + Number(f[12])) / CLK_TCK
  } catch {
    return NaN
  }
}

/**
 * Waits until the server of the run that just ended is idle again: under a tenth of a core over
 * 200 ms, at most 60 s. autocannon stops sending when a run ends, but a server slower than the
 * load goes on working through the requests it had read, and on a shared machine that work
 * would be measured against the next server's run (a collapsing receiver's backlog took a
 * sixth of a core, up to half with --pin, from whichever server came next).
 */
async function settle (variant, pid) {
  const started = performance.now()
  for (;;) {
    const before = cpuSeconds(pid)
    await new Promise((resolve) => setTimeout(resolve, 200))
    // NaN (no /proc): nothing to wait for.
    if (!(cpuSeconds(pid) - before >= 0.02) || performance.now() - started > 60_000) break
  }
  const waited = performance.now() - started
  if (waited > 1000) log(`  ${variant} worked ${(waited / 1000).toFixed(1)} s past its run before the next one started`)
}

// ------------------------------------------------------------------ load
/** The distinct bodies of a load run take at most this much memory; beyond, bodies are reused with another `created`. */
const POOL_BYTES = 192 * 1024 * 1024
let runs = 0

/**
 * How many deliveries a load run of `variant` gets. With `--unique auto` (the default): one per
 * request, from the highest rate this server reached so far with this body (its warm-up, then its
 * earlier runs), with a margin; a run that sends more repeats deliveries, and says so.
 */
const rates = new Map() // `${variant} ${events}` -> { rps: highest req/s seen, timed: whether in a timed run }
function poolSize (variant, events, bytes, seconds) {
  if (s.unique !== 'auto') return s.unique
  // A warm-up (short, the code still being optimised) runs slower than the timed runs: a wider margin.
  const seen = rates.get(`${variant} ${events}`) ?? { rps: 15_000 * 1024 / Math.max(1024, bytes), timed: false }
  return Math.ceil(seen.rps * (seen.timed ? 2 : 2.5) * seconds) + 500
}
function noteRate (variant, events, rps, timed) {
  const key = `${variant} ${events}`
  const seen = rates.get(key)
  rates.set(key, { rps: Math.max(seen?.rps ?? 0, rps), timed: timed || (seen?.timed ?? false) })
}

/**
 * The requests of one load run, signed now (so a run never outlives the 300 s freshness window):
 * one delivery (`--unique 0`), or `size` distinct ones, as real deliveries differ: each has its own
 * signature and its own events (a seed in every event's `reason`, so each event's fingerprint
 * differs and a seen-events store sees new events; the body size does not change). No two runs
 * share an event. Bodies are built ahead up to the run's memory budget; with `--unique auto` the
 * rest, and any request beyond the expected count, are made as they are sent (`fresh`), so no
 * request repeats a delivery and memory stays bounded (large bodies at high rates). With a fixed
 * `--unique N` over the budget, bodies are reused with an earlier `created` (another signature:
 * a new delivery for the replay store, with events a seen-events store has seen).
 */
function requestPool (template, size) {
  const created = Math.floor(Date.now() / 1000)
  if (size === 0) {
    const body = Buffer.from(JSON.stringify(template))
    return { requests: [{ body, headers: signedHeaders(contentDigest(body), keys.privateKey, { created, label: labelFor(0) }) }], bodies: 1 }
  }
  const run = (runs++).toString(36)
  const fresh = s.unique === 'auto' ? freshDeliveries(template, run) : undefined
  const bytes = Buffer.byteLength(JSON.stringify(template))
  const bodies = Math.max(1, Math.min(size, Math.floor(POOL_BYTES / bytes)))
  if (fresh !== undefined) return { requests: Array.from({ length: bodies }, () => fresh()), bodies: size, fresh }
  const made = Array.from({ length: bodies }, (_, i) => {
    const seed = `${run}.${i.toString(36)}.`
    const body = Buffer.from(JSON.stringify(template.map((e) => ({ ...e, reason: seed + e.reason.slice(seed.length) }))))
    return { body, digest: contentDigest(body) }
  })
  const requests = Array.from({ length: size }, (_, i) => {
    const { body, digest } = made[i % bodies]
    return { body, headers: signedHeaders(digest, keys.privateKey, { created: created - Math.floor(i / bodies), label: labelFor(i) }) }
  })
  return { requests, bodies }
}

/**
 * Makes deliveries of run `run` one at a time, each with new events: the template body is copied
 * and a fixed-width seed (the run, then a counter) written over the start of every event's
 * `reason` padding, then digested and signed. Cheap enough to run while the load runs (copy,
 * one short write per event, SHA-256 and one signature per request); its cost shows in the
 * load-generator CPU column.
 */
function freshDeliveries (template, run) {
  const width = run.length + 9
  // The seed's room at the start of every reason, as the prebuilt bodies have it (same size).
  const body = Buffer.from(JSON.stringify(template.map((e) => ({ ...e, reason: '-'.repeat(width) + e.reason.slice(width) }))))
  const offsets = []
  const marker = Buffer.from('"reason":"')
  for (let at = body.indexOf(marker); at !== -1; at = body.indexOf(marker, at + 1)) offsets.push(at + marker.length)
  let count = 0
  return () => {
    const seed = `${run}.${(count++).toString(36).padStart(7, '0')}.`
    const b = Buffer.allocUnsafe(body.length)
    body.copy(b)
    for (let k = 0; k < offsets.length; k++) b.latin1Write(seed, offsets[k])
    return { body: b, headers: signedHeaders(contentDigest(b), keys.privateKey, { label: labelFor(count) }) }
  }
}
const labelFor = (i) => (s.unique === 0 ? 'sig_1' : `sig_${1_000_000 + i}`)

async function post (port, body, headers) {
  const res = await fetch(`http://127.0.0.1:${port}/webhook`, { method: 'POST', body, headers })
  await res.arrayBuffer()
  return res.status
}

/**
 * One load run with the requests of `pool` (`requestPool`: built before, outside the measured CPU
 * time); once they are used up, new ones from `pool.fresh` when there is one, else the same again.
 */
function load (port, { requests: pool, fresh }, connections, duration) {
  let next = 0
  const nextRequest = fresh === undefined
    ? () => pool[next++ % pool.length]
    : () => (next < pool.length ? pool[next++] : (next++, fresh()))
  const requests = pool.length > 1 || fresh !== undefined
    ? [{ setupRequest: (req) => { const r = nextRequest(); Object.assign(req.headers, r.headers); req.body = r.body; return req } }]
    : undefined
  // autocannon's own histogram keeps whole milliseconds: record float ms here.
  let latencies = new Float64Array(1 << 16)
  let n = 0
  return new Promise((resolve, reject) => {
    const instance = autocannon({
      url: `http://127.0.0.1:${port}/webhook`,
      method: 'POST',
      headers: pool[0].headers,
      body: pool[0].body,
      connections,
      duration,
      timeout: 30,
      ...(requests ? { requests } : {}),
    }, (err, result) => {
      if (err) return reject(err)
      const sorted = latencies.subarray(0, n).sort()
      const pct = (q) => (n ? sorted[Math.min(n - 1, Math.floor(q * n))] : NaN)
      resolve({ result, p50: pct(0.5), p99: pct(0.99), repeated: pool.length > 1 && fresh === undefined ? Math.max(0, next - pool.length) : 0 })
    })
    instance.on('response', (client, statusCode, bytes, responseTime) => {
      if (statusCode < 200 || statusCode > 299) return
      if (n === latencies.length) { const grown = new Float64Array(n * 2); grown.set(latencies); latencies = grown }
      latencies[n++] = responseTime
    })
  })
}

// ------------------------------------------------------------------ main
const results = { settings: { ...s, pinned: PIN }, description: settings, cases: [] }
console.log('## HTTP bench')

for (const v of VARIANTS) {
  const server = await startServer(v)
  servers.set(v, server)
  log(`started ${v} (pid ${server.pid}, port ${server.port})`)
}

// Each receiver must accept a valid delivery (signed the way the load signs) and reject a tampered one.
const probe = makeBody(4)
const probeHeaders = signedHeaders(contentDigest(probe), keys.privateKey, { label: labelFor(1) })
for (const [v, { port }] of servers) {
  const valid = await post(port, probe, probeHeaders)
  const tampered = await post(port, tamper(probe), probeHeaders)
  if (valid < 200 || valid > 299 || tampered < 400 || tampered > 499) {
    throw new Error(`${v} failed the correctness check: valid delivery -> ${valid}, tampered body -> ${tampered}`)
  }
}
/** Messages the subscriber of the subscribed router row received so far. */
async function published () {
  const res = await fetch(`http://127.0.0.1:${servers.get(SUBSCRIBED).port}/published`)
  return res.json()
}
const probed = servers.has(SUBSCRIBED) ? await published() : null
if (probed !== null && (probed.accepted !== 1 || probed.messages !== 2)) throw new Error(`${SUBSCRIBED}: the subscriber did not see the probe deliveries (${JSON.stringify(probed)})`)

const summary = []
let failures = 0
for (const events of s.events) {
  const body = makeBody(events)
  const template = JSON.parse(body.toString())
  if (s.warmup > 0) {
    for (const [v, { pid, port }] of servers) {
      log(`warm-up: ${v}, ${events} events`)
      // As many connections as the timed runs, so that its rate sizes their pools.
      const { result } = await load(port, requestPool(template, poolSize(v, events, body.length, s.warmup)), Math.max(...s.connections), s.warmup)
      noteRate(v, events, result['2xx'] / result.duration, false)
      await settle(v, pid)
    }
  }
  for (const connections of s.connections) {
    const per = new Map(VARIANTS.map((v) => [v, { rps: [], p50: [], p99: [], cpuUs: [], cpuPct: [], genPct: [], failed: 0, repeated: 0, requests: 0, bodies: Infinity }]))
    for (let r = 0; r < s.reps; r++) {
      const k = r % VARIANTS.length
      for (const v of [...VARIANTS.slice(k), ...VARIANTS.slice(0, k)]) {
        const { pid, port } = servers.get(v)
        const pool = requestPool(template, poolSize(v, events, body.length, s.duration))
        const cpu0 = cpuSeconds(pid)
        const gen0 = process.cpuUsage()
        const { result, p50, p99, repeated } = await load(port, pool, connections, s.duration)
        const gen = process.cpuUsage(gen0)
        const cpu = cpuSeconds(pid) - cpu0
        await settle(v, pid)
        const ok = result['2xx']
        noteRate(v, events, ok / result.duration, true)
        const p = per.get(v)
        p.repeated += repeated
        p.requests += result.requests.total
        if (pool.bodies < pool.requests.length) p.bodies = Math.min(p.bodies, pool.bodies)
        p.rps.push(ok / result.duration)
        p.p50.push(p50)
        p.p99.push(p99)
        p.cpuUs.push((cpu / Math.max(ok, 1)) * 1e6)
        p.cpuPct.push((cpu / result.duration) * 100)
        p.genPct.push(((gen.user + gen.system) / 1e6 / result.duration) * 100)
        p.failed += result.non2xx + result.errors + result.timeouts
        log(`  ${events} events, ${connections} connections, rep ${r + 1}/${s.reps}: ${v.padEnd(18)} ${(ok / result.duration).toFixed(0).padStart(6)} req/s, p99 ${p99.toFixed(2)} ms`)
      }
    }

    const fastifyIdeal = per.get(FASTIFY_IDEAL).rps
    const expressIdeal = per.get(EXPRESS_IDEAL).rps
    const rows = []
    for (const v of VARIANTS) {
      const p = per.get(v)
      const st = stats(p.rps)
      const vsFastify = ratio(p.rps, fastifyIdeal)
      const vsExpress = v.startsWith('express') ? ratio(p.rps, expressIdeal) : null
      failures += p.failed
      rows.push([LABELS[v], fmtOps(st.median), `${fmtOps(st.min)}–${fmtOps(st.max)} (${st.spreadPct.toFixed(0)}%)`,
        median(p.p50).toFixed(2), median(p.p99).toFixed(2), median(p.cpuUs).toFixed(0), `${median(p.cpuPct).toFixed(0)}%`,
        `${median(p.genPct).toFixed(0)}%`, fmtRatio(vsFastify), v === EXPRESS_IDEAL ? '1.00×' : fmtRatio(vsExpress),
        [p.failed ? `${p.failed} failed requests` : '', p.repeated ? `${p.repeated.toLocaleString('en')} of ${p.requests.toLocaleString('en')} requests repeated a delivery of their run` : '', p.bodies !== Infinity ? `bodies reused (${p.bodies.toLocaleString('en')} per run) with other signatures` : ''].filter(Boolean).join('; ')])
      results.cases.push({ events, bytes: body.length, connections, variant: v, repeatedRequests: p.repeated, reqPerSec: st, p50Ms: p.p50, p99Ms: p.p99, serverCpuUsPerRequest: p.cpuUs, serverCpuPct: p.cpuPct, loadGeneratorCpuPct: p.genPct, vsFastifyIdeal: vsFastify, vsExpressIdeal: vsExpress, failedRequests: p.failed })
      summary.push({ key: `${events.toLocaleString('en')} events (${fmtBytes(body.length)}), ${connections} conns`, v, rps: st.median, vsFastify, vsExpress })
    }
    console.log(`\n### HTTP, ${events.toLocaleString('en')} events (${fmtBytes(body.length)} body), ${connections} connections\n\nSettings: ${settings}.\n`)
    console.log(mdTable(['receiver', 'req/s (median)', `range over ${s.reps} rep${s.reps === 1 ? '' : 's'} (spread)`, 'p50 ms', 'p99 ms', 'server CPU µs/req', 'server CPU', 'load-generator CPU', 'req/s ÷ ideal Fastify', 'req/s ÷ ideal Express', 'notes'], rows))
  }
}

const columns = [...new Set(summary.map((x) => x.key))]
const cell = (v, key, pick) => {
  const x = summary.find((y) => y.v === v && y.key === key)
  return x ? pick(x) : '—'
}
console.log(`\n### HTTP summary: throughput ÷ the ideal Fastify receiver (median of per-rep ratios, req/s in brackets)\n\nSettings: ${settings}.\n`)
console.log(mdTable(['receiver', ...columns], [
  ...VARIANTS.map((v) => [LABELS[v], ...columns.map((k) => cell(v, k, (x) => `${x.vsFastify.median.toFixed(2)}× (${fmtOps(x.rps)}/s)`))]),
  ...VARIANTS.filter((v) => v.startsWith('express-middleware')).map((v) => [`${LABELS[v]} ÷ ideal Express receiver`, ...columns.map((k) => cell(v, k, (x) => fmtRatio(x.vsExpress)))]),
]))
const seen = servers.has(SUBSCRIBED) ? await published() : null
if (seen) log(`${SUBSCRIBED}: its delivery-channel subscriber received ${seen.messages.toLocaleString('en')} messages (${seen.accepted.toLocaleString('en')} accepted)`)
if (failures > 0) console.log(`\n${failures} requests failed or got a non-2xx answer during the load runs (see the notes column): those runs do not measure verification alone.`)

if (process.env.BENCH_RESULTS_FILE) fs.writeFileSync(process.env.BENCH_RESULTS_FILE, JSON.stringify(results))
stopServers()
