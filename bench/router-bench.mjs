// The event router's own cost per delivery, in process, paired: a 1,000-event delivery (the
// service's largest batch) dispatched by a WebhookEventRouter with one empty handler per event
// type, with a MemoryClaimStore and without a store, next to the parts it is made of (the
// fingerprints alone; the store's claim and done mark alone; `parts`: those parts assembled by
// hand, the fingerprints, one claim, the handler loop and one done mark). Each case is timed in CPU time
// (process.cpuUsage) over deliveries whose events are all new (own seed in every event's
// `reason`, built before the sample, outside the timed region), round-robin within one process,
// so the shared machine's drift hits every case alike. Figures are medians over the repetitions;
// the last column is the main thread's garbage-collection pauses within the samples.
// `--cases router-signal`: the memory-store router with handlers that read `context.signal`.
// `--cases text,hash` split the fingerprints: their canonical texts alone (flattened, as the
// hash reads them), and the SHA-256 calls alone on those texts built beforehand.
//
//   node node_modules/typescript/bin/tsc -p tsconfig.build.json   # dist/ (emits without clearing)
//   node bench/router-bench.mjs                                    # 1,000 events, ~1 min
//   node bench/router-bench.mjs --lib dist,/tmp/old/dist           # two builds side by side (before / after)
//   node bench/router-bench.mjs --events 4 --deliveries 2000 --reps 9
//   node bench/router-bench.mjs --prefill 1000000                 # stores as full as a long-running receiver's
//   node bench/router-bench.mjs --cases text,hash,fingerprints     # where a fingerprint's time goes
//
// `--lib` takes built trees (each a dist/ folder whose parent has the package.json, for the
// #crypto import); cases are named after the folder.
import crypto from 'node:crypto'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { PerformanceObserver } from 'node:perf_hooks'
import { buildsBenchArgs } from './lib/args.mjs'
import { makeBody } from './lib/fixtures.mjs'

const { args, events: EVENTS, deliveries: N, reps: REPS, libs, cases: wanted } = buildsBenchArgs(
  'node bench/router-bench.mjs [--lib dist[,other/dist]] [--events 1000] [--deliveries 60] [--reps 7] [--prefill 0] [--cases fingerprints,store,parts,router-nostore,router-memory (also: text,hash,router-signal)]',
  { events: '1000', deliveries: '60', cases: 'fingerprints,store,parts,router-nostore,router-memory' },
  { prefill: { type: 'string', default: '0' } },
)
// Fingerprints written into each memory store before timing: a store filled as a long-running
// receiver's is (1,000,000, the default max, is a full one). They look as real ones do (SHA-256,
// 43 characters of base64url), so a store that reads fingerprints as such is measured full.
const PREFILL = Number(args.prefill)
async function filled (store) {
  const fps = Array.from({ length: 10_000 }, (_, i) => i)
  for (let n = 0; n < PREFILL; n += fps.length) {
    const batch = fps.map((i) => crypto.hash('sha256', `prefill-${n + i}`, 'base64url'))
    await store.complete(await store.claim(batch, 30))
  }
  return store
}

const template = JSON.parse(makeBody(EVENTS).toString())
let seedCount = 0
/** `N` deliveries of typed events, every event new (a seed in its `reason`; the size does not change). */
function deliveries (toEvent) {
  return Array.from({ length: N }, () => {
    const seed = `${(seedCount++).toString(36)}.`
    return template.map((e, i) => toEvent({ ...e, reason: seed + e.reason.slice(seed.length) }, i))
  })
}

