// Dead letters across processes, on real servers: an application SIGKILLed between a poison
// event's last failure and its parking, or right after the parking (never lost, never a 2xx
// without it); two processes retrying one dead letter at once (its handler runs once); and, on
// transactional PostgreSQL, a retry killed between its effect and the commit (the effect, the done
// mark and the dead letter's deletion commit together, so the next retry runs it once).
import { spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { RedisDeadLetterStore, eventFingerprint } from '../../src/index.js'
import { toEvent } from '../../src/events/parse-events.js'
import { postgresDeadLetters } from '../../src/postgres/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { startPostgres } from '../helpers/postgres.js'
import { startRedisServer } from '../replay/helpers/redis-server.js'
import { postSigned } from '../postgres/helpers/spawn-receiver.js'

const APP = path.join(path.dirname(fileURLToPath(import.meta.url)), 'helpers', 'app.ts')
const KEYS = generateSigningKeyPair()
let serial = 0

interface App { proc: ChildProcess, exited: Promise<unknown>, line: (pattern: RegExp) => Promise<RegExpExecArray> }

function start (t: Test, env: Record<string, string>): App {
  const proc = spawn(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', APP], { env: { ...process.env, PUBLIC_KEY: KEYS.publicKey, ...env }, stdio: ['pipe', 'pipe', 'pipe'] })
  const exited = new Promise((resolve) => { proc.once('exit', (code, signal) => { resolve(signal ?? code) }) })
  t.teardown(async () => { if (proc.exitCode === null && proc.signalCode === null) { proc.kill('SIGKILL'); await exited } })
  let out = ''
  let err = ''
  const waiting: Array<() => void> = []
  proc.stdout!.on('data', (c: Buffer) => { out += c.toString(); for (const w of waiting.splice(0)) w() })
  proc.stderr!.on('data', (c: Buffer) => { err += c.toString() })
  const line = async (pattern: RegExp): Promise<RegExpExecArray> => {
    const deadline = Date.now() + 30_000
    for (;;) {
      const m = pattern.exec(out)
      if (m !== null) return m
      if (proc.exitCode !== null || proc.signalCode !== null || Date.now() > deadline) throw new Error(`no ${String(pattern)} from the app: ${out} ${err}`)
      await new Promise<void>((resolve) => { waiting.push(resolve); setTimeout(resolve, 200) })
    }
  }
  return { proc, exited, line }
}

async function receiver (t: Test, env: Record<string, string>): Promise<{ app: App, port: number }> {
  const app = start(t, { ROLE: 'receiver', ...env })
  return { app, port: Number((await app.line(/listening (\d+)/))[1]) }
}

function wireEvents (count: number): Array<Record<string, unknown>> {
  const base = ++serial
  return Array.from({ length: count }, (_v, i) => ({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000 + base, request_id: `req-${base}-${i}`, email: `u${i}@example.com` }))
}

async function post (port: number, wire: Array<Record<string, unknown>>): Promise<number> {
  const signed = signWebhook({ privateKey: KEYS.privateKey, events: wire as never, created: Math.floor(Date.now() / 1000) - (serial++ % 200), label: `sig_${serial}` })
  return await postSigned(port, signed)
}

const fingerprintOf = (wire: Record<string, unknown>): string => eventFingerprint(toEvent(wire, 0))

// Redis and PostgreSQL are separate servers: the PostgreSQL tests (initdb first) run beside the
// Redis ones, which stay one after another within their group.
t.jobs = 2

t.test('Redis', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client({ commandTimeout: 5000, maxRetriesPerRequest: 1 })
  const env = { REDIS_PORT: String(redis.port), AFTER: '2' }

  t.test('SIGKILL between the last failure and the parking: nothing answered 2xx, nothing lost; parked on the next attempt', async (t) => {
    const wire = wireEvents(3)
    const poison = String(wire[1]!.request_id)
    const prefix = 'crash-before'
    const store = new RedisDeadLetterStore(client, { prefix: `{${prefix}-dl}:`, timeout: 10_000 })
    const first = await receiver(t, { ...env, PREFIX: prefix, POISON: poison })
    t.equal(await post(first.port, wire), 500, 'attempt 1 counted')
    first.app.proc.kill('SIGKILL')
    await first.app.exited
    const doomed = await receiver(t, { ...env, PREFIX: prefix, POISON: poison, CRASH: 'before-park' })
    t.equal(await post(doomed.port, wire), 0, 'killed at the last failure, before the parking: no answer')
    await doomed.app.exited
    t.equal(await store.get(fingerprintOf(wire[1]!)), undefined, 'not parked: the crashed attempt was never counted')
    const healthy = await receiver(t, { ...env, PREFIX: prefix, POISON: poison })
    let status = 0
    // The dead process's claim expires (claimLifetime 1 s): until then the event is deferred (503).
    for (let i = 0; i < 40 && status !== 200; i++) {
      status = await post(healthy.port, wire)
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 250))
    }
    t.equal(status, 200, 'parked on the next counted failure: 2xx')
    const letter = await store.get(fingerprintOf(wire[1]!))
    t.equal(letter?.attempts, 2)
    for (const w of [wire[0]!, wire[2]!]) t.equal(await client.get(`${prefix}-effects:${fingerprintOf(w)}`), '1', 'the other events once')
  })

  t.test('SIGKILL after the parking, before the completion and the answer: the dead letter is kept; the retry of the delivery completes it', async (t) => {
    const wire = wireEvents(2)
    const poison = String(wire[0]!.request_id)
    const prefix = 'crash-after'
    const store = new RedisDeadLetterStore(client, { prefix: `{${prefix}-dl}:`, timeout: 10_000 })
    const doomed = await receiver(t, { ...env, PREFIX: prefix, POISON: poison, AFTER: '1', CRASH: 'after-park' })
    t.equal(await post(doomed.port, wire), 0)
    await doomed.app.exited
    t.equal((await store.get(fingerprintOf(wire[0]!)))?.attempts, 1, 'parked before the crash: written before anything was answered')
    const healthy = await receiver(t, { ...env, PREFIX: prefix, POISON: poison, AFTER: '1' })
    let status = 0
    for (let i = 0; i < 40 && status !== 200; i++) {
      status = await post(healthy.port, wire)
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 250))
    }
    t.equal(status, 200)
    t.equal((await store.list()).items.length, 1, 'one dead letter, not two')
  })

  t.test('two processes retry one dead letter at once: its handler runs once', async (t) => {
    const wire = wireEvents(1)
    const prefix = 'two-retries'
    const fp = fingerprintOf(wire[0]!)
    const store = new RedisDeadLetterStore(client, { prefix: `{${prefix}-dl}:`, timeout: 10_000 })
    const app = await receiver(t, { ...env, PREFIX: prefix, POISON: String(wire[0]!.request_id), AFTER: '1' })
    t.equal(await post(app.port, wire), 200, 'parked at once (after: 1)')
    t.ok(await store.get(fp))
    await client.del(`${prefix}-effects:${fp}`)
    // Claims that outlive any pause of a busy machine: a process stalled past two thirds of its
    // claim's lifetime loses it to the other (the lease the router renews), and this test is about
    // the two racing, not about a lease running out (the crash tests above are).
    const retries = [0, 1].map(() => start(t, { ...env, PREFIX: prefix, ROLE: 'retry', FP: fp, FIXED: '1', CLAIM_LIFETIME: '30', RETRY_LIFETIME: '30' }))
    await Promise.all(retries.map(async (r) => await r.line(/ready/)))
    for (const r of retries) r.proc.stdin!.write('go\n')
    const results = await Promise.all(retries.map(async (r) => JSON.parse((await r.line(/result (.*)\n/))[1]!) as { status: string }))
    t.ok(results.some((r) => r.status === 'handled'), 'one retry handled it')
    t.ok(results.every((r) => ['handled', 'busy', 'missing'].includes(r.status)), 'the other was told busy (or found it gone)')
    t.equal(await client.get(`${prefix}-effects:${fp}`), '1', 'its handler ran once')
    t.equal(await store.get(fp), undefined, 'the dead letter is gone')
  })
})

