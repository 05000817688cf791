// The BullMQ worker and dead letters, on a real redis-server: a job that used up its
// attempts becomes the same dead letter as the router's (source 'bullmq'), completes 'parked'
// instead of staying in the failed set, and the router retries it; a router with deadLetters
// parks by itself after `after` job attempts.
import t, { type Test } from 'tap'
import type { Queue } from 'bullmq'
import { bullmqEnqueue, createWebhookEventWorker, type WebhookEventJobDispatcher, type WebhookEventWorkerOptions } from '../../src/bullmq/index.js'
import { RedisDeadLetterStore, RedisClaimStore, WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { noopLogger } from '../../src/logger.js'
import { startRedisServer, waitFor } from '../replay/helpers/redis-server.js'
import { memoryLogger, sampleEvents, testQueue } from './helpers.js'

// The longest a condition may take to hold: waitFor returns as soon as it holds, so only a
// failing run waits this long; a busy machine (four test files on two cores) must not fail it.
const WAIT_MS = 120_000

// Semantics, not failure handling: generous timeouts, so a loaded machine cannot fail a call.
const GENEROUS = { commandTimeout: 5000, maxRetriesPerRequest: 1 }

const server = await startRedisServer()
t.teardown(() => server.close())
const context = { keyId: 'mckey', log: noopLogger }
const client = await server.client(GENEROUS)
let n = 0

function startWorker (t: Test, queue: Queue, router: WebhookEventJobDispatcher, options: Partial<WebhookEventWorkerOptions> = {}): void {
  const worker = createWebhookEventWorker(router, { queueName: queue.name, connection: { host: '127.0.0.1', port: server.port, retryStrategy: () => 50 }, drainDelay: 1, ...options })
  t.teardown(() => worker.close())
}

t.test('deadLetters must be a dead-letter store', async (t) => {
  t.throws(() => createWebhookEventWorker(new WebhookEventRouter(), { connection: { host: '127.0.0.1', port: server.port }, deadLetters: {} as never, autorun: false }), /deadLetters must be a DeadLetterStore/)
})

t.test('a job that used up its attempts is parked (source bullmq), completes, and the router retries it', async (t) => {
  const { queue } = await testQueue(t, server)
  const store = new RedisDeadLetterStore(client, { prefix: `{bq-${n++}}:`, timeout: 10_000 })
  let broken = true
  let runs = 0
  const seenEvents = new RedisClaimStore(client, { prefix: `bq-seen-${n}:`, timeout: 10_000 })
  const handler = (): void => { runs++; if (broken) throw new Error('suppression list is read-only') }
  // The worker's router counts nothing itself: the worker parks what used up its job attempts.
  const workerRouter = new WebhookEventRouter({ seenEvents }).on('hard-bounced', handler)
  // The application's router with the same store, for retries.
  const router = new WebhookEventRouter({ seenEvents, deadLetters: { store } }).on('hard-bounced', handler)
  const log = memoryLogger()
  startWorker(t, queue, workerRouter, { deadLetters: store, log })
  const event = sampleEvents(1).map((e) => ({ ...e, event: 'hard-bounced' as const }))[0]!
  const fp = eventFingerprint(event)
  await bullmqEnqueue(queue, { jobOptions: { attempts: 3, backoff: { type: 'fixed', delay: 20 } } })([event], context)
  t.ok(await waitFor(async () => (await queue.getJobCounts('completed')).completed === 1, WAIT_MS), 'the job completes')
  const job = await queue.getJob(fp)
  t.equal(job!.returnvalue, 'parked')
  t.equal((await queue.getJobCounts('failed')).failed, 0, 'not left in the failed set')
  const letter = await store.get(fp)
  t.equal(letter?.source, 'bullmq')
  t.equal(letter?.attempts, 3, 'its three job attempts')
  t.same(letter?.error, { name: 'Error', message: 'suppression list is read-only' })
  t.ok(log.lines.some((l) => l.level === 'warn' && /parked as a dead letter/.test(l.msg ?? '')))
  broken = false
  t.same(await router.retryDeadLetter(fp), { status: 'handled', fingerprint: fp })
  t.equal(runs, 4)
  t.equal(await store.get(fp), undefined)
})

t.test('a router with deadLetters parks after `after` job attempts; the job completes parked', async (t) => {
  const { queue } = await testQueue(t, server)
  const store = new RedisDeadLetterStore(client, { prefix: `{bq-${n++}}:`, timeout: 10_000 })
  const router = new WebhookEventRouter({ seenEvents: new RedisClaimStore(client, { prefix: `bq-seen-${n}:`, timeout: 10_000 }), deadLetters: { store, after: 2 } })
    .on('*', () => { throw new Error('poison') })
  startWorker(t, queue, router)
  const event = sampleEvents(1)[0]!
  await bullmqEnqueue(queue, { jobOptions: { attempts: 10, backoff: { type: 'fixed', delay: 20 } } })([event], context)
  t.ok(await waitFor(async () => (await queue.getJobCounts('completed')).completed === 1, WAIT_MS))
  const job = await queue.getJob(eventFingerprint(event))
  t.equal(job!.returnvalue, 'parked')
  t.equal(job!.attemptsMade, 2, 'two attempts, not ten')
  t.equal((await store.get(eventFingerprint(event)))?.source, 'router')
})
