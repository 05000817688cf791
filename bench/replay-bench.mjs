// Replay-store benchmark. Plain Node ESM over the built library: run
// `npx tsc -p tsconfig.build.json` (or `npm run build`) first, then
// `node --expose-gc bench/replay-bench.mjs` (--expose-gc is optional; it settles the heap figures).
//
// 1. Bound: MemoryReplayStore({ max: 100_000 }) takes 1,000,000 distinct deliveries
//    (claim + complete); its size must stay at the cap. Prints size and RSS along the way.
// 2. Overhead per delivery, in µs (median of several round-robin reps): nothing, deliveryId
//    only, deliveryId + claim + complete on the memory store, and on Redis (a local
//    redis-server started here; skipped with a message when redis-server is not installed).
//    Redis is timed one delivery at a time (latency) and with 32 in flight (throughput).
// Whole run: well under a minute on a 2-core machine.
import { spawn, spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import net from 'node:net'
import { once } from 'node:events'
// Internal classes (the receivers' per-delivery stores), no longer exported from the entry.
import { MemoryReplayStore } from '../dist/replay/memory-store.js'
import { RedisReplayStore } from '../dist/replay/redis-store.js'
import { deliveryId } from '../dist/replay/types.js'

const TTL = 360 // maxAge 300 + clockSkew 60
// A 64-byte signature; a counter written into it makes every delivery distinct without
// building new buffers.
const SIG = crypto.randomBytes(64)
const idFor = (n) => { SIG.writeUInt32BE(n >>> 0, 0); SIG.writeUInt32BE(Math.floor(n / 2 ** 32), 4); return deliveryId(SIG) }
const mb = (bytes) => `${(bytes / 1048576).toFixed(0)} MB`

async function boundTest () {
  const CAP = 100_000
  const TOTAL = 1_000_000
  const store = new MemoryReplayStore({ max: CAP })
  console.log(`1) MemoryReplayStore({ max: ${CAP.toLocaleString('en')} }): ${TOTAL.toLocaleString('en')} distinct deliveries (claim + complete)`)
  globalThis.gc?.()
  console.log(`   start          size ${String(store.size).padStart(7)}   rss ${mb(process.memoryUsage().rss)}   heap used ${mb(process.memoryUsage().heapUsed)}`)
  const started = process.hrtime.bigint()
  let maxSize = 0
  for (let i = 1; i <= TOTAL; i++) {
    const id = idFor(i)
    if (await store.claim(id, TTL) !== 'claimed') throw new Error(`delivery ${i} was not new`)
    await store.complete(id, TTL)
    if (store.size > maxSize) maxSize = store.size
    if (i === 250_000 || i === 500_000 || i === TOTAL) {
      globalThis.gc?.()
      const mem = process.memoryUsage()
      console.log(`   ${i.toLocaleString('en').padStart(9)}      size ${String(store.size).padStart(7)}   rss ${mb(mem.rss)}   heap used ${mb(mem.heapUsed)}${globalThis.gc ? '' : ' (run with --expose-gc for a settled heap)'}`)
    }
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  console.log(`   largest size seen: ${maxSize.toLocaleString('en')} (cap ${CAP.toLocaleString('en')}) -> ${maxSize <= CAP ? 'OK, stays at its cap' : 'FAIL, over the cap'}; ${seconds.toFixed(1)} s`)
  if (maxSize > CAP) process.exitCode = 1
}

async function freePort () {
  const server = net.createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address()
  server.close()
  await once(server, 'close')
  return port
}

async function startRedis () {
  if (spawnSync('redis-server', ['--version']).status !== 0) return null
  const port = await freePort()
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  const { Redis } = await import('ioredis')
  const client = new Redis({ host: '127.0.0.1', port, enableOfflineQueue: true, commandTimeout: 1000, maxRetriesPerRequest: 1, retryStrategy: () => 50 })
  client.on('error', () => {})
  await client.ping()
  return { client, stop: () => { client.disconnect(); child.kill('SIGKILL') } }
}

/** µs per delivery for `fn(i)` run `n` times, `inFlight` at a time. */
async function timeIt (fn, n, inFlight = 1) {
  const started = process.hrtime.bigint()
  if (inFlight === 1) {
    for (let i = 0; i < n; i++) await fn(i)
  } else {
    let next = 0
    const worker = async () => { while (next < n) await fn(next++) }
    await Promise.all(Array.from({ length: inFlight }, worker))
  }
  return Number(process.hrtime.bigint() - started) / 1e3 / n
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }

async function overheadTest () {
  const REPS = 7
  let counter = 10_000_000 // distinct from the bound test and between rows
  const memory = new MemoryReplayStore() // default cap 100,000
  const redis = await startRedis()
  const rows = [
    { name: 'no store (nothing)', n: 20_000, fn: async () => {} },
    { name: 'no store (deliveryId only)', n: 20_000, fn: async () => { idFor(counter++) } },
    {
      name: 'MemoryReplayStore', n: 20_000, fn: async () => {
        const id = idFor(counter++)
        await memory.claim(id, TTL)
        await memory.complete(id, TTL)
      },
    },
  ]
  if (redis !== null) {
    const store = new RedisReplayStore(redis.client)
    const fn = async () => {
      const id = idFor(counter++)
      if (await store.claim(id, TTL) !== 'claimed') throw new Error('not new')
      await store.complete(id, TTL)
    }
    rows.push({ name: 'RedisReplayStore (1 at a time)', n: 2_000, fn })
    rows.push({ name: 'RedisReplayStore (32 in flight)', n: 10_000, fn, inFlight: 32 })
  }
  console.log(`\n2) Per-delivery overhead of the replay check, µs (median of ${REPS} round-robin reps)`)
  // Warm-up, then round-robin so drift hits every row alike.
  for (const row of rows) await timeIt(row.fn, Math.min(row.n, 1000), row.inFlight)
  const samples = rows.map(() => [])
  for (let rep = 0; rep < REPS; rep++) {
    for (let r = 0; r < rows.length; r++) samples[r].push(await timeIt(rows[r].fn, rows[r].n, rows[r].inFlight))
  }
  const base = median(samples[0])
  const idOnly = median(samples[1])
  for (let r = 0; r < rows.length; r++) {
    const m = median(samples[r])
    const extra = r === 0 ? '' : r === 1 ? `   (+${(m - base).toFixed(2)} over nothing)` : `   (+${(m - base).toFixed(2)} over nothing; store calls ${(m - idOnly).toFixed(2)})`
    console.log(`   ${rows[r].name.padEnd(34)} ${m.toFixed(2).padStart(8)} µs/delivery${extra}`)
  }
  if (redis === null) console.log('   RedisReplayStore: skipped, redis-server is not installed (apt-get install -y redis-server)')
  else redis.stop()
}

console.log(`Replay-store benchmark, Node ${process.version}, ${process.platform}/${process.arch}\n`)
await boundTest()
await overheadTest()
