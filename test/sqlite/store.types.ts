// Compile-time test of the SQLite store's typing (`npx tsc -p tsconfig.json` checks it; not a
// runtime test file): your own better-sqlite3 database is what transactional handlers get as `db`.
import Database from 'better-sqlite3'
import { WebhookEventRouter } from '../../src/index.js'
import { sqliteSeenEvents } from '../../src/sqlite/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

export function typing (): void {
  const database = new Database('app.db')
  new WebhookEventRouter({ seenEvents: sqliteSeenEvents({ database, transactional: true }) })
    .on('hard-bounced', (event, { db }) => {
      assertType<Equal<typeof db, Database.Database>>(true)
      db.prepare('INSERT INTO suppressions (email) VALUES (?)').run(event.recipients?.[0] ?? '')
    })
  new WebhookEventRouter({ seenEvents: sqliteSeenEvents({ path: 'seen.db' }) })
    // @ts-expect-error no transaction without transactional: true
    .on('delivered', (_event, { db }) => { void db })
}
