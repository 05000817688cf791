// The router's dead letters on a SQLite file, beside the seen-events store (plain and
// transactional): a poison event is parked after `after` failures and completed, the rest of its
// delivery committed once; it survives reopening the file; a retry runs it again once and, with
// the transactional store, writes its effect and deletes the dead letter in one transaction.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { sqliteDeadLetters, sqliteSeenEvents, type SqliteDatabaseLike } from '../../src/sqlite/index.js'
import { ev } from '../dispatch/helpers/events.js'

const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-sqlite-dl-'))
t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
let n = 0

t.test('plain store: parked after 2 failures, kept across a reopen, retried once', async (t) => {
  const file = path.join(dir, `plain-${n++}.sqlite`)
  let broken = true
  const effects: string[] = []
  const open = (): { router: WebhookEventRouter, close: () => Promise<void> } => {
    const seenEvents = sqliteSeenEvents({ path: file })
    const store = sqliteDeadLetters({ path: file })
    const router = new WebhookEventRouter({ seenEvents, deadLetters: { store, after: 2 } })
      .on('*', (event, { fingerprint }) => {
        if (event.event === 'dropped' && broken) throw new Error('bad row')
        effects.push(fingerprint)
      })
    return { router, close: async () => { store.close(); await seenEvents.close() } }
  }
  const events = [ev('delivered', 1), ev('dropped', 2), ev('open', 3)]
  let app = open()
  t.equal((await app.router.dispatch(events)).failed, 1)
  await app.close()
  app = open()
  const second = await app.router.dispatch(events)
  t.equal(second.parked, 1, 'the count survived the restart: parked on the second failure')
  t.equal(second.ok, true)
  t.equal(effects.length, 2, 'the other two once')
  const fp = eventFingerprint(events[1]!)
  t.equal((await app.router.deadLetters!.get(fp))?.attempts, 2)
  broken = false
  t.same(await app.router.retryDeadLetter(fp), { status: 'handled', fingerprint: fp })
  t.equal(effects.filter((e) => e === fp).length, 1)
  t.equal((await app.router.dispatch(events)).skipped, 3)
  await app.close()
})

t.test('transactional store: the retry\'s effect and the dead letter\'s deletion commit together', async (t) => {
  const file = path.join(dir, `tx-${n++}.sqlite`)
  let broken = true
  const seenEvents = sqliteSeenEvents({ path: file, transactional: true })
  const store = sqliteDeadLetters({ path: file })
  t.teardown(async () => { store.close(); await seenEvents.close() })
  seenEvents.database.exec('CREATE TABLE IF NOT EXISTS effects (fingerprint TEXT NOT NULL)')
  const router = new WebhookEventRouter<object, SqliteDatabaseLike>({ seenEvents, deadLetters: { store, after: 1 } })
    .on('hard-bounced', (_event, { db, fingerprint }) => {
      db.prepare('INSERT INTO effects (fingerprint) VALUES (?)').run(fingerprint)
      if (broken) throw new Error('constraint failed')
    })
  const event = ev('hard-bounced', 9)
  const fp = eventFingerprint(event)
  const report = await router.dispatch([event])
  t.equal(report.parked, 1)
  const count = (): number => Number((seenEvents.database.prepare('SELECT count(*) AS n FROM effects').all()[0] as { n: number }).n)
  t.equal(count(), 0, 'the failed attempt\'s insert was rolled back')
  broken = false
  // The deletion after the commit fails: the one in the handlers' transaction did it already.
  store.resolveRetry = async () => { throw new Error('resolveRetry must not be needed') }
  t.same(await router.retryDeadLetter(fp), { status: 'handled', fingerprint: fp })
  t.equal(count(), 1)
  t.equal(await store.get(fp), undefined, 'deleted in the transaction of its effect')
})
