// A receiver process for the crash tests: a Node HTTP server around the fetch receiver
// (`createWebhookHandler({ handlers: router })`), its router on the PostgreSQL store (or, with
// SQLITE_PATH, the SQLite store on that file) with transactional handlers that insert one row
// per event into the app's own table. Prints
// `listening <port>` once up. CRASH_AT makes it SIGKILL itself:
//   after-insert  in a handler, after its insert, before the transaction commits;
//   after-commit  once the dispatch committed, before the 2xx is sent.
// On PostgreSQL, HANG_TYPE makes handlers of that event type never return after their insert,
// HANDLER_TIMEOUT sets the store's handlerTimeout (ms) and POOL_MAX the pool's size; CRASH_TYPE
// makes handlers of that event type SIGKILL the process after their insert (the delivery's other
// events already marked in its open transaction), and CONCURRENCY sets the router's (4 by default).
// FAIL_TYPE makes handlers of that event type throw after their insert; with CRASH_AT=rerun a
// handler run a second time for the same event in this process (run again after another event of
// its transaction failed) SIGKILLs the process after its insert.
import pg from 'pg'
import { WebhookEventRouter } from '../../../src/index.js'
import { postgresSeenEvents } from '../../../src/postgres/index.js'
import { sqliteSeenEvents } from '../../../src/sqlite/index.js'
import { createWebhookHandler } from '../../../src/web/index.js'
import { serveFetchInChild } from '../../helpers/fetch-child-server.js'

const { DATABASE_URL, SQLITE_PATH, PUBLIC_KEY, CRASH_AT = '', EFFECTS = 'effects', SEEN = 'seen', CLAIM_LIFETIME = '2', HANG_TYPE = '', HANDLER_TIMEOUT, POOL_MAX = '10', CRASH_TYPE = '', CONCURRENCY = '4', FAIL_TYPE = '' } = process.env
const runs = new Set<string>()
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: Number(POOL_MAX), connectionTimeoutMillis: 2000 })
let crashArmed = CRASH_AT !== ''
const crash = (): void => { process.kill(process.pid, 'SIGKILL') }

const lifetime = { claimLifetime: Number(CLAIM_LIFETIME), concurrency: Number(CONCURRENCY) }
const afterInsert = async (): Promise<void> => {
  if (crashArmed && CRASH_AT === 'after-insert') crash()
  // A little time inside the transaction, so concurrent copies overlap.
  await new Promise((resolve) => setTimeout(resolve, 5))
}
const router = SQLITE_PATH !== undefined
  ? new WebhookEventRouter({ seenEvents: sqliteSeenEvents({ path: SQLITE_PATH, table: SEEN, transactional: true }), ...lifetime })
    .on('*', async (_event, { db, fingerprint }) => {
      db.prepare(`INSERT INTO ${EFFECTS} (fingerprint, pid) VALUES (?, ?)`).run(fingerprint, process.pid)
      await afterInsert()
    })
  : new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool, table: SEEN, transactional: true, ...(HANDLER_TIMEOUT !== undefined ? { handlerTimeout: Number(HANDLER_TIMEOUT) } : {}) }), ...lifetime })
    .on('*', async (event, { db, fingerprint }) => {
      await db.query(`INSERT INTO ${EFFECTS} (fingerprint, pid) VALUES ($1, $2)`, [fingerprint, process.pid])
      if (event.event === HANG_TYPE) await new Promise(() => {})
      if (event.event === CRASH_TYPE) crash()
      if (event.event === FAIL_TYPE) throw new Error('this event type fails')
      if (crashArmed && CRASH_AT === 'rerun' && runs.has(fingerprint)) crash()
      runs.add(fingerprint)
      await afterInsert()
    })

const handler = createWebhookHandler({
  publicKey: PUBLIC_KEY!,
  customerHandles: ['acct_1'],
  handlers: {
    async dispatch (events, context) {
      const report = await (router as WebhookEventRouter<object, unknown>).dispatch(events, context)
      if (crashArmed && CRASH_AT === 'after-commit' && report.handled > 0) crash()
      return report
    },
  },
})

const server = serveFetchInChild(handler)
process.on('SIGTERM', () => { crashArmed = false; server.close(); void pool.end().then(() => process.exit(0)) })
