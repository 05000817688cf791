// Seen-events stores side by side: claims and done marks per second for 1-, 100- and 1,000-event
// deliveries on the memory store, one local Redis, a local PostgreSQL and a SQLite file; and the
// transactional inbox on PostgreSQL and SQLite: one transaction per event (BEGIN, the handler's
// INSERT, the done mark, COMMIT), and on PostgreSQL the delivery transaction the router uses
// (openDelivery), with an empty handler and with a one-INSERT handler, beside the plain store with
// the same two handlers (the INSERT on the pool, committed alone) and the anchor (every INSERT of a
// delivery in one transaction, no isolation between events). Plain Node ESM over the built library:
//   node node_modules/typescript/bin/tsc -p tsconfig.build.json   (or npm run build)
//   node bench/inbox-bench.mjs [--sizes 1,100,1000] [--time 1000] [--reps 3] [--concurrency 8] [--only PostgreSQL] [--dist dist]
// --dist points at another build of the library (an older commit's dist, for a before/after pair
// in one run on one server).
// The servers are started here on free loopback ports in temp folders (PostgreSQL as the
// `postgres` user when run as root: initdb refuses root) and killed by PID at the end.
import { spawn, spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import { once } from 'node:events'
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { Redis } from 'ioredis'
import pg from 'pg'
import { pathToFileURL } from 'node:url'

const { values: opts } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1,100,1000' },
    time: { type: 'string', default: '1000' },
    reps: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '8' },
    only: { type: 'string', default: '' },
    dist: { type: 'string', default: '' },
    help: { type: 'boolean', default: false },
  },
})
if (opts.help) {
  console.log('node bench/inbox-bench.mjs [--sizes 1,100,1000] [--time 1000 (ms per sample)] [--reps 3 (samples, median)] [--concurrency 8 (deliveries in flight)] [--only PostgreSQL (rows whose name contains this)]')
  process.exit(0)
}
const DIST = opts.dist === '' ? new URL('../dist/', import.meta.url) : pathToFileURL(path.resolve(opts.dist) + '/')
const lib = await import(new URL('index.js', DIST).href)
// Older builds named them MemorySeenEventsStore / RedisSeenEventsStore.
const MemoryClaimStore = lib.MemoryClaimStore ?? lib.MemorySeenEventsStore
const RedisClaimStore = lib.RedisClaimStore ?? lib.RedisSeenEventsStore
const { postgresSeenEvents } = await import(new URL('postgres/index.js', DIST).href)
const { sqliteSeenEvents } = await import(new URL('sqlite/index.js', DIST).href)
const SIZES = opts.sizes.split(',').map(Number)
const TIME = Number(opts.time)
const REPS = Number(opts.reps)
const CONCURRENCY = Number(opts.concurrency)
const HOST = '127.0.0.1'
const log = (...args) => console.error(...args)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

const processes = []
const dirs = []
function cleanup () {
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

function tempDir (label) {
  const dir = mkdtempSync(path.join(os.tmpdir(), `inbox-bench-${label}-`))
  dirs.push(dir)
  return dir
}

async function startRedis () {
  const port = await freePort()
  processes.push(spawn('redis-server', ['--port', String(port), '--bind', HOST, '--save', '', '--appendonly', 'no', '--dir', tempDir('redis')], { stdio: 'ignore' }))
  const client = new Redis({ host: HOST, port, enableOfflineQueue: true, maxRetriesPerRequest: 1, retryStrategy: () => 50 })
  client.on('error', () => {})
  for (let i = 0; i < 200 && client.status !== 'ready'; i++) await sleep(25)
  return client
}

function pgBinDir () {
  const config = spawnSync('pg_config', ['--bindir'], { encoding: 'utf8' })
  if (config.status === 0 && existsSync(path.join(config.stdout.trim(), 'initdb'))) return config.stdout.trim()
  const root = '/usr/lib/postgresql'
  const version = existsSync(root) ? readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => b - a).find((v) => existsSync(path.join(root, v, 'bin', 'initdb'))) : undefined
  if (version === undefined) { console.error('PostgreSQL is not installed: apt-get install -y postgresql'); process.exit(1) }
  return path.join(root, version, 'bin')
}

