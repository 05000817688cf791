// createWebhookEventWorker against a real redis-server: the router sees the typed event as it was
// enqueued, BullMQ (not MailChannels) retries a failing handler, a deferred event waits for the
// other claim, and with a seen-events store a job run again does not repeat a handled effect.
import t, { type Test } from 'tap'
import type { Queue, Worker } from 'bullmq'
import {
  bullmqEnqueue, createWebhookEventWorker, EventInProgressError,
  type WebhookEventJobContext, type WebhookEventJobData, type WebhookEventJobDispatcher, type WebhookEventJobResult, type WebhookEventWorkerOptions,
} from '../../src/bullmq/index.js'
import { WebhookEventRouter } from '../../src/dispatch/router.js'
import type { DispatchContext } from '../../src/dispatch/types.js'
import type { WebhookEvent } from '../../src/events/types.js'
import { noopLogger } from '../../src/logger.js'
import { eventFingerprint } from '../../src/replay/fingerprint.js'
import { MemoryClaimStore } from '../../src/replay/memory-claim-store.js'
import { startRedisServer, waitFor } from '../replay/helpers/redis-server.js'
import { memoryLogger, sampleEvents, testQueue } from './helpers.js'

const server = await startRedisServer()
t.teardown(() => server.close())
const context = { keyId: 'mckey', log: noopLogger }

function startWorker (t: Test, queue: Queue, router: WebhookEventJobDispatcher, options: Partial<WebhookEventWorkerOptions> = {}): Worker<WebhookEventJobData, WebhookEventJobResult> {
  const worker = createWebhookEventWorker(router, {
    queueName: queue.name,
    connection: { host: '127.0.0.1', port: server.port, retryStrategy: () => 50 },
    drainDelay: 1,
    ...options,
  })
  t.teardown(() => worker.close())
  return worker
}

async function settled (queue: Queue, count: number): Promise<boolean> {
  return await waitFor(async () => {
    const c = await queue.getJobCounts('completed', 'failed')
    return (c.completed ?? 0) + (c.failed ?? 0) >= count
  }, 15_000)
}

t.test('the router gets each event typed and equal to what was enqueued, with the job and keyId in its context', async (t) => {
  const { queue } = await testQueue(t, server)
  const seen: Array<{ event: WebhookEvent, context: DispatchContext<WebhookEventJobContext> }> = []
  const record = (event: WebhookEvent, ctx: DispatchContext<WebhookEventJobContext>): void => { seen.push({ event, context: ctx }) }
  const router = new WebhookEventRouter<WebhookEventJobContext>()
    .on('hard-bounced', (event, ctx) => {
      // Narrowed: a bounce's own fields are typed.
      const status: string | undefined = event.status
      t.equal(status, '5.1.1')
      record(event, ctx)
    })
    .on('click', (event, ctx) => { record(event, ctx); t.equal(typeof event.url, 'string') })
    .on('unknown', (event, ctx) => { record(event, ctx); t.equal(event.eventName, 'future-thing') })
  const log = memoryLogger()
  startWorker(t, queue, router, { log, concurrency: 4 })
  const events = sampleEvents(8)
  await bullmqEnqueue(queue)(events, context)
  t.ok(await settled(queue, 8), 'every job finished')

  t.equal(seen.length, 6, 'two bounces, two clicks, two unknown events handled; the deliveries had no handler')
  for (const { event, context: ctx } of seen) {
    const original = events.find((e) => eventFingerprint(e) === ctx.fingerprint)
    t.ok(original, 'the fingerprint the handler gets is the enqueued event\'s')
    t.same(event, original, 'the event is the enqueued one (JSON round trip)')
    t.equal(ctx.job.id, ctx.fingerprint, 'the job id is the fingerprint')
    t.equal(ctx.keyId, 'mckey')
    t.equal(ctx.log, log, 'handlers log to the worker\'s logger')
    t.type(ctx.signal, AbortSignal)
  }
  for (const event of events) {
    const job = await queue.getJob(eventFingerprint(event))
    t.equal(await job!.getState(), 'completed')
    t.equal(job!.returnvalue, event.event === 'delivered' ? 'unhandled' : 'handled')
  }
  t.same(log.lines, [], 'nothing to log')
})

t.test('a failing handler is retried by BullMQ with the job\'s backoff until it succeeds', async (t) => {
  const { queue } = await testQueue(t, server)
  let calls = 0
  const router = new WebhookEventRouter().on('*', () => { if (++calls < 3) throw new Error(`database down (${calls})`) })
  const log = memoryLogger()
  startWorker(t, queue, router, { log })
  const [event] = sampleEvents(1)
  await bullmqEnqueue(queue, { jobOptions: { attempts: 5, backoff: { type: 'fixed', delay: 50 } } })([event!], context)
  t.ok(await settled(queue, 1))
  const job = await queue.getJob(eventFingerprint(event!))
  t.equal(await job!.getState(), 'completed')
  t.equal(job!.returnvalue, 'handled')
  t.equal(calls, 3, 'two failures, then success')
  t.same(log.lines.map((l) => [l.level, (l.obj as { err?: string }).err]), [['warn', 'database down (1)'], ['warn', 'database down (2)']])
})

