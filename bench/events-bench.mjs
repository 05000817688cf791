// Typed events and event fingerprints, in process: the library build against JSON.parse alone,
// and against another build of the library (a baseline, e.g. the previous commit built into a
// temporary folder), paired and alternated in one process (this machine's speed drifts between
// processes, so only ratios from the same process are compared).
//
//   node --expose-gc bench/events-bench.mjs [--baseline <dir>] [--candidate <dir>] [--events 10000]
//     [--fingerprint-events 1000] [--rounds 30] [--time 300] [--shape fixture|sample]
//
// <dir> is a build's dist folder (default candidate: ./dist). To build a baseline:
//   mkdir /tmp/base && git archive <commit> src package.json tsconfig.json tsconfig.build.json | tar -x -C /tmp/base
//   ln -s "$PWD/node_modules" /tmp/base/node_modules && (cd /tmp/base && node node_modules/typescript/bin/tsc -p tsconfig.build.json)
// then --baseline /tmp/base/dist.
import path from 'node:path'
import { parseArgs } from 'node:util'
import { pathToFileURL } from 'node:url'
import { CUSTOMER_HANDLE, contentDigest, makeBody, makeKeyPair, signedHeaders } from './lib/fixtures.mjs'
import { createIdealVerifier } from './lib/ideal.mjs'

const { values: o } = parseArgs({
  options: {
    baseline: { type: 'string' },
    candidate: { type: 'string', default: new URL('../dist', import.meta.url).pathname },
    events: { type: 'string', default: '10000' },
    'fingerprint-events': { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '30' },
    time: { type: 'string', default: '300' },
    shape: { type: 'string', default: 'fixture' },
  },
})
const rounds = Number(o.rounds)
const timeMs = Number(o.time)
const gc = globalThis.gc ?? (() => {})

async function load (dir) {
  const url = (p) => pathToFileURL(path.resolve(dir, p)).href
  const parse = await import(url('events/parse-events.js'))
  const fp = await import(url('replay/fingerprint.js'))
  const lib = await import(url('index.js'))
  // A build from before verifyWebhook replaced the one-method class Webhooks has only the latter.
  const verifyWebhook = lib.verifyWebhook ?? ((options) => lib.Webhooks.verify(options))
  return { parseEvents: parse.parseEvents, eventFingerprint: fp.eventFingerprint, eventFingerprints: fp.eventFingerprints, verifyWebhook }
}

const candidate = await load(o.candidate)
const baseline = o.baseline === undefined ? null : await load(o.baseline)

/** A body of n events: the benches' ~250-byte fixture (status and reason on every type), or the sandbox's documented shapes. */
async function body (n) {
  if (o.shape === 'fixture') return makeBody(n)
  const { sampleEvents } = await import(pathToFileURL(path.resolve(o.candidate, 'testing/sandbox/sample-events.js')).href)
  return Buffer.from(JSON.stringify(sampleEvents(n, { customerHandle: 'cust_8f3a2b', timestamp: 1700000000 })))
}

/**
 * Runs `fn` for about timeMs of wall time; returns the process's CPU ms per call (user + system,
 * GC threads included). CPU time, not wall time: with other processes on the machine, wall time
 * counts the time this one waited for a core.
 */
function sample (fn) {
  gc()
  fn()
  let calls = 0
  const start = process.hrtime.bigint()
  const cpu = process.cpuUsage()
  do {
    fn()
    calls++
  } while (Number(process.hrtime.bigint() - start) / 1e6 < timeMs)
  const used = process.cpuUsage(cpu)
  return (used.user + used.system) / 1000 / calls
}

/** Every case once per round, the order reversed on odd rounds; returns ms per call per round, by case. */
function runPaired (cases) {
  const out = Object.fromEntries(cases.map((c) => [c.name, []]))
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? cases : [...cases].reverse()
    for (const c of order) out[c.name].push(sample(c.fn))
  }
  return out
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2 }
const quart = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * q))]
/** Median and quartiles of the per-round ratios a/b. */
function ratio (a, b) {
  const r = a.map((x, i) => x / b[i])
  return `${median(r).toFixed(3)}× (q1–q3 ${quart(r, 0.25).toFixed(3)}–${quart(r, 0.75).toFixed(3)})`
}

console.log(`events bench: ${rounds} rounds × ${timeMs} ms per case, alternated; shape ${o.shape}; Node ${process.version}; candidate ${o.candidate}${baseline ? `, baseline ${o.baseline}` : ''}`)