async function startPostgres () {
  const bin = pgBinDir()
  const dir = tempDir('pg')
  let user = {}
  if (process.getuid?.() === 0) {
    user = { uid: Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout), gid: Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout) }
    chownSync(dir, user.uid, user.gid)
  }
  const data = path.join(dir, 'data')
  const init = spawnSync(path.join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-N', '-E', 'UTF8', '--locale=C'], { ...user, cwd: dir, encoding: 'utf8' })
  if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}`)
  const port = await freePort()
  // Default durability settings, as a production server would run (fsync on, synchronous commit).
  processes.push(spawn(path.join(bin, 'postgres'), ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=100'], { ...user, cwd: dir, stdio: 'ignore' }))
  const pool = new pg.Pool({ connectionString: `postgres://postgres@${HOST}:${port}/postgres`, max: CONCURRENCY + 2 })
  pool.on('error', () => {})
  for (let i = 0; i < 200; i++) {
    try { await pool.query('SELECT 1'); return pool } catch { await sleep(50) }
  }
  throw new Error('postgres did not start')
}

// Distinct fingerprint-sized strings (43 characters) without a random draw each.
const SEED = crypto.randomBytes(16).toString('base64url')
let counter = 0
const batch = (n) => Array.from({ length: n }, () => SEED + (counter++).toString(36).padStart(21, '0'))

/** Events per second over TIME ms, CONCURRENCY deliveries of `size` in flight. */
async function rate (run, size) {
  let events = 0
  const started = performance.now()
  const end = started + TIME
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < end) { await run(batch(size)); events += size }
  }))
  return events / ((performance.now() - started) / 1000)
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

const claimed = (results) => results.filter((r) => typeof r === 'object')

function rows (name, store) {
  return [
    { name: `${name} · claim`, run: async (fps) => { await store.claim(fps, 30) } },
    { name: `${name} · claim + complete`, run: async (fps) => { await store.complete(claimed(await store.claim(fps, 30))) } },
  ]
}

function transactionalRow (name, store, insert) {
  return {
    name: `${name} · claim + a transaction per event (INSERT + done mark)`,
    // One event after the other, as the router runs a delivery's events by default (concurrency 1).
    run: async (fps) => {
      for (const c of claimed(await store.claim(fps, 30))) await store.runInTransaction(c, async (db) => { await insert(db, c.fingerprint) })
    },
  }
}

/**
 * What the router does with a store that has openDelivery (concurrency 1: one lane): the events one
 * after the other, a commit when the transaction is `full` (`every` undefined) or every `every`
 * events, and at the end. `fail`: one event in that many throws after its handler's work.
 */
function deliveryRow (name, store, handler, { every, fail } = {}) {
  let n = 0
  return {
    name: `${name} · claim + delivery transaction (openDelivery), ${handler.label}, commit ${every === undefined ? 'when full' : `every ${every} events`}${fail === undefined ? '' : `, 1 event in ${fail} throws`}`,
    run: async (fps) => {
      let tx = store.openDelivery()
      let inTx = 0
      for (const c of claimed(await store.claim(fps, 30))) {
        if (every === undefined ? tx.full : inTx === every) { await tx.commit(); tx = store.openDelivery(); inTx = 0 }
        const throws = fail !== undefined && ++n % fail === 0
        await tx.run(c, async (db) => { await handler.run(db, c.fingerprint); if (throws) throw new Error('fails') }).catch(() => { if (!throws) throw new Error('an event failed that should not') })
        if (throws) await store.release([c])
        inTx++
      }
      await tx.commit()
    },
  }
}

/** The plain store with a handler that writes one row on the pool (committed on its own: what a plain store's handler does). */
function plainInsertRow (name, store, pool) {
  return {
    name: `${name} · claim, one INSERT per event on the pool (autocommit), complete (the plain store with a one-INSERT handler)`,
    run: async (fps) => {
      const claims = claimed(await store.claim(fps, 30))
      for (const c of claims) await pool.query('INSERT INTO effects (fingerprint) VALUES ($1)', [c.fingerprint])
      await store.complete(claims)
    },
  }
}

const EMPTY = { label: 'empty handler', run: async () => {} }
const INSERT = { label: 'one-INSERT handler', run: async (db, fp) => { await db.query('INSERT INTO effects (fingerprint) VALUES ($1)', [fp]) } }

