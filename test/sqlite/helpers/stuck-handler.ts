// A process whose transactional SQLite handler never returns (test/sqlite/deadline.test.ts): it
// dispatches one event on the file given in SQLITE_PATH, prints `stuck` once the handler holds the
// event's transaction (and so the file's write lock), then the event's status and error name once
// HANDLER_TIMEOUT ms passed, and stays alive (the handler's promise still pending) until killed.
import { WebhookEventRouter } from '../../../src/index.js'
import { sqliteSeenEvents } from '../../../src/sqlite/index.js'
import { ev } from '../../dispatch/helpers/events.js'

const { SQLITE_PATH, HANDLER_TIMEOUT = '1000' } = process.env
const store = sqliteSeenEvents({ path: SQLITE_PATH!, transactional: true, handlerTimeout: Number(HANDLER_TIMEOUT) })
const router = new WebhookEventRouter({ seenEvents: store })
  .on('hard-bounced', async (_event, { db, fingerprint }) => {
    db.prepare('INSERT INTO effects (fingerprint, pid) VALUES (?, ?)').run(fingerprint, process.pid)
    process.stdout.write('stuck\n')
    await new Promise(() => {})
  })
const report = await router.dispatch([ev('hard-bounced', 1)])
const outcome = report.outcomes[0]!
process.stdout.write(`${outcome.status} ${outcome.status === 'failed' ? (outcome.error as Error).name : ''}\n`)
setInterval(() => {}, 60_000)
