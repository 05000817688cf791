// handlerTimeout across processes: a child process's handler never returns while holding its
// event's transaction (the file's write lock). This process's deliveries on the same file answer
// 503 meanwhile (its event loop running), and once the child's deadline rolled the transaction
// back, they go through, and the child's event (its claim released) is handled here exactly once.
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { WebhookEventRouter } from '../../src/index.js'
import { sqliteSeenEvents } from '../../src/sqlite/index.js'
import { ev, sleep } from '../dispatch/helpers/events.js'
import { receiverOf, wire } from './helpers/deliver.js'

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), 'helpers', 'stuck-handler.ts')
const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-sqlite-deadline-'))
t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })

t.test('a handler stuck in another process holds the file only until its handlerTimeout', async (t) => {
  const file = path.join(dir, 'app.db')
  const store = sqliteSeenEvents({ path: file, transactional: true, busyTimeout: 100 })
  t.teardown(async () => { await store.close() })
  store.database.exec('CREATE TABLE effects (fingerprint TEXT NOT NULL, pid INTEGER NOT NULL)')
  await store.has(['warm'])

  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', CHILD], { env: { ...process.env, SQLITE_PATH: file, HANDLER_TIMEOUT: '1500' }, stdio: ['ignore', 'pipe', 'pipe'] })
  const exited = new Promise((resolve) => { child.once('exit', (code, signal) => { resolve(signal ?? code) }) })
  t.teardown(async () => { if (child.exitCode === null && child.signalCode === null) { child.kill('SIGKILL'); await exited } })
  let out = ''
  let stderr = ''
  child.stdout!.on('data', (c: Buffer) => { out += c.toString() })
  child.stderr!.on('data', (c: Buffer) => { stderr += c.toString() })
  /** The first match of `re` in the child's output, once printed (at most 90 s: a guard against a hang, not a timing). */
  const line = async (re: RegExp): Promise<string> => await new Promise((resolve, reject) => {
    const check = (): boolean => { const m = re.exec(out); if (m !== null) { done(); resolve(m[0]) } return m !== null }
    const onExit = (): void => { done(); reject(new Error(`child exited: ${stderr}`)) }
    const guard = setTimeout(() => { done(); reject(new Error(`no ${String(re)} from the child: ${out}`)) }, 90_000)
    const done = (): void => { clearTimeout(guard); child.stdout!.off('data', check); child.off('exit', onExit) }
    if (check()) return
    child.stdout!.on('data', check)
    child.once('exit', onExit)
  })
  await line(/stuck\n/)

  const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 30 })
    .on('hard-bounced', (_event, { db, fingerprint }) => { db.prepare('INSERT INTO effects (fingerprint, pid) VALUES (?, ?)').run(fingerprint, process.pid) })
  const deliver = receiverOf(router)
  const other = wire(2)
  const first = await deliver(other)
  t.equal(first.status, 503, 'an unrelated delivery meets the stuck transaction\'s lock: 503, not a wait')

  t.match(await line(/(failed|handled) \w*\n/), /^failed HandlerTimeoutError/, 'the child\'s event failed with HandlerTimeoutError at its deadline')
  let status = 0
  for (let i = 0; i < 100 && status !== 200; i++) {
    status = (await deliver(other)).status
    if (status !== 200) await sleep(50)
  }
  t.equal(status, 200, 'the file is free again: the delivery is handled')
  // The child's event: its claim was released at the deadline, so it is handled here at once.
  const report = await router.dispatch([ev('hard-bounced', 1)])
  t.same(report.outcomes.map((o) => o.status), ['handled'])
  const rows = store.database.prepare('SELECT pid, count(*) AS n FROM effects GROUP BY fingerprint ORDER BY fingerprint').all() as Array<{ pid: number, n: number }>
  t.same(rows.map((r) => [r.pid, r.n]), [[process.pid, 1], [process.pid, 1]], 'each event once, none from the stuck handler')
})