const cases = []
const sink = []
for (const lib of libs) {
  const name = path.basename(path.dirname(lib)) + '/' + path.basename(lib)
  // `eventFingerprints` (the batch the router computes) is read from its module: the package's
  // entry no longer exports it (`events.map(eventFingerprint)` is the public way).
  const fingerprint = await import(pathToFileURL(path.join(lib, 'replay', 'fingerprint.js')).href)
  const m = { ...await import(pathToFileURL(path.join(lib, 'index.js')).href), eventFingerprints: fingerprint.eventFingerprints }
  const { toEvent } = await import(pathToFileURL(path.join(lib, 'events', 'parse-events.js')).href)
  const { canonicalEventText } = fingerprint
  const types = [...m.WEBHOOK_EVENT_TYPES, 'unknown']
  const withHandlers = (router, handler = () => {}) => { for (const type of types) router.on(type, handler); return router }
  const log = { debug () {}, info () {}, warn () {}, error () {} }
  const all = {
    fingerprints: async (ds) => { for (const events of ds) m.eventFingerprints(events) },
    // charCodeAt flattens the text, as the hash call would.
    text: async (ds) => { for (const events of ds) for (let i = 0; i < events.length; i++) sink[i] = canonicalEventText(events[i]).charCodeAt(0) },
    hash: async (ds) => { for (const texts of ds) for (let i = 0; i < texts.length; i++) sink[i] = crypto.hash('sha256', texts[i], 'base64url') },
    store: async (ds, store) => {
      // What the router asks of the store for a delivery: one claim, one done mark, from precomputed fingerprints.
      for (const fps of ds) {
        const claims = await store.claim(fps, 30)
        await store.complete(claims)
      }
    },
    // The router's parts assembled by hand (what the router adds is the rest): the delivery's
    // fingerprints, one claim, the handler loop, one done mark, the counts.
    parts: async (ds, { store, handlers }) => {
      for (const events of ds) {
        const claims = await store.claim(m.eventFingerprints(events), 30)
        const done = []
        for (let i = 0; i < events.length; i++) {
          const claim = claims[i]
          if (typeof claim !== 'object') continue
          const result = handlers[events[i].event](events[i])
          if (result !== undefined && typeof result.then === 'function') await result
          done.push(claim)
        }
        await store.complete(done)
        if (done.length !== events.length) throw new Error(`handled ${done.length}`)
      }
    },
    'router-nostore': async (ds, router) => { for (const events of ds) { const r = await router.dispatch(events, { keyId: 'k1', log }); if (!r.ok) throw new Error('not ok') } },
    'router-memory': async (ds, router) => { for (const events of ds) { const r = await router.dispatch(events, { keyId: 'k1', log }); if (r.handled !== events.length) throw new Error(`handled ${r.handled}`) } },
    // The same with handlers that read `context.signal` (a dispatch of few events makes it only then).
    'router-signal': async (ds, router) => { for (const events of ds) { const r = await router.dispatch(events, { keyId: 'k1', log }); if (r.handled !== events.length) throw new Error(`handled ${r.handled}`) } },
  }
  for (const c of wanted) {
    if (!(c in all)) throw new Error(`unknown case ${c}`)
    const state = c === 'store'
      ? await filled(new (m.MemoryClaimStore ?? m.MemorySeenEventsStore)())
      : c === 'parts' ? { store: await filled(new (m.MemoryClaimStore ?? m.MemorySeenEventsStore)()), handlers: Object.fromEntries(types.map((type) => [type, () => {}])) }
      : c === 'router-nostore' ? withHandlers(new m.WebhookEventRouter()) : c === 'router-memory' ? withHandlers(new m.WebhookEventRouter({ seenEvents: await filled(new (m.MemoryClaimStore ?? m.MemorySeenEventsStore)()) }))
      : c === 'router-signal' ? withHandlers(new m.WebhookEventRouter({ seenEvents: await filled(new (m.MemoryClaimStore ?? m.MemorySeenEventsStore)()) }), (_e, { signal }) => { if (signal.aborted) throw new Error('aborted') }) : null
    const prepare = c === 'store'
      ? () => deliveries(toEvent).map((events) => m.eventFingerprints(events))
      : c === 'hash' ? () => deliveries(toEvent).map((events) => events.map((e) => { const t = canonicalEventText(e); t.charCodeAt(0); return t })) : () => deliveries(toEvent)
    cases.push({ name: `${name} ${c}`, run: all[c], state, prepare })
  }
}

// Garbage-collection pauses (main thread, as PerformanceObserver reports them) within each sample.
// Entries arrive some time after their pause: each is counted in the sample its start falls in.
const gcPauses = []
new PerformanceObserver((list) => { for (const e of list.getEntries()) gcPauses.push(e) }).observe({ entryTypes: ['gc'] })
const settle = async () => { await new Promise((resolve) => setTimeout(resolve, 20)) }
const gcWithin = (from, to) => gcPauses.reduce((sum, e) => e.startTime >= from && e.startTime < to ? sum + e.duration : sum, 0)
const gcSamples = new Map()
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const k = s.length >> 1; return s.length % 2 ? s[k] : (s[k - 1] + s[k]) / 2 }
const samples = new Map(cases.map((c) => [c.name, []]))
async function sample (c) {
  const ds = c.prepare()
  globalThis.gc?.()
  const from = performance.now()
  const t0 = process.cpuUsage()
  await c.run(ds, c.state)
  const t = process.cpuUsage(t0)
  const to = performance.now()
  await settle()
  if (!gcSamples.has(c.name)) gcSamples.set(c.name, [])
  gcSamples.get(c.name).push(gcWithin(from, to) * 1000 / N)
  return (t.user + t.system) / N
}
for (const c of cases) await sample(c) // warm-up: JIT, lazy initialisation
for (let r = 0; r < REPS; r++) {
  const k = r % cases.length
  for (const c of [...cases.slice(k), ...cases.slice(0, k)]) samples.get(c.name).push(await sample(c))
  process.stderr.write(`  rep ${r + 1}/${REPS} done\n`)
}
console.log(`\n${EVENTS.toLocaleString('en')} events per delivery, ${N} deliveries per sample, ${REPS} reps, memory stores prefilled with ${PREFILL.toLocaleString('en')} fingerprints, CPU µs per delivery (median, min–max); Node ${process.version}${globalThis.gc ? ', gc before each sample' : ''}\n`)
console.log('| case | CPU µs / delivery | range | µs / event | GC pauses µs / delivery |')
console.log('|---|---|---|---|---|')
for (const [name, xs] of samples) {
  // The warm-up sample is the first of gcSamples: left out, as from the CPU figures.
  const gcs = gcSamples.get(name).slice(1)
  console.log(`| ${name} | ${median(xs).toFixed(0)} | ${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)} | ${(median(xs) / EVENTS).toFixed(2)} | ${median(gcs).toFixed(0)} |`)
}
