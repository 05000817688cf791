// Compile-time test of the transactional typing (`npx tsc -p tsconfig.json` checks it; not a
// runtime test file). Every `@ts-expect-error` line must fail to compile.
import pg from 'pg'
import { MemoryClaimStore, WebhookEventRouter } from '../../src/index.js'
import { postgresSeenEvents } from '../../src/postgres/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

export function typing (pool: pg.Pool): void {
  new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool, transactional: true }) })
    .on('hard-bounced', async (event, { db }) => {
      assertType<Equal<typeof db, pg.PoolClient>>(true)
      await db.query('INSERT INTO suppressions (email) VALUES ($1)', [event.email])
    })
  new WebhookEventRouter({ seenEvents: postgresSeenEvents({ pool }) })
    // @ts-expect-error no transaction without transactional: true
    .on('hard-bounced', async (_event, { db }) => { void db })
  new WebhookEventRouter({ seenEvents: new MemoryClaimStore() })
    // @ts-expect-error the memory store has no database
    .on('delivered', (_event, { db }) => { void db })
  // With your own context type, name the transaction type too.
  new WebhookEventRouter<{ keyId: string }, pg.PoolClient>({ seenEvents: postgresSeenEvents({ pool, transactional: true }) })
    .on('delivered', async (_event, { db, keyId }) => { await db.query('SELECT $1', [keyId]) })
}
