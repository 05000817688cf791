// Seen-events claim benchmark: claims per second on one Redis and on a Redis Cluster, and what
// a master crash costs. Plain Node ESM over the built library: `npm run build`, then
//   node bench/claims-bench.mjs                       # local redis-server (+ a replica) and a local cluster
//   node bench/claims-bench.mjs --redis-url redis://host:6379 --cluster host:7000
//   node bench/claims-bench.mjs --failover --trials 5 # acknowledged claims lost when a master is SIGKILLed
//   node bench/claims-bench.mjs --help
//
// Throughput: deliveries of 1, 100 and 1,000 events, `--concurrency` deliveries in flight, each
// sample `--time` ms, median of `--reps` round-robin samples. Rows: the first version's layout
// (one multi-key Lua script per delivery: `add`, one Redis only; a cluster refuses it with
// CROSSSLOT), then this version (on one Redis one multi-key script per call too, on a cluster one
// key per command): `add`, `claim`, `claim` + `complete` (what a handled event costs), and the
// same with `waitForReplicas: 1`.
//
// Failover (`--failover`, local cluster only): 100-event deliveries (`claim` then `complete`)
// from `--concurrency` loops; after a second, one master is killed with SIGKILL; the traffic goes
// on until a replica took over. Then every acknowledged claim and done mark on that master's
// slots is read back: lost ones are counted. Two ways to die: while replicating normally, and
// `--blip` ms after its replication link went down while clients could still reach it (a
// partition: the master's replica is dropped and kept out with a password clients do not need). Without and with `waitForReplicas: 1`, `--trials`
// times each (the killed node is restarted and rejoins as a replica between trials).
// Local servers are started on free loopback ports in temp dirs and killed by PID at the end.
import { spawn, spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { Cluster, Redis } from 'ioredis'
import { RedisClaimStore, ReplayStoreError } from '../dist/index.js'
// Internals of the build, to replay the first version's add with the same guard and script runner.
import { LuaScript, assertConnected, guarded } from '../dist/replay/redis-client.js'

const { values: opts } = parseArgs({
  options: {
    'redis-url': { type: 'string' },
    cluster: { type: 'string' },
    sizes: { type: 'string', default: '1,100,1000' },
    time: { type: 'string', default: '1000' },
    reps: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '8' },
    failover: { type: 'boolean', default: false },
    trials: { type: 'string', default: '3' },
    'failover-events': { type: 'string', default: '100' },
    blip: { type: 'string', default: '100' },
    help: { type: 'boolean', default: false },
  },
})
if (opts.help) {
  console.log(`node bench/claims-bench.mjs [options]   (after npm run build)
  --redis-url URL     one Redis to use (default: a local redis-server and a replica started here)
  --cluster HOST:PORT a node of a Redis Cluster to use (default: a local 3 masters + 3 replicas cluster)
  --sizes 1,100,1000  events per delivery
  --time 1000         ms per sample            --reps 3   samples per row (median)
  --concurrency 8     deliveries in flight
  --failover          measure acknowledged claims lost when a master is SIGKILLed (local cluster only)
  --trials 3          failovers per setting (without and with waitForReplicas: 1)
  --failover-events 100  events per delivery in the failover traffic
  --blip 100          ms between cutting the replica off and the kill, in the second kind of trial`)
  process.exit(0)
}
const SIZES = opts.sizes.split(',').map(Number)
const TIME = Number(opts.time)
const REPS = Number(opts.reps)
const CONCURRENCY = Number(opts.concurrency)
const TRIALS = Number(opts.trials)
const FAILOVER_EVENTS = Number(opts['failover-events'])
const BLIP_MS = Number(opts.blip)
const HOST = '127.0.0.1'
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const log = (...args) => console.error(...args)

// ---- local servers -------------------------------------------------------------------------
const processes = []
const dirs = []
const connections = []
function cleanup () {
  for (const c of connections.splice(0)) c.disconnect()
  for (const p of processes.splice(0)) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL')
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
}
process.on('exit', cleanup)
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(130))

async function freePort () {
  const server = net.createServer()
  server.listen(0, HOST)
  await once(server, 'listening')
  const { port } = server.address()
  server.close()
  await once(server, 'close')
  return port
}

function redisServer (port, dir, extra = []) {
  const child = spawn('redis-server', ['--port', String(port), '--bind', HOST, '--dir', dir, '--save', '', '--appendonly', 'no',
    '--maxmemory-policy', 'noeviction', '--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0', ...extra], { stdio: 'ignore' })
  processes.push(child)
  return child
}