// 1. Typed events against JSON.parse of the same body (as the ideal receiver parses it).
{
  const n = Number(o.events)
  const b = await body(n)
  const cases = [
    { name: 'JSON.parse', fn: () => JSON.parse(b.toString('utf8')) },
    { name: 'candidate parseEvents', fn: () => candidate.parseEvents(b, n, null) },
  ]
  if (baseline) cases.push({ name: 'baseline parseEvents', fn: () => baseline.parseEvents(b, n, null) })
  const res = runPaired(cases)
  console.log(`\n${n} events (${b.length} B): JSON.parse ${median(res['JSON.parse']).toFixed(2)} CPU ms per body (median)`)
  console.log(`  candidate parseEvents ÷ JSON.parse: ${ratio(res['candidate parseEvents'], res['JSON.parse'])}`)
  if (baseline) {
    console.log(`  baseline parseEvents ÷ JSON.parse:  ${ratio(res['baseline parseEvents'], res['JSON.parse'])}`)
    console.log(`  candidate ÷ baseline:               ${ratio(res['candidate parseEvents'], res['baseline parseEvents'])}`)
  }
}

// 2. Fingerprints of one delivery's events (what the router computes per delivery).
{
  const n = Number(o['fingerprint-events'])
  const b = await body(n)
  const cEvents = candidate.parseEvents(b, n, null)
  const cases = [
    { name: 'candidate eventFingerprints', fn: () => candidate.eventFingerprints(cEvents) },
    { name: 'candidate map(eventFingerprint)', fn: () => cEvents.map(candidate.eventFingerprint) },
  ]
  if (baseline) {
    const bEvents = baseline.parseEvents(b, n, null)
    cases.push({ name: 'baseline map(eventFingerprint)', fn: () => bEvents.map(baseline.eventFingerprint) })
  }
  const res = runPaired(cases)
  const us = (name) => `${(median(res[name]) * 1000 / n).toFixed(3)} CPU µs per event`
  console.log(`\nfingerprints of a ${n}-event delivery:`)
  for (const c of cases) console.log(`  ${c.name}: ${us(c.name)}`)
  if (baseline) {
    console.log(`  candidate eventFingerprints ÷ baseline: ${ratio(res['candidate eventFingerprints'], res['baseline map(eventFingerprint)'])}`)
    console.log(`  candidate map(eventFingerprint) ÷ baseline: ${ratio(res['candidate map(eventFingerprint)'], res['baseline map(eventFingerprint)'])}`)
  }
}

// 3. verifyWebhook as a user calls it against the ideal receiver with JSON.parse (bench/lib/ideal.mjs),
// on one signed delivery of --events events (the verify bench's 10,000-event row, in CPU time).
{
  const n = Number(o.events)
  const b = await body(n)
  const keys = makeKeyPair()
  const ideal = createIdealVerifier({ k1: keys.spkiB64 })
  const digest = contentDigest(b)
  let headers = signedHeaders(digest, keys.privateKey)
  const verify = (lib) => async () => {
    const r = await lib.verifyWebhook({ payload: b, headers, publicKey: keys.spkiB64, customerHandles: [CUSTOMER_HANDLE], maxEvents: n })
    if (r.error !== null) throw new Error(`verify refused the delivery: ${r.error.type}`)
  }
  const cases = [
    { name: 'ideal + JSON.parse', fn: () => { if (ideal.verifyAndParse(b, headers) === null) throw new Error('ideal refused') } },
    { name: 'candidate verifyWebhook', fn: verify(candidate) },
  ]
  if (baseline) cases.push({ name: 'baseline verifyWebhook', fn: verify(baseline) })
  // Async cases: awaited one at a time, in CPU time; headers re-signed before each sample.
  const res = Object.fromEntries(cases.map((c) => [c.name, []]))
  for (let r = 0; r < rounds; r++) {
    for (const c of r % 2 === 0 ? cases : [...cases].reverse()) {
      headers = signedHeaders(digest, keys.privateKey)
      gc()
      await c.fn()
      let calls = 0
      const start = process.hrtime.bigint()
      const cpu = process.cpuUsage()
      do { await c.fn(); calls++ } while (Number(process.hrtime.bigint() - start) / 1e6 < timeMs)
      const used = process.cpuUsage(cpu)
      res[c.name].push((used.user + used.system) / 1000 / calls)
    }
  }
  console.log(`\nverifyWebhook, ${n} events (${b.length} B): ideal + JSON.parse ${median(res['ideal + JSON.parse']).toFixed(2)} CPU ms per delivery (median)`)
  console.log(`  candidate ÷ ideal + JSON.parse: ${ratio(res['candidate verifyWebhook'], res['ideal + JSON.parse'])}`)
  if (baseline) {
    console.log(`  baseline ÷ ideal + JSON.parse:  ${ratio(res['baseline verifyWebhook'], res['ideal + JSON.parse'])}`)
    console.log(`  candidate ÷ baseline:           ${ratio(res['candidate verifyWebhook'], res['baseline verifyWebhook'])}`)
  }
}
