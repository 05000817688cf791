// Handlers as providers: one @Injectable() class with an injected dependency and @OnWebhookEvent
// methods, discovered at start-up, under exactly once through the module's seenEvents store, on a
// real redis-server and a real PostgreSQL (transactional: the handler writes with context.db).
// Two apps (one on Express, one on Fastify) share the store, as two instances of a service do.
import { Controller, Inject, Injectable, Post } from '@nestjs/common'
import type { Redis } from 'ioredis'
import type pg from 'pg'
import t, { type Test } from 'tap'
import { RedisClaimStore, type ClaimStore } from '../../src/index.js'
import { MailChannelsWebhook, MailChannelsWebhooksModule, MailChannelsWebhooksReceiver, OnWebhookEvent, type DispatchContext, type HardBouncedEvent, type EventHandlerContext } from '../../src/nestjs/index.js'
import { postgresSeenEvents } from '../../src/postgres/index.js'
import { startPostgres } from '../helpers/postgres.js'
import { startRedisServer } from '../replay/helpers/redis-server.js'
import { delivery, event, HANDLE, KEYS } from '../fastify/helpers/fixtures.js'
import { post, startApp, type Platform } from './helpers/app.js'

/** The handler class's dependency: where a suppression is written. */
interface Suppressions {
  add (event: HardBouncedEvent, context: DispatchContext<EventHandlerContext> & { db?: unknown }): Promise<void>
}
const SUPPRESSIONS = Symbol('Suppressions')

@Injectable()
class BounceHandlers {
  opened = 0
  constructor (@Inject(SUPPRESSIONS) private readonly suppressions: Suppressions) {}

  @OnWebhookEvent('hard-bounced')
  async suppress (event: HardBouncedEvent, context: DispatchContext<EventHandlerContext> & { db?: unknown }): Promise<void> {
    await this.suppressions.add(event, context)
  }

  @OnWebhookEvent(['open', 'click'])
  count (): void { this.opened++ }
}

@Controller()
class Hooks {
  // Answered by the module: the events go to the @OnWebhookEvent handlers.
  @Post('webhooks/mailchannels')
  @MailChannelsWebhook()
  receive (): void {}
}

const EVENTS = Array.from({ length: 12 }, (_, i) => event({ event: 'hard-bounced', email: `b${i}@example.com`, request_id: `rb-${i}` } as never))
let created = Math.floor(Date.now() / 1000) - 60
/** The same events, signed anew each time (a retry or a resend of MailChannels' carries a new signature). */
const resigned = () => delivery({ events: [...EVENTS, event({ event: 'open', request_id: 'ro' })], created: created++ })

async function twoApps (t: Test, seenEvents: () => ClaimStore, suppressions: Suppressions): Promise<Array<{ url: string, handlers: BounceHandlers }>> {
  return await Promise.all((['express', 'fastify'] as Platform[]).map(async (platform) => {
    const { url, app } = await startApp(t, platform, {
      imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], seenEvents: seenEvents() })],
      controllers: [Hooks],
      providers: [BounceHandlers, { provide: SUPPRESSIONS, useValue: suppressions }],
    })
    t.equal(app.get(MailChannelsWebhooksReceiver).answers, 'handlers')
    return { url: `${url}/webhooks/mailchannels`, handlers: app.get(BounceHandlers) }
  }))
}

/** Concurrent deliveries of the same events to both apps, then retries until one is acknowledged. */
async function deliverUntilAcknowledged (t: Test, apps: Array<{ url: string }>): Promise<void> {
  const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => {
    const d = resigned()
    return post(apps[i % 2]!.url, d.headers, d.body)
  }))
  for (const a of answers) t.ok([200, 500, 503].includes(a.status), `answered ${a.status} ${a.text}`)
  t.ok(answers.some((a) => a.status !== 200), 'a failed handler kept some delivery from being acknowledged')
  let last = answers.at(-1)!
  for (let i = 0; i < 10 && !(last.status === 200 && last.json().skipped === EVENTS.length + 1); i++) {
    const d = resigned()
    last = await post(apps[i % 2]!.url, d.headers, d.body)
  }
  t.equal(last.status, 200, last.text)
  t.strictSame(last.json(), { handled: 0, skipped: EVENTS.length + 1, unhandled: 0 }, 'a later resend finds every event handled')
}

t.test('Redis: one handler class with an injected dependency, each event\'s effect once across two apps', async (t) => {
  const redis = await startRedisServer()
  t.teardown(() => redis.close())
  // A patient client: the store's answers must arrive for exactly once (a store that cannot answer
  // makes the receiver answer 503, and a done mark lost to a timeout lets the retry run the handler
  // again: docs/events.md). The fail-fast 250 ms timeout would make that depend on the machine's load.
  const client: Redis = await redis.client({ commandTimeout: 10_000 })
  let failures = 2
  const suppressions: Suppressions = {
    async add (event, { fingerprint, keyId }) {
      t.equal(keyId, 'mckey', 'context.keyId is the receiver\'s')
      if (failures > 0) { failures--; throw new Error('the suppression list is down') }
      await client.incr(`suppressed:${fingerprint}:${event.email}`)
    },
  }
  const apps = await twoApps(t, () => new RedisClaimStore(client), suppressions)
  await deliverUntilAcknowledged(t, apps)
  const keys = await client.keys('suppressed:*')
  t.equal(keys.length, EVENTS.length, 'every hard bounce suppressed')
  t.strictSame([...new Set(await client.mget(keys))], ['1'], 'each exactly once')
  t.equal(apps[0]!.handlers.opened + apps[1]!.handlers.opened, 1, 'the open event handled once, by one of the apps')
})

t.test('PostgreSQL, transactional: the handler writes with context.db; a failure after the insert rolls it back', async (t) => {
  const server = await startPostgres()
  t.teardown(() => server.close())
  const pool = server.pool()
  await pool.query('CREATE TABLE suppressions (fingerprint text NOT NULL, email text NOT NULL)')
  let failures = 2
  const suppressions: Suppressions = {
    async add (event, { db, fingerprint }) {
      await (db as pg.PoolClient).query('INSERT INTO suppressions (fingerprint, email) VALUES ($1, $2)', [fingerprint, event.email])
      if (failures > 0) { failures--; throw new Error('failed after the insert') }
    },
  }
  const apps = await twoApps(t, () => postgresSeenEvents({ pool: server.pool(), table: 'seen_events', transactional: true }), suppressions)
  await deliverUntilAcknowledged(t, apps)
  const { rows } = await pool.query('SELECT email, count(*)::int AS n FROM suppressions GROUP BY email')
  t.equal(rows.length, EVENTS.length, 'every hard bounce suppressed')
  t.strictSame([...new Set(rows.map((r) => r.n as number))], [1], 'each row exactly once: the failed inserts were rolled back')
})