t.test('a handler that keeps failing: the job ends in the failed set with its reason, and a resend adds no new job', async (t) => {
  const { queue } = await testQueue(t, server)
  let calls = 0
  const router = new WebhookEventRouter().on('*', () => { calls++; throw new Error('always') })
  const log = memoryLogger()
  const worker = startWorker(t, queue, router, { log })
  const failures: string[] = []
  worker.on('failed', (_job, err) => { failures.push(err.name) })
  const events = sampleEvents(1)
  const enqueue = bullmqEnqueue(queue, { jobOptions: { attempts: 2, backoff: { type: 'fixed', delay: 20 } } })
  await enqueue(events, context)
  t.ok(await settled(queue, 1))
  const job = await queue.getJob(eventFingerprint(events[0]!))
  t.equal(await job!.getState(), 'failed')
  t.equal(job!.failedReason, 'always')
  t.equal(calls, 2)
  t.same(log.lines.map((l) => l.level), ['warn', 'error'], 'the last attempt is logged as an error')
  await enqueue(events, context)
  t.same(await queue.getJobCounts('waiting', 'failed'), { waiting: 0, failed: 1 }, 'the failed job stays, to be retried by hand')
})

t.test('with a seen-events store, a job run again after its event was handled skips it', async (t) => {
  const { queue } = await testQueue(t, server)
  let calls = 0
  const router = new WebhookEventRouter<WebhookEventJobContext>({ seenEvents: new MemoryClaimStore() }).on('*', () => { calls++ })
  const events = sampleEvents(2)
  // An earlier run handled the first event, and its worker died before BullMQ recorded the job as completed.
  const earlier = await router.dispatch([events[0]!], { job: undefined as never, keyId: 'mckey' })
  t.equal(earlier.handled, 1)
  startWorker(t, queue, router)
  await bullmqEnqueue(queue)(events, context)
  t.ok(await settled(queue, 2))
  t.equal(calls, 2, 'the first event\'s effect happened once, the second event\'s once')
  t.equal((await queue.getJob(eventFingerprint(events[0]!)))!.returnvalue, 'skipped')
  t.equal((await queue.getJob(eventFingerprint(events[1]!)))!.returnvalue, 'handled')
})

t.test('an event another dispatch holds is deferred: the job is retried and handled once that claim is gone', async (t) => {
  const { queue } = await testQueue(t, server)
  const store = new MemoryClaimStore()
  let calls = 0
  const router = new WebhookEventRouter({ seenEvents: store }).on('*', () => { calls++ })
  const worker = startWorker(t, queue, router)
  const failures: string[] = []
  worker.on('failed', (_job, err) => { failures.push(err.name) })
  const [event] = sampleEvents(1)
  // Another instance claimed the event and died: its claim lives one second.
  const [claim] = await store.claim([eventFingerprint(event!)], 1)
  t.type(claim, 'object')
  await bullmqEnqueue(queue, { jobOptions: { attempts: 20, backoff: { type: 'fixed', delay: 200 } } })([event!], context)
  t.ok(await settled(queue, 1))
  const job = await queue.getJob(eventFingerprint(event!))
  t.equal(job!.returnvalue, 'handled')
  t.equal(calls, 1)
  t.ok(failures.length >= 1, 'at least one attempt was deferred')
  t.ok(failures.every((name) => name === new EventInProgressError('x').name), 'as EventInProgressError')
})

t.test('a job that does not hold a webhook event fails at once, without retries', async (t) => {
  const { queue } = await testQueue(t, server)
  let calls = 0
  startWorker(t, queue, new WebhookEventRouter().on('*', () => { calls++ }))
  const bad = await queue.add('x', { foo: 1 } as never, { attempts: 5, backoff: { type: 'fixed', delay: 10 } })
  const [event] = sampleEvents(1)
  const noKey = await queue.add('y', { event: event! } as never, { attempts: 5 })
  const badType = await queue.add('z', { event: { ...event!, event: 'nope' }, keyId: 'k' } as never, { attempts: 5 })
  t.ok(await settled(queue, 3))
  for (const id of [bad.id, noKey.id, badType.id]) {
    const job = await queue.getJob(id!)
    t.equal(await job!.getState(), 'failed')
    t.equal(job!.attemptsMade, 1, 'one attempt only')
    t.match(job!.failedReason, /does not hold a webhook event/)
  }
  t.equal(calls, 0)
})

t.test('options are checked at creation, naming the option', async (t) => {
  const router = new WebhookEventRouter()
  const connection = { host: '127.0.0.1', port: server.port }
  t.throws(() => createWebhookEventWorker({} as never, { connection }), { name: 'TypeError', message: /router must be a WebhookEventRouter/ })
  t.throws(() => createWebhookEventWorker(router, undefined as never), { name: 'TypeError', message: /connection/ })
  t.throws(() => createWebhookEventWorker(router, {} as never), { name: 'TypeError', message: /connection is required/ })
  t.throws(() => createWebhookEventWorker(router, { connection, queueName: 'a:b' }), { name: 'TypeError', message: /queueName must be/ })
  t.throws(() => createWebhookEventWorker(router, { connection, prefix: '' }), { name: 'TypeError', message: /prefix must be/ })
  t.throws(() => createWebhookEventWorker(router, { connection, log: {} as never }), { name: 'TypeError', message: /log must be a logger/ })
})
