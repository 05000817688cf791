// Another PROCESS holding the SQLite file's write lock (a child process in BEGIN IMMEDIATE): the
// store waits for it on timers, never blocking the event loop (an interval keeps ticking while it
// waits), answers 503 with Retry-After once `busyTimeout` passed, and carries on once the other
// process commits, or dies holding the lock (SIGKILL).
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { ReplayStoreError, WebhookEventRouter } from '../../src/index.js'
import { sqliteSeenEvents, type SqliteSeenEventsStore } from '../../src/sqlite/index.js'
import { ev } from '../dispatch/helpers/events.js'
import { receiverOf, wire } from './helpers/deliver.js'
import { driver, fileOf } from './helpers/driver.js'

const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-sqlite-lock-'))
const stores: SqliteSeenEventsStore[] = []
t.teardown(async () => {
  for (const s of stores) await s.close()
  rmSync(dir, { recursive: true, force: true })
})
let n = 0

/**
 * A child process that opens `file`, takes its write lock (BEGIN IMMEDIATE) and holds it until
 * it reads a line on stdin (then COMMITs and exits), or `holdMs` passed.
 */
async function lockHolder (t: Test, file: string, holdMs: number): Promise<{ proc: ChildProcess, release: () => void, exited: Promise<unknown> }> {
  const script = `
    const db = ${driver === 'better-sqlite3' ? `new (require(${JSON.stringify(createRequire(import.meta.url).resolve('better-sqlite3'))}))` : 'new (require(\'node:sqlite\').DatabaseSync)'}(${JSON.stringify(file)})
    db.exec('BEGIN IMMEDIATE')
    db.exec('INSERT INTO other (v) VALUES (1)')
    const done = () => { db.exec('COMMIT'); db.close(); process.exit(0) }
    process.stdin.once('data', done)
    setTimeout(done, ${holdMs})
    process.stdout.write('locked\\n')`
  const proc = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'pipe'] })
  const exited = new Promise((resolve) => { proc.once('exit', (code, signal) => { resolve(signal ?? code) }) })
  t.teardown(async () => { if (proc.exitCode === null && proc.signalCode === null) { proc.kill('SIGKILL'); await exited } })
  let stderr = ''
  proc.stderr!.on('data', (c: Buffer) => { stderr += c.toString() })
  await new Promise<void>((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => { if (c.toString().includes('locked')) resolve() })
    proc.once('exit', () => { reject(new Error(`lock holder exited: ${stderr}`)) })
  })
  return { proc, release: () => { proc.stdin!.write('go\n') }, exited }
}

async function storeOn (options: { busyTimeout: number, transactional?: boolean }): Promise<SqliteSeenEventsStore & { database: { exec: (sql: string) => unknown } }> {
  const store = sqliteSeenEvents({ path: path.join(dir, `lock-${n++}.db`), ...options } as never) as SqliteSeenEventsStore
  stores.push(store)
  store.database.exec('CREATE TABLE other (v INTEGER)')
  await store.has(['warm'])
  return store
}

/** Counts interval ticks (every 5 ms) until stopped: ticks arriving means the event loop runs. */
function ticker (): { ticks: () => number, stop: () => void } {
  let ticks = 0
  const timer = setInterval(() => { ticks++ }, 5)
  return { ticks: () => ticks, stop: () => { clearInterval(timer) } }
}

t.test('while another process holds the lock: the event loop keeps running, and the answer is 503 with Retry-After', async (t) => {
  const store = await storeOn({ busyTimeout: 1000, transactional: true })
  const router = new WebhookEventRouter({ seenEvents: store }).on('hard-bounced', () => {})
  const holder = await lockHolder(t, fileOf(store.database), 60_000)

  const tick = ticker()
  const report = await router.dispatch([ev('hard-bounced', 1)])
  const during = tick.ticks()
  tick.stop()
  t.same(report.outcomes.map((o) => o.status), ['failed'])
  t.type((report.outcomes[0] as { error: unknown }).error, ReplayStoreError)
  t.ok(during > 0, `timers kept firing while the store waited for the lock (${during} ticks)`)

  const answer = await receiverOf(router)(wire(1))
  t.equal(answer.status, 503)
  t.ok(answer.retryAfter !== null, 'Retry-After set')

  holder.release()
  await holder.exited
  t.equal((await receiverOf(router)(wire(1))).status, 200, 'handled once the other process committed')
})

t.test('the store waits on timers up to busyTimeout: released while ticks arrive, the delivery is handled', async (t) => {
  const store = await storeOn({ busyTimeout: 60_000 })
  const router = new WebhookEventRouter({ seenEvents: store }).on('hard-bounced', () => {})
  // The holder lets go after 5 s on its own: with a blocking wait the ticks below never arrive first.
  const holder = await lockHolder(t, fileOf(store.database), 5000)
  let ticks = 0
  let released = false
  const timer = setInterval(() => {
    ticks++
    if (ticks === 5 && !released) { released = true; holder.release() }
  }, 5)
  t.teardown(() => { clearInterval(timer) })
  const report = await router.dispatch([ev('hard-bounced', 2)])
  t.ok(released, 'the lock was let go because the event loop kept ticking while the claim waited')
  t.same(report.outcomes.map((o) => o.status), ['handled'])
})

t.test('a process killed holding the lock (SIGKILL): the next delivery is handled', async (t) => {
  const store = await storeOn({ busyTimeout: 200, transactional: true })
  const router = new WebhookEventRouter({ seenEvents: store }).on('hard-bounced', () => {})
  const holder = await lockHolder(t, fileOf(store.database), 60_000)
  t.equal((await receiverOf(router)(wire(3))).status, 503)
  holder.proc.kill('SIGKILL')
  t.equal(await holder.exited, 'SIGKILL')
  t.equal((await receiverOf(router)(wire(3))).status, 200)
})