function admin (port) {
  const c = new Redis({ host: HOST, port, maxRetriesPerRequest: 1, connectTimeout: 500, commandTimeout: 2000, retryStrategy: () => 100 })
  c.on('error', () => {})
  connections.push(c)
  return c
}

async function until (check, ms, what) {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return
    await sleep(50)
  }
  throw new Error(`timed out waiting for ${what}`)
}

function requireBinaries () {
  for (const bin of ['redis-server', 'redis-cli']) {
    if (spawnSync(bin, ['--version']).status !== 0) {
      console.error(`${bin} is not installed: apt-get install -y redis-server redis-tools (or pass --redis-url and --cluster)`)
      process.exit(1)
    }
  }
}

/** One redis-server and a replica of it. */
async function startSingle () {
  const [port, replicaPort] = [await freePort(), await freePort()]
  for (const [p, extra] of [[port, []], [replicaPort, ['--replicaof', HOST, String(port)]]]) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'claims-bench-'))
    dirs.push(dir)
    redisServer(p, dir, extra)
  }
  const replica = admin(replicaPort)
  await until(async () => (await replica.info('replication')).includes('master_link_status:up'), 10_000, 'the replica to sync')
  return { port }
}

function parseNodes (text) {
  return text.trim().split('\n').map((line) => {
    const [id, address, flags, master] = line.split(' ')
    const slots = line.split(' ').slice(8).filter((r) => !r.startsWith('['))
    return { id, port: Number(address.split('@')[0].split(':')[1]), flags: flags.split(','), master, slots }
  })
}

