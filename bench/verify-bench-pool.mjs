// CPU per delivery of the two verify paths, sync (event loop) and pool (libuv thread pool), in
// process, on the sources (no build):
//   CONC=1 node --import tsx --conditions=mcwh-source bench/verify-bench-pool.mjs [sync] [pool]
//   CONC=64 node --import tsx --conditions=mcwh-source bench/verify-bench-pool.mjs
// CONC deliveries in flight (1: each pool job finds the pool asleep, as under light load; 64: the
// pool stays busy), EVENTS per delivery (4), N per sample (8000), 5 samples alternating the modes.
// Prints req/s, the main thread's CPU per delivery (/proc/self/task/<pid>/schedstat, Linux) and
// the whole process's (main thread + pool + GC). Nothing is cached between deliveries.
import { performance } from 'node:perf_hooks'
import fs from 'node:fs'
const mainNs = () => Number(fs.readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[0])
const cpuUs = () => { const c = process.cpuUsage(); return c.user + c.system }
import { makeBody, makeKeyPair, contentDigest, signedHeaders, CUSTOMER_HANDLE } from './lib/fixtures.mjs'
const src = process.env.SRC ?? new URL('../src', import.meta.url).href
const { resolveVerifyConfig } = await import(src + '/verify/options.ts')
const { verifyDelivery } = await import(src + '/verify/verify-webhook.ts')
const events = Number(process.env.EVENTS ?? 4)
const body = makeBody(events)
const { privateKey, spkiB64 } = makeKeyPair()
const digest = contentDigest(body)
const variants = Array.from({ length: 2000 }, (_, i) => signedHeaders(digest, privateKey, { label: 'sig_' + (1000000 + i) }))
const config = resolveVerifyConfig({ publicKey: spkiB64, customerHandles: [CUSTOMER_HANDLE] })
async function run (mode, n, conc) {
  let i = 0
  const elu0 = performance.eventLoopUtilization(); const m0 = mainNs(); const c0 = cpuUs()
  const t0 = performance.now()
  async function worker () {
    while (i < n) {
      const h = variants[i++ % variants.length]
      const r = verifyDelivery(config, body, h, Date.now(), mode === 'pool')
      const d = r instanceof Promise ? await r : await Promise.resolve(r) // one hop either way, as an adapter
      if (d.events.length !== events) throw new Error('bad')
    }
  }
  await Promise.all(Array.from({ length: conc }, worker))
  const ms = performance.now() - t0
  const elu = performance.eventLoopUtilization(elu0)
  return { rps: n / ms * 1000, busyUs: (mainNs() - m0) / 1000 / n, totalUs: (cpuUs() - c0) / n }
}
const modes = process.argv.slice(2).length ? process.argv.slice(2) : ['sync', 'pool']
for (let w = 0; w < 2; w++) for (const m of modes) await run(m, 3000, Number(process.env.CONC ?? 64))
const res = Object.fromEntries(modes.map(m => [m, []]))
for (let rep = 0; rep < 5; rep++) for (const m of (rep % 2 ? modes.slice().reverse() : modes)) res[m].push(await run(m, Number(process.env.N ?? 8000), Number(process.env.CONC ?? 64)))
const med = a => a.slice().sort((x, y) => x - y)[a.length >> 1]
for (const m of modes) console.log(m, 'req/s', med(res[m].map(r => r.rps)).toFixed(0), 'main-thread CPU µs/req', med(res[m].map(r => r.busyUs)).toFixed(1), res[m].map(r => r.busyUs.toFixed(1)).join(' '), 'process CPU µs/req', med(res[m].map(r => r.totalUs)).toFixed(1))
