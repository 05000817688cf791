// The default replay claim alone, per delivery, of two builds side by side in one process: the
// delivery id, the claim on a full MemoryReplayStore (100,000 deliveries: every claim evicts the
// oldest) and its completion, as the receiver runs them. A build with src/replay/delivery-claim.ts
// is run through it, as its receiver calls it: `claimDelivery`, then `ClaimSettlement.settle(200)`.
// An older build whose store offers `synchronousClaims` (src/replay/memory-store.ts) is run the
// way its receiver ran it (no promise); one without it through the store's promises, awaited as
// its receiver awaited them. `--store claim` gives a build that has one a `MemoryClaimStore`
// ({ max: --fill }) instead: the store one receiver and router can share.
// CPU time per delivery (process.cpuUsage), builds interleaved in blocks of 1,000 deliveries.
//
//   node bench/claim-path-bench.mjs --lib /tmp/old/dist,dist [--deliveries 50000] [--reps 9] [--store default|claim]
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'

const { values: args } = parseArgs({
  options: {
    lib: { type: 'string', default: 'dist' },
    deliveries: { type: 'string', default: '50000' },
    reps: { type: 'string', default: '9' },
    fill: { type: 'string', default: '100000' },
    store: { type: 'string', default: 'default' },
  },
})
const N = Number(args.deliveries)
const REPS = Number(args.reps)
const FILL = Number(args.fill)
const TTL = 361
const BLOCK = 1000
const libs = args.lib.split(',').map((d) => path.resolve(d))

// A real-shape signature base (~150 bytes) and distinct 64-byte signatures.
const base = Buffer.from(`"content-digest": sha-256=:${Buffer.alloc(32, 7).toString('base64')}:\n"@signature-params": ("content-digest");created=1700000000;alg="ed25519";keyid="k1"`)
const signatures = Array.from({ length: N }, (_, i) => { const s = Buffer.alloc(64, 3); s.writeUInt32BE(i, 0); s.writeUInt32BE(0xC0FFEE, 4); return s })

const builds = []
for (const lib of libs) {
  const url = (p) => pathToFileURL(path.join(lib, p)).href
  const entry = await import(url('index.js'))
  const { MemoryClaimStore } = entry
  const memory = await import(url('replay/memory-store.js'))
  // Internal since the entry lost its aliases; older builds exported them from the entry.
  const MemoryReplayStore = entry.MemoryReplayStore ?? memory.MemoryReplayStore
  const deliveryId = entry.deliveryId ?? (await import(url('replay/types.js'))).deliveryId
  const idOf = deliveryId.length === 2 ? (sig) => deliveryId(base, sig) : (sig) => deliveryId(sig)
  const receiverPath = await import(url('replay/delivery-claim.js')).catch(() => null)
  const claimStore = args.store === 'claim' && MemoryClaimStore !== undefined
  const makeStore = () => claimStore ? new MemoryClaimStore({ max: FILL }) : new MemoryReplayStore()
  const noLog = { debug () {}, info () {}, warn () {}, error (o) { throw new Error(JSON.stringify(o)) } }
  const fresh = () => {
    const store = makeStore()
    const filler = Buffer.alloc(64, 9)
    if (receiverPath !== null) {
      for (let i = 0; i < FILL; i++) { filler.writeUInt32BE(i); void receiverPath.claimDelivery(store, filler, TTL) }
    } else {
      for (let i = 0; i < FILL; i++) { filler.writeUInt32BE(i); void store.claim(idOf(filler), TTL) }
    }
    return store
  }
  const sync = receiverPath !== null || typeof memory.synchronousClaims === 'function'
  builds.push({
    name: path.basename(path.dirname(lib)) + (claimStore ? ' (MemoryClaimStore)' : ''),
    sync,
    fresh,
    async run (store, from, to) {
      if (receiverPath !== null) {
        const { claimDelivery, ClaimSettlement } = receiverPath
        for (let i = from; i < to; i++) {
          let outcome = claimDelivery(store, signatures[i], TTL)
          if (outcome instanceof Promise) outcome = await outcome
          if (!outcome.claimed) throw new Error('not new')
          new ClaimSettlement(store, outcome.id, TTL, noLog).settle(200)
        }
        return
      }
      if (sync) {
        const claims = memory.synchronousClaims(store)
        for (let i = from; i < to; i++) {
          const id = idOf(signatures[i])
          if (claims.claim(id, TTL) !== 'claimed') throw new Error('not new')
          claims.complete(id, TTL)
        }
      } else {
        for (let i = from; i < to; i++) {
          const id = idOf(signatures[i])
          if (await store.claim(id, TTL) !== 'claimed') throw new Error('not new')
          // The receiver settled without awaiting, logging a failure.
          store.complete(id, TTL).catch(() => {})
        }
      }
    },
  })
}

const cpu = () => { const u = process.cpuUsage(); return u.user + u.system }
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 }
async function repetition (r) {
  const stores = builds.map((b) => b.fresh())
  const used = builds.map(() => 0)
  for (let from = 0, k = 0; from < N; from += BLOCK, k++) {
    for (let j = 0; j < builds.length; j++) {
      const b = (j + k + r) % builds.length
      const t0 = cpu()
      await builds[b].run(stores[b], from, Math.min(N, from + BLOCK))
      used[b] += cpu() - t0
    }
  }
  return used.map((us) => us / N)
}
await repetition(0)
const results = builds.map(() => [])
for (let r = 0; r < REPS; r++) {
  const us = await repetition(r)
  us.forEach((x, b) => results[b].push(x))
  process.stderr.write(`  rep ${r + 1}/${REPS}\n`)
}
const os = await import('node:os')
console.log(`Settings: ${N} distinct deliveries per repetition into a MemoryReplayStore holding ${FILL}, builds interleaved in blocks of ${BLOCK}, ${REPS} reps, CPU time (process.cpuUsage), Node ${process.version}, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`)
console.log('')
console.log('| build | path | µs CPU / delivery (median) | min–max |')
console.log('|---|---|---|---|')
builds.forEach((b, i) => console.log(`| ${b.name} | ${b.sync ? 'claim + settle, synchronous' : 'id + awaited claim + complete (promises)'} | ${median(results[i]).toFixed(2)} | ${Math.min(...results[i]).toFixed(2)}–${Math.max(...results[i]).toFixed(2)} |`))
if (builds.length === 2) {
  const rs = results[0].map((x, i) => x / results[1][i])
  console.log('')
  console.log(`${builds[0].name} ÷ ${builds[1].name} (per rep, median): ${median(rs).toFixed(2)} (${Math.min(...rs).toFixed(2)}–${Math.max(...rs).toFixed(2)})`)
}