t.test('transactional PostgreSQL', async (t) => {
  const server = await startPostgres()
  t.teardown(async () => { await server.close() })
  const pool = server.pool()
  const env = { DATABASE_URL: server.url }

  t.test('a retry SIGKILLed between its effect and the commit: no effect, still parked; the next retry runs it once and deletes it with the effect', async (t) => {
    const prefix = 'pgretry'
    await pool.query(`CREATE TABLE ${prefix}_effects (fingerprint text NOT NULL)`)
    const wire = wireEvents(2)
    const fp = fingerprintOf(wire[0]!)
    const store = postgresDeadLetters({ pool, table: `${prefix}_dl` })
    const app = await receiver(t, { ...env, PREFIX: prefix, POISON: String(wire[0]!.request_id), AFTER: '1' })
    t.equal(await post(app.port, wire), 200, 'the poison parked, the delivery 2xx')
    t.ok(await store.get(fp), 'the dead letter is committed in the database')
    const count = async (): Promise<number> => (await pool.query(`SELECT count(*)::int AS n FROM ${prefix}_effects WHERE fingerprint = $1`, [fp])).rows[0].n as number
    t.equal(await count(), 0, 'the failed attempt left no effect (rolled back)')
    const doomed = start(t, { ...env, PREFIX: prefix, ROLE: 'retry', FP: fp, FIXED: '1', CRASH: 'retry-effect' })
    await doomed.line(/ready/)
    doomed.proc.stdin!.write('go\n')
    await doomed.exited
    t.equal(await count(), 0, 'killed before the commit: no effect')
    t.ok(await store.get(fp), 'still parked')
    // The dead process held the dead letter and the event's claim: both expire.
    let status = 'busy'
    for (let i = 0; i < 40 && status !== 'handled'; i++) {
      const retry = start(t, { ...env, PREFIX: prefix, ROLE: 'retry', FP: fp, FIXED: '1' })
      await retry.line(/ready/)
      retry.proc.stdin!.write('go\n')
      status = (JSON.parse((await retry.line(/result (.*)\n/))[1]!) as { status: string }).status
      await retry.exited
      if (status !== 'handled') await new Promise((resolve) => setTimeout(resolve, 500))
    }
    t.equal(status, 'handled')
    t.equal(await count(), 1, 'the effect once')
    t.equal(await store.get(fp), undefined, 'deleted')
  })
})
