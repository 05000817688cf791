// The SQLite store across process restarts: a receiver in a child process on a SQLite file,
// SIGKILLed after a handler's insert (before the commit) and after the commit (before the 2xx),
// then started again on the same file. Every event's row in the app's table exactly once.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { postSigned, spawnReceiver, type Receiver } from '../postgres/helpers/spawn-receiver.js'
import { sqliteSeenEvents } from '../../src/sqlite/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'

const KEYS = generateSigningKeyPair()
const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-sqlite-restart-'))
t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
let n = 0


async function receiver (t: Test, file: string, crashAt = ''): Promise<Receiver> {
  return await spawnReceiver(t, { SQLITE_PATH: file, PUBLIC_KEY: KEYS.publicKey, CRASH_AT: crashAt, EFFECTS: 'effects', SEEN: 'seen', CLAIM_LIFETIME: '1' })
}

/** A fresh database file with the app's table (and the store's, made by opening a store once). */
async function database (): Promise<string> {
  const file = path.join(dir, `app-${n++}.db`)
  const store = sqliteSeenEvents({ path: file, table: 'seen' })
  store.database.exec('CREATE TABLE effects (fingerprint TEXT NOT NULL, pid INTEGER NOT NULL)')
  await store.close()
  return file
}

async function rowsPerEvent (file: string): Promise<number[]> {
  const store = sqliteSeenEvents({ path: file, table: 'seen' })
  try {
    return store.database.prepare('SELECT count(*) AS n FROM effects GROUP BY fingerprint ORDER BY fingerprint').all().map((r) => Number((r as { n: number }).n))
  } finally {
    await store.close()
  }
}

const wire = (k: number): Array<Record<string, unknown>> => Array.from({ length: 4 }, (_, i) => ({ event: 'hard-bounced', customer_handle: 'acct_1', timestamp: 1700000000 + k, request_id: `req-${k}-${i}`, email: `u${i}@example.com` }))

async function post (port: number, events: Array<Record<string, unknown>>, copy: number): Promise<number> {
  const signed = signWebhook({ privateKey: KEYS.privateKey, events: events as never, created: Math.floor(Date.now() / 1000) - (copy % 200), label: `sig_${copy}_${Date.now()}` })
  return await postSigned(port, signed)
}

async function untilAcknowledged (port: number, events: Array<Record<string, unknown>>): Promise<number[]> {
  const statuses: number[] = []
  for (let attempt = 0; attempt < 60; attempt++) {
    const status = await post(port, events, 10 + attempt)
    statuses.push(status)
    if (status === 200) return statuses
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  throw new Error(`not acknowledged: ${statuses.join(',')}`)
}

t.test('SIGKILL after the insert, before the commit; restarted on the same file: each row once', async (t) => {
  const file = await database()
  const events = wire(1)
  const doomed = await receiver(t, file, 'after-insert')
  t.equal(await post(doomed.port, events, 1), 0)
  t.equal(await doomed.exited, 'SIGKILL')
  t.same(await rowsPerEvent(file), [], 'nothing committed')
  const next = await receiver(t, file)
  const statuses = await untilAcknowledged(next.port, events)
  t.same(await rowsPerEvent(file), [1, 1, 1, 1], `each event's row exactly once (answers ${statuses.join(',')})`)
})

t.test('SIGKILL after the commit, before the 2xx; restarted on the same file: the retry skips every event', async (t) => {
  const file = await database()
  const events = wire(2)
  const doomed = await receiver(t, file, 'after-commit')
  t.equal(await post(doomed.port, events, 1), 0)
  t.equal(await doomed.exited, 'SIGKILL')
  t.same(await rowsPerEvent(file), [1, 1, 1, 1], 'committed with the done marks')
  const next = await receiver(t, file)
  t.same(await untilAcknowledged(next.port, events), [200])
  t.same(await rowsPerEvent(file), [1, 1, 1, 1], 'nothing written twice after the restart')
  // A clean restart (a deploy): a resend of the batch is still skipped.
  next.proc.kill('SIGTERM')
  await next.exited
  const after = await receiver(t, file)
  t.same(await untilAcknowledged(after.port, events), [200])
  t.same(await rowsPerEvent(file), [1, 1, 1, 1])
})