/** Three masters and three replicas, as test/helpers/redis-cluster.ts builds them. */
async function startCluster () {
  const ports = []
  while (ports.length < 6) { const p = await freePort(); if (!ports.includes(p)) ports.push(p) }
  const nodes = new Map()
  const start = (port, dir) => {
    const child = redisServer(port, dir, ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '1000',
      '--cluster-replica-validity-factor', '0'])
    nodes.set(port, { child, dir })
  }
  for (const port of ports) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'claims-bench-cluster-'))
    dirs.push(dir)
    start(port, dir)
  }
  const admins = new Map(ports.map((p) => [p, admin(p)]))
  await until(async () => (await Promise.all(ports.map((p) => admins.get(p).ping()))).every((r) => r === 'PONG'), 15_000, 'the nodes')
  const created = spawnSync('redis-cli', ['--cluster', 'create', ...ports.map((p) => `${HOST}:${p}`), '--cluster-replicas', '1', '--cluster-yes'], { encoding: 'utf8' })
  if (created.status !== 0) throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`)
  const live = () => ports.filter((p) => nodes.get(p).child.exitCode === null && nodes.get(p).child.signalCode === null)
  const healthy = async () => {
    for (const p of live()) {
      const info = await admins.get(p).cluster('INFO')
      if (!info.includes('cluster_state:ok')) return false
    }
    const all = parseNodes(await admins.get(live()[0]).cluster('NODES'))
    if (all.some((n) => n.flags.includes('fail') || n.flags.includes('fail?'))) return false
    for (const n of all.filter((x) => x.flags.includes('slave'))) {
      if (!(await admins.get(n.port).info('replication')).includes('master_link_status:up')) return false
    }
    return all.filter((n) => n.flags.includes('master') && n.slots.length > 0).length === 3
  }
  await until(healthy, 20_000, 'cluster_state:ok and replicas in sync')
  // A replica of a killed master serves its slots: three live masters, cluster_state:ok on every live node.
  const promoted = async (victim) => {
    for (const p of live()) {
      if (!(await admins.get(p).cluster('INFO')).includes('cluster_state:ok')) return false
    }
    const all = parseNodes(await admins.get(live()[0]).cluster('NODES'))
    const masters = all.filter((n) => n.flags.includes('master') && n.slots.length > 0 && !n.flags.includes('fail') && !n.flags.includes('fail?'))
    return masters.length === 3 && !masters.some((n) => n.port === victim)
  }
  return {
    promoted,
    startupNodes: ports.map((port) => ({ host: HOST, port })),
    admins,
    masters: async () => parseNodes(await admins.get(live()[0]).cluster('NODES')).filter((n) => n.flags.includes('master') && n.slots.length > 0 && !n.flags.includes('fail')),
    kill: async (port) => {
      const { child } = nodes.get(port)
      child.kill('SIGKILL')
      await once(child, 'exit')
    },
    restart: async (port) => {
      start(port, nodes.get(port).dir)
      await until(healthy, 20_000, `node ${port} to rejoin`)
    },
    healthy,
  }
}

/** Recommended fail-fast Cluster client settings (docs/replay.md, "Scaling out: one Redis, Redis Cluster"). */
function clusterClient (startupNodes) {
  const c = new Cluster(startupNodes, {
    enableOfflineQueue: false,
    redisOptions: { commandTimeout: 5000, maxRetriesPerRequest: 1, connectTimeout: 500 },
    clusterRetryStrategy: () => 100,
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    slotsRefreshTimeout: 500,
  })
  c.on('error', () => {})
  connections.push(c)
  return c
}

function singleClient (options) {
  const c = new Redis({ enableOfflineQueue: false, commandTimeout: 5000, maxRetriesPerRequest: 1, ...options })
  c.on('error', () => {})
  connections.push(c)
  return c
}

async function ready (client) {
  if (client.status !== 'ready') await once(client, 'ready')
  return client
}

/** CRC16-XMODEM over the key (or its {hash tag}) mod 16384: the key's cluster slot. */
function keySlot (key) {
  let bytes = Buffer.from(key)
  const open = bytes.indexOf(0x7b)
  const close = open === -1 ? -1 : bytes.indexOf(0x7d, open + 1)
  if (close > open + 1) bytes = bytes.subarray(open + 1, close)
  let crc = 0
  for (const byte of bytes) {
    crc ^= byte << 8
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc % 16384
}

// ---- throughput ----------------------------------------------------------------------------
// Distinct fingerprint-sized strings (43 characters) without a random draw each, so the bench
// measures the store, not the generator.
const SEED = crypto.randomBytes(16).toString('base64url')
let counter = 0
const fingerprint = () => SEED + (counter++).toString(36).padStart(21, '0')
const batch = (n) => Array.from({ length: n }, fingerprint)

// The first version's add, verbatim: SET NX EX for every key of a delivery in one script.
const V1_ADD = `local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, '1', 'NX', 'EX', ARGV[1]) then out[i] = 1 else out[i] = 0 end
end
return out`

/** The first version's RedisSeenEventsStore.add, step by step (the same guard and script runner). */
async function v1Add (client, prefix) {
  const script = new LuaScript(V1_ADD)
  return async (fps) => {
    assertConnected(client, 'add')
    const reply = await guarded('add', 5000, async () => await script.run(client, fps.map((fp) => prefix + fp), [259200]))
    if (!Array.isArray(reply) || reply.length !== fps.length) throw new Error('unexpected reply')
    return reply.map((v) => v === 1)
  }
}

function operations (client, name, prefix, waitForReplicas) {
  const store = new RedisClaimStore(client, { prefix, waitForReplicas, timeout: 5000 })
  const suffix = waitForReplicas > 0 ? `, waitForReplicas ${waitForReplicas}` : ''
  return [
    { name: `${name} · add (${client.isCluster === true ? 'one key per command' : 'one multi-key script per delivery'})${suffix}`, run: async (fps) => { await store.add(fps) }, show: waitForReplicas === 0 },
    { name: `${name} · claim${suffix}`, run: async (fps) => { await store.claim(fps, 30) } },
    {
      name: `${name} · claim + complete${suffix}`,
      run: async (fps) => { await store.complete((await store.claim(fps, 30)).filter((r) => typeof r === 'object')) },
    },
  ].filter((row) => row.show !== false)
}

/** Events claimed per second over `TIME` ms, `CONCURRENCY` deliveries of `size` in flight. */
async function rate (run, size, ms = TIME) {
  let events = 0
  const end = performance.now() + ms
  const started = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < end) { await run(batch(size)); events += size }
  }))
  return events / ((performance.now() - started) / 1000)
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }
const fmt = (n) => Math.round(n).toLocaleString('en')

async function throughput () {
  requireBinaries()
  const single = opts['redis-url'] === undefined ? singleClient({ host: HOST, port: (await startSingle()).port }) : singleClient({ ...parseUrl(opts['redis-url']) })
  await ready(single)
  const cluster = clusterClient(opts.cluster === undefined ? (await startCluster()).startupNodes : [parseHostPort(opts.cluster)])
  await ready(cluster)
  const replicas = Number((await single.info('replication')).match(/connected_slaves:(\d+)/)?.[1] ?? 0)
  const rows = [
    { name: 'one Redis · v1 add (one multi-key script per delivery)', run: await v1Add(single, 'bench-v1:') },
    ...operations(single, 'one Redis', 'bench-1:', 0),
    ...(replicas > 0 ? operations(single, 'one Redis', 'bench-1w:', 1) : []),
    ...operations(cluster, 'Cluster', 'bench-c:', 0),
    ...operations(cluster, 'Cluster', 'bench-cw:', 1),
  ]
  const v1OnCluster = await (await v1Add(cluster, 'bench-v1c:'))(batch(2)).then(() => 'accepted', (err) => /CROSSSLOT/.test(err.message) ? 'CROSSSLOT' : err.message)
  const samples = rows.map(() => SIZES.map(() => []))
  for (const row of rows) for (const size of SIZES) await rate(row.run, size, 200) // warm-up
  for (let rep = 0; rep < REPS; rep++) {
    log(`rep ${rep + 1}/${REPS}`)
    for (const [r, row] of rows.entries()) for (const [s, size] of SIZES.entries()) samples[r][s].push(await rate(row.run, size))
  }
  console.log(`Settings: Node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg()[0].toFixed(2)}; ${CONCURRENCY} deliveries in flight, ` +
    `median of ${REPS} × ${TIME} ms; redis-server ${(await single.info('server')).match(/redis_version:(\S+)/)?.[1]}; ` +
    `${opts['redis-url'] === undefined ? 'local one Redis + 1 replica' : 'given Redis'}, ${opts.cluster === undefined ? 'local cluster of 3 masters + 3 replicas' : 'given cluster'}, all on loopback\n`)
  console.log(`| events claimed per second | ${SIZES.map((s) => `${s.toLocaleString('en')}-event deliveries`).join(' | ')} |`)
  console.log(`|---|${SIZES.map(() => '---:').join('|')}|`)
  for (const [r, row] of rows.entries()) console.log(`| ${row.name} | ${samples[r].map((xs) => fmt(median(xs))).join(' | ')} |`)
  console.log(`| Cluster · v1 add | ${SIZES.map(() => `fails (${v1OnCluster})`).join(' | ')} |`)
}

function parseUrl (url) {
  const u = new URL(url)
  return { host: u.hostname, port: Number(u.port || 6379), ...(u.password ? { password: decodeURIComponent(u.password) } : {}) }
}
function parseHostPort (text) {
  const [host, port] = text.split(':')
  return { host, port: Number(port) }
}

// ---- failover ------------------------------------------------------------------------------
async function step (what, promise) {
  try {
    return await promise
  } catch (err) {
    throw new Error(`${what}: ${err.message}`, { cause: err })
  }
}

async function failoverTrial (local, client, waitForReplicas, trial, victimIndex, blip) {
  const prefix = `fo-${trial}-${waitForReplicas}-${blip ? 'b' : 'k'}:`
  const store = new RedisClaimStore(client, { prefix, waitForReplicas, timeout: 1000 })
  const victim = (await step('list the masters', local.masters())).sort((a, b) => a.port - b.port)[victimIndex % 3]
  const acked = [] // { fp, done }
  const errors = new Map()
  let stop = false
  let killedAt = 0
  const loops = Array.from({ length: CONCURRENCY }, async () => {
    while (!stop) {
      const fps = batch(FAILOVER_EVENTS)
      try {
        const claims = await store.claim(fps, 600)
        if (!claims.every((c) => typeof c === 'object')) throw new Error('a fresh fingerprint was not claimed')
        const entries = fps.map((fp) => ({ fp, done: false, at: Date.now() }))
        acked.push(...entries)
        await store.complete(claims)
        for (const e of entries) e.done = true
      } catch (err) {
        const type = err instanceof ReplayStoreError ? 'ReplayStoreError' : err.name
        errors.set(type, (errors.get(type) ?? 0) + 1)
        if (!(err instanceof ReplayStoreError)) throw err
        await sleep(10)
      }
    }
  })
  await sleep(1000)
  if (blip) {
    // The replication link goes down while clients still reach the master (a partition between
    // them): the master asks new connections for a password its replica does not have, and drops
    // its replica, which cannot come back. Connected clients stay connected. Then it dies.
    const victimAdmin = local.admins.get(victim.port)
    await victimAdmin.config('SET', 'requirepass', crypto.randomBytes(16).toString('hex'))
    await victimAdmin.client('KILL', 'TYPE', 'replica')
    await sleep(BLIP_MS)
  }
  killedAt = Date.now()
  await local.kill(victim.port)
  await until(async () => await local.promoted(victim.port), 20_000, 'the failover')
  const promotedAfter = Date.now() - killedAt
  await sleep(500)
  stop = true
  await Promise.all(loops)
  // Read back everything acknowledged on the victim's slots before the kill.
  const ranges = victim.slots.map((r) => r.split('-').map(Number)).map(([a, b]) => [a, b ?? a])
  const onVictim = acked.filter(({ fp, at }) => at <= killedAt && ranges.some(([a, b]) => keySlot(prefix + fp) >= a && keySlot(prefix + fp) <= b))
  // Read with retries: right after a failover a read may still fail; an unreadable key is not counted as lost.
  const values = new Array(onVictim.length).fill(undefined)
  for (let attempt = 0; attempt < 5 && values.includes(undefined); attempt++) {
    if (attempt > 0) await sleep(500)
    await Promise.all(onVictim.map(async ({ fp }, i) => {
      if (values[i] === undefined) values[i] = await client.get(prefix + fp).catch(() => undefined)
    }))
  }
  const unreadable = values.filter((v) => v === undefined).length
  let lostClaims = 0
  let lostMarks = 0
  for (const [i, { done }] of onVictim.entries()) {
    if (values[i] === undefined) continue
    if (values[i] === null) lostClaims++
    else if (done && values[i] !== '1') lostMarks++
  }
  const window = onVictim.filter((e) => e.at >= killedAt - 1000 && e.at <= killedAt).length
  await step('restart the killed node', local.restart(victim.port))
  return { waitForReplicas, blip, unreadable, acked: onVictim.length, window, lostClaims, lostMarks, promotedAfter, errors: Object.fromEntries(errors) }
}

async function failover () {
  requireBinaries()
  const local = await startCluster()
  const client = await ready(clusterClient(local.startupNodes))
  console.log(`Settings: Node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg()[0].toFixed(2)}; local cluster of 3 masters + 3 replicas, ` +
    `cluster-node-timeout 1000 ms; ${CONCURRENCY} loops of ${FAILOVER_EVENTS}-event deliveries (claim, then complete); one master SIGKILLed per trial\n`)
  console.log('| trial | master killed | waitForReplicas | acknowledged on it | of which in its last second | claims lost | done marks lost | unreadable | replica took over after | failed calls meanwhile |')
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---:|---|')
  const totals = new Map()
  for (let trial = 1; trial <= TRIALS; trial++) {
    for (const blip of [false, true]) {
      for (const w of [0, 1]) {
        log(`trial ${trial}, ${blip ? 'replica cut off' : 'plain kill'}, waitForReplicas ${w}`)
        const r = await failoverTrial(local, client, w, trial, trial + w + (blip ? 1 : 0), blip)
        const key = `${blip ? `${BLIP_MS} ms after its replica was cut off` : 'while replicating'}, waitForReplicas ${w}`
        const t = totals.get(key) ?? { acked: 0, lost: 0 }
        t.acked += r.acked
        t.lost += r.lostClaims + r.lostMarks
        totals.set(key, t)
        console.log(`| ${trial} | ${blip ? `${BLIP_MS} ms after its replica was cut off` : 'while replicating'} | ${w} | ${fmt(r.acked)} | ${fmt(r.window)} | ${r.lostClaims} | ${r.lostMarks} | ${r.unreadable} | ${(r.promotedAfter / 1000).toFixed(1)} s | ${Object.entries(r.errors).map(([k, v]) => `${v} ${k}`).join(', ') || 'none'} |`)
      }
    }
  }
  console.log('')
  for (const [key, t] of totals) console.log(`- master killed ${key}: ${t.lost} of ${fmt(t.acked)} acknowledged claims and done marks lost`)
}

try {
  if (opts.failover) await failover()
  else await throughput()
} catch (err) {
  console.error(err)
  process.exitCode = 1
} finally {
  cleanup()
  // A cluster client's timers may outlive disconnect() for a moment; never hang on them.
  setTimeout(() => process.exit(), 1000).unref()
}
