// The module's other hand-offs: BullMQ (enqueue: the route answers once the queue has the events,
// a worker in the same Nest app runs the @OnWebhookEvent handlers of the module's router) on a real
// redis-server, and the SQLite seen-events store, transactional, with context.db.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Controller, Inject, Injectable, Post, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common'
import type { Worker } from 'bullmq'
import t from 'tap'
import { MemoryClaimStore } from '../../src/index.js'
import { bullmqEnqueue, createWebhookEventWorker } from '../../src/bullmq/index.js'
import { MailChannelsWebhook, MailChannelsWebhooksModule, MailChannelsWebhooksReceiver, OnWebhookEvent, type DispatchContext, type EventHandlerContext, type WebhookEvent } from '../../src/nestjs/index.js'
import { sqliteSeenEvents, type SqliteDatabaseLike } from '../../src/sqlite/index.js'
import { startRedisServer, waitFor } from '../replay/helpers/redis-server.js'
import { openDatabase } from '../sqlite/helpers/driver.js'
import { testQueue } from '../bullmq/helpers.js'
import { delivery, event, HANDLE, KEYS } from '../fastify/helpers/fixtures.js'
import { PLATFORMS, post, startApp } from './helpers/app.js'

// The longest a condition may take to hold: waitFor returns as soon as it holds, so only a
// failing run waits this long; a busy machine (four test files on two cores) must not fail it.
const WAIT_MS = 120_000

@Controller()
class Hooks {
  @Post('webhooks/mailchannels')
  @MailChannelsWebhook()
  receive (): void {}
}

/** What the handlers did, by event fingerprint. */
const HANDLED = Symbol('handled')

@Injectable()
class Handlers {
  constructor (@Inject(HANDLED) private readonly handled: Map<string, number>) {}
  @OnWebhookEvent('*')
  count (_event: WebhookEvent, { fingerprint }: DispatchContext<EventHandlerContext>): void {
    this.handled.set(fingerprint, (this.handled.get(fingerprint) ?? 0) + 1)
  }
}

const events = Array.from({ length: 6 }, (_, i) => event({ request_id: `q-${i}` }))

t.test('BullMQ: the route answers { queued } once the queue has the events; a worker of the same app runs the handlers, each event once', async (t) => {
  const server = await startRedisServer()
  t.teardown(() => server.close())
  for (const platform of PLATFORMS) {
    await t.test(platform, async (t) => {
      const { queue } = await testQueue(t, server)
      /** The app's worker: the module's router over the queue's jobs. */
      @Injectable()
      class EventWorker implements OnApplicationBootstrap, OnApplicationShutdown {
        worker: Worker | undefined
        constructor (@Inject(MailChannelsWebhooksReceiver) private readonly receiver: MailChannelsWebhooksReceiver) {}
        onApplicationBootstrap (): void {
          this.worker = createWebhookEventWorker(this.receiver.router, { queueName: queue.name, connection: { host: '127.0.0.1', port: server.port, retryStrategy: () => 50 }, drainDelay: 1 })
        }
        async onApplicationShutdown (): Promise<void> { await this.worker?.close() }
      }
      const handled = new Map<string, number>()
      const { url, app } = await startApp(t, platform, {
        imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], enqueue: bullmqEnqueue(queue), seenEvents: new MemoryClaimStore() })],
        controllers: [Hooks],
        providers: [Handlers, EventWorker, { provide: HANDLED, useValue: handled }],
      })
      t.equal(app.get(MailChannelsWebhooksReceiver).answers, 'enqueue')
      let created = Math.floor(Date.now() / 1000) - 30
      for (let i = 0; i < 3; i++) {
        // The same events, re-signed (a retry or a resend of MailChannels'): one job per event all the same.
        const d = delivery({ events, created: created++ })
        const a = await post(`${url}/webhooks/mailchannels`, d.headers, d.body)
        t.equal(a.status, 200, a.text)
        t.strictSame(a.json(), { queued: events.length })
      }
      t.ok(await waitFor(async () => handled.size === events.length, WAIT_MS), `the worker handled every event (${handled.size})`)
      t.ok(await waitFor(async () => (await queue.getJobCounts('completed')).completed === events.length, WAIT_MS), 'one job per event, completed')
      t.strictSame([...new Set(handled.values())], [1], 'each event once')
    })
  }
})

t.test('SQLite, transactional: the handlers write with context.db; each event once across resends', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcwh-nest-sqlite-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'app.db')
  const store = sqliteSeenEvents({ path: file, transactional: true })
  t.teardown(() => store.close())

  @Injectable()
  class Recorder {
    @OnWebhookEvent('delivered')
    record (e: WebhookEvent, { db, fingerprint }: DispatchContext<EventHandlerContext> & { db: SqliteDatabaseLike }): void {
      db.exec('CREATE TABLE IF NOT EXISTS delivered (fingerprint TEXT NOT NULL, request_id TEXT NOT NULL)')
      db.prepare('INSERT INTO delivered (fingerprint, request_id) VALUES (?, ?)').run(fingerprint, e.requestId ?? '')
    }
  }
  const { url } = await startApp(t, 'fastify', {
    imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], seenEvents: store })],
    controllers: [Hooks],
    providers: [Recorder],
  })
  let created = Math.floor(Date.now() / 1000) - 30
  const first = delivery({ events, created: created++ })
  const a = await post(`${url}/webhooks/mailchannels`, first.headers, first.body)
  t.strictSame(a.json(), { handled: events.length, skipped: 0, unhandled: 0 })
  const again = delivery({ events, created: created++ })
  const b = await post(`${url}/webhooks/mailchannels`, again.headers, again.body)
  t.strictSame(b.json(), { handled: 0, skipped: events.length, unhandled: 0 }, 'the resend finds every event handled')
  const db = openDatabase(file)
  t.teardown(() => db.close())
  t.match(db.prepare('SELECT count(*) AS n, count(DISTINCT fingerprint) AS d FROM delivered').all(), [{ n: events.length, d: events.length }], 'one row per event')
})