// The anchor: a hand-written delivery transaction with no isolation between events (one failure
// would take every other event of the delivery with it): the handlers' INSERTs, the done marks in
// one statement, one commit. No store can go faster with one INSERT round trip per event.
function anchorRow (name, store, pool) {
  return {
    name: `${name} · anchor: claim, one INSERT per event, complete, one commit, no savepoints (no isolation)`,
    run: async (fps) => {
      const claims = claimed(await store.claim(fps, 30))
      const client = await pool.connect()
      try {
        await client.query('BEGIN')
        for (const c of claims) await client.query('INSERT INTO effects (fingerprint) VALUES ($1)', [c.fingerprint])
        await client.query('COMMIT')
      } finally { client.release() }
      await store.complete(claims)
    },
  }
}

const redis = await startRedis()
const pool = await startPostgres()
await pool.query('CREATE TABLE effects (fingerprint text NOT NULL)')
const sqliteDir = tempDir('sqlite')
const sqlite = sqliteSeenEvents({ path: path.join(sqliteDir, 'seen.db') })
const sqliteTx = sqliteSeenEvents({ path: path.join(sqliteDir, 'app.db'), transactional: true })
sqliteTx.database.exec('CREATE TABLE effects (fingerprint TEXT NOT NULL)')
// A generous guard (60 s, not 5 s): on a machine whose disk is shared and busy a commit of 1,000
// done marks can take seconds to flush, and a store call past its guard would end the run.
const pgStore = postgresSeenEvents({ pool, timeout: 60_000 })
const pgTx = postgresSeenEvents({ pool, table: 'seen_tx', transactional: true, timeout: 60_000 })

const EVERY = [
  ...rows('memory', new MemoryClaimStore()),
  ...rows('Redis (one local server)', new RedisClaimStore(redis, { timeout: 5000 })),
  ...rows('PostgreSQL 15 (local)', pgStore),
  plainInsertRow('PostgreSQL 15 (local)', pgStore, pool),
  anchorRow('PostgreSQL 15 (local)', pgStore, pool),
  transactionalRow('PostgreSQL 15 (local)', pgTx, INSERT.run),
  // Builds without openDelivery (before the savepoint design) have no such rows.
  ...(typeof pgTx.openDelivery === 'function'
    ? [
        deliveryRow('PostgreSQL 15 (local)', pgTx, EMPTY),
        deliveryRow('PostgreSQL 15 (local)', pgTx, EMPTY, { every: 1000 }),
        deliveryRow('PostgreSQL 15 (local)', pgTx, INSERT),
        deliveryRow('PostgreSQL 15 (local)', pgTx, INSERT, { every: 50 }),
        deliveryRow('PostgreSQL 15 (local)', pgTx, INSERT, { every: 250 }),
        deliveryRow('PostgreSQL 15 (local)', pgTx, INSERT, { every: 1000 }),
        deliveryRow('PostgreSQL 15 (local)', pgTx, INSERT, { fail: 100 }),
      ]
    : []),
  ...rows('SQLite (file, WAL)', sqlite),
  transactionalRow('SQLite (file, WAL)', sqliteTx, (db, fp) => { db.prepare('INSERT INTO effects (fingerprint) VALUES (?)').run(fp) }),
]

const ALL = EVERY.filter((row) => row.name.includes(opts.only))

// Warm-up: schema creation, connections, JIT.
for (const row of ALL) for (let i = 0; i < 20; i++) await row.run(batch(10))
log(`node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), concurrency ${CONCURRENCY}, ${TIME} ms x ${REPS} samples, median`)
const results = new Map(ALL.map((r) => [r.name, new Map(SIZES.map((s) => [s, []]))]))
for (const size of SIZES) {
  for (let rep = 0; rep < REPS; rep++) {
    for (const row of ALL) {
      try {
        results.get(row.name).get(size).push(await rate(row.run, size))
      } catch (err) {
        log(`${row.name}, ${size}-event deliveries: ${err.message}${err.cause === undefined ? '' : ` (${err.cause.message})`}`)
        throw err
      }
    }
  }
  log(`size ${size} done`)
}
const fmt = (x) => Math.round(x).toLocaleString('en-US')
console.log(`| store · operation | ${SIZES.map((s) => `${s}-event deliveries`).join(' | ')} |`)
console.log(`|---|${SIZES.map(() => '---:').join('|')}|`)
for (const row of ALL) console.log(`| ${row.name} | ${SIZES.map((s) => fmt(median(results.get(row.name).get(s)))).join(' | ')} |`)
console.log('\nevents per second (claims, or claims and done marks), median of the samples')

await sqlite.close()
await sqliteTx.close()
await pool.end()
redis.disconnect()
cleanup()
