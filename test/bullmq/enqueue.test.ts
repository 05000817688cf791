// bullmqEnqueue against a real redis-server: one job per event keyed by its fingerprint, no second
// job for a resend, and a bounded rejection (never a hang, never an unhandled rejection) while
// Redis is down or frozen; through the web handler's `enqueue` option as a receiver uses it.
import t from 'tap'
import { Queue } from 'bullmq'
import { bullmqEnqueue, createWebhookEventQueue, DEFAULT_JOB_OPTIONS, DEFAULT_PREFIX, DEFAULT_QUEUE_NAME, EnqueueTimeoutError } from '../../src/bullmq/index.js'
import type { EnqueueContext } from '../../src/dispatch/types.js'
import { noopLogger } from '../../src/logger.js'
import { eventFingerprint } from '../../src/replay/fingerprint.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { createWebhookHandler } from '../../src/web/index.js'
import { within } from '../helpers/wait.js'
import { startRedisServer, waitFor } from '../replay/helpers/redis-server.js'
import { CUSTOMER, memoryLogger, queueName, sampleEvents, testQueue } from './helpers.js'

const server = await startRedisServer()
t.teardown(() => server.close())
const context: EnqueueContext = { keyId: 'mckey', log: noopLogger }
const THREE_DAYS = 3 * 24 * 3600

t.test('one job per event: id = eventFingerprint, name = event type, data = { event, keyId }, default job options', async (t) => {
  const { queue } = await testQueue(t, server)
  const events = sampleEvents(8)
  await bullmqEnqueue(queue)(events, context)

  const counts = await queue.getJobCounts('waiting')
  t.equal(counts.waiting, 8)
  for (const event of events) {
    const fp = eventFingerprint(event)
    t.match(fp, /^[A-Za-z0-9_-]{43}$/, 'a base64url fingerprint is a valid BullMQ custom id')
    const job = await queue.getJob(fp)
    t.ok(job, `job ${fp} exists`)
    t.equal(job!.name, event.event)
    t.same(job!.data, { event, keyId: 'mckey' }, 'the event comes back from JSON as it went in')
    t.equal(eventFingerprint(job!.data.event), fp, 'and with the same fingerprint')
    t.equal(job!.opts.attempts, DEFAULT_JOB_OPTIONS.attempts)
    t.same(job!.opts.backoff, { type: 'exponential', delay: 2000 })
    t.same(job!.opts.removeOnComplete, { age: THREE_DAYS }, 'completed jobs are kept long enough to recognise a resend')
    t.equal(job!.opts.removeOnFail, false, 'failed jobs are kept')
  }
})

t.test('a resend, a retry and concurrent copies of a delivery create no second job; identical events in one delivery make one job', async (t) => {
  const { queue } = await testQueue(t, server)
  const enqueue = bullmqEnqueue(queue)
  const events = sampleEvents(5)
  await enqueue(events, context)
  const first = await queue.getJob(eventFingerprint(events[0]!))
  // A resend carries equal events (new objects, re-parsed from a re-signed body).
  const resent = events.map((e) => JSON.parse(JSON.stringify(e)))
  await enqueue(resent, { ...context, keyId: 'other-key' })
  await Promise.all(Array.from({ length: 10 }, async () => await enqueue(resent, context)))
  await enqueue([events[1]!, events[1]!, events[2]!], context)

  const counts = await queue.getJobCounts('waiting', 'active', 'completed', 'failed', 'delayed')
  t.same(counts, { waiting: 5, active: 0, completed: 0, failed: 0, delayed: 0 })
  const again = await queue.getJob(eventFingerprint(events[0]!))
  t.equal(again!.timestamp, first!.timestamp, 'the job is the first one, untouched')
  t.equal(again!.data.keyId, 'mckey', 'its data is the first delivery\'s')
})

t.test('job options: the queue\'s defaultJobOptions over the defaults, jobOptions over both; jobId is refused', async (t) => {
  const { queue } = await testQueue(t, server, { defaultJobOptions: { attempts: 3, removeOnComplete: { age: 60 } } })
  const [a, b] = sampleEvents(2)
  await bullmqEnqueue(queue)([a!], context)
  const jobA = await queue.getJob(eventFingerprint(a!))
  t.equal(jobA!.opts.attempts, 3)
  t.same(jobA!.opts.removeOnComplete, { age: 60 })
  t.same(jobA!.opts.backoff, DEFAULT_JOB_OPTIONS.backoff, 'what the queue leaves out comes from the defaults')

  await bullmqEnqueue(queue, { jobOptions: { attempts: 7, backoff: { type: 'fixed', delay: 10 }, priority: 2 } })([b!], context)
  const jobB = await queue.getJob(eventFingerprint(b!))
  t.equal(jobB!.opts.attempts, 7)
  t.same(jobB!.opts.backoff, { type: 'fixed', delay: 10 })
  t.equal(jobB!.opts.priority, 2)

  t.throws(() => bullmqEnqueue(queue, { jobOptions: { jobId: 'x' } as never }), { name: 'TypeError', message: /jobOptions\.jobId cannot be set/ })
  t.throws(() => bullmqEnqueue({} as never), { name: 'TypeError', message: /queue must be a BullMQ Queue/ })
  t.throws(() => bullmqEnqueue(null as never), { name: 'TypeError', message: /queue must be a BullMQ Queue/ })
  for (const timeout of [0, -1, 1.5, Number.NaN, Infinity, '100' as never, 2 ** 31]) {
    t.throws(() => bullmqEnqueue(queue, { timeout }), { name: 'RangeError', message: /timeout must be an integer number of milliseconds/ })
  }
  t.throws(() => bullmqEnqueue(queue, { jobOptions: 5 as never }), { name: 'TypeError', message: /jobOptions must be an object/ })
})

t.test('waitForReplicas: resolves once a replica has the jobs; without enough replicas rejects with ReplicaWaitError, bounded', async (t) => {
  const { queue, connection } = await testQueue(t, server)
  // Sync a new replica at once (Redis waits 5 s for more replicas by default).
  await connection.config('SET', 'repl-diskless-sync-delay', '0')
  const replica = await startRedisServer()
  t.teardown(() => replica.close())
  const events = sampleEvents(3)
  // No replica yet: WAIT answers 0 after waitTimeout.
  const lonely = bullmqEnqueue(queue, { waitForReplicas: 1, waitTimeout: 100 })(events, context)
  t.ok(await within(lonely.catch(() => {}), 3000), 'settles within a bounded time')
  await t.rejects(lonely, { name: 'ReplicaWaitError', required: 1, acknowledged: 0, message: /Only 0 of 1 Redis replicas acknowledged the jobs within 100 ms/ })
  t.equal((await queue.getJobCounts('waiting')).waiting, 3, 'the jobs were added all the same: the retry finds them')

  const admin = await replica.client({ commandTimeout: undefined })
  await admin.replicaof('127.0.0.1', String(server.port))
  t.ok(await waitFor(async () => (await admin.info('replication')).includes('master_link_status:up'), 5000), 'the replica is in sync')
  const more = sampleEvents(2)
  await bullmqEnqueue(queue, { waitForReplicas: 1, waitTimeout: 2000 })(more, context)
  t.ok(await admin.exists(`{mailchannels-webhooks}:${queue.name}:${eventFingerprint(more[1]!)}`), 'the replica has the job')
  await t.rejects(bullmqEnqueue(queue, { waitForReplicas: 2, waitTimeout: 100 })(more, context), { name: 'ReplicaWaitError', required: 2, acknowledged: 1 })

  for (const [options, message] of [
    [{ waitForReplicas: -1 }, /waitForReplicas must be a non-negative integer/],
    [{ waitForReplicas: 1.5 }, /waitForReplicas must be a non-negative integer/],
    [{ waitTimeout: 0 }, /waitTimeout must be a positive integer number of milliseconds below timeout \(3000\)/],
    [{ timeout: 500, waitTimeout: 500 }, /waitTimeout must be .* below timeout \(500\)/],
    [{ timeout: 1, waitForReplicas: 1 }, /waitTimeout must be .* below timeout \(1\)/],
  ] as const) t.throws(() => bullmqEnqueue(queue, options), { name: 'RangeError', message })
  t.doesNotThrow(() => bullmqEnqueue(queue, { timeout: 1 }), 'no waitTimeout to check without waitForReplicas')
})

t.test('createWebhookEventQueue: the name and the hash-tagged prefix the workers use by default; options checked', async (t) => {
  const connection = await server.client({ enableOfflineQueue: false, commandTimeout: undefined })
  const log = memoryLogger()
  const queue = createWebhookEventQueue({ connection, log })
  t.teardown(() => queue.close())
  t.equal(queue.name, DEFAULT_QUEUE_NAME)
  t.equal(queue.opts.prefix, DEFAULT_PREFIX)
  t.match(DEFAULT_PREFIX, /^\{[^}]+\}$/, 'a Redis Cluster hash tag')
  const [event] = sampleEvents(1)
  await bullmqEnqueue(queue)([event!], context)
  const keys = await connection.keys(`${DEFAULT_PREFIX}:${DEFAULT_QUEUE_NAME}:*`)
  t.ok(keys.includes(`${DEFAULT_PREFIX}:${DEFAULT_QUEUE_NAME}:${eventFingerprint(event!)}`), 'the job lives under the prefix and the queue name')
  await queue.obliterate({ force: true })

  t.throws(() => createWebhookEventQueue(undefined as never), { name: 'TypeError', message: /connection/ })
  t.throws(() => createWebhookEventQueue({} as never), { name: 'TypeError', message: /connection is required/ })
  t.throws(() => createWebhookEventQueue({ connection, name: 'a:b' }), { name: 'TypeError', message: /name must be/ })
  t.throws(() => createWebhookEventQueue({ connection, prefix: '' }), { name: 'TypeError', message: /prefix must be/ })
})

t.test('Redis down: the hook rejects within a bounded time, then works again once Redis is back', async (t) => {
  const { queue } = await testQueue(t, server)
  // A producer with the offline queue on (BullMQ's default options): commands wait for a reconnect.
  const patient = new Queue(queueName('patient'), { connection: { host: '127.0.0.1', port: server.port, retryStrategy: () => 50 }, prefix: '{mailchannels-webhooks}' })
  patient.on('error', () => {})
  t.teardown(() => patient.close())
  await patient.waitUntilReady()
  const failFast = bullmqEnqueue(queue, { timeout: 2000 })
  const bounded = bullmqEnqueue(patient, { timeout: 300 })
  await failFast(sampleEvents(1), context)

  await server.stop()
  t.teardown(() => server.start())
  const events = sampleEvents(3)
  // The fail-fast connection is refused at once: well before the timeout.
  const refused = failFast(events, context)
  t.ok(await within(refused.catch(() => {}), 1500), 'settles before its timeout')
  const err = await refused.then(() => null, (e: unknown) => e)
  t.ok(err instanceof Error && !(err instanceof EnqueueTimeoutError), 'rejected by the connection, not the timer')
  // The patient connection would wait for Redis: the timeout bounds it.
  const waited = bounded(events, context)
  t.ok(await within(waited.catch(() => {}), 5000), 'settles within a bounded time')
  await t.rejects(waited, { name: 'EnqueueTimeoutError', timeout: 300, message: /did not accept 3 jobs within 300 ms/ })

  await server.start()
  t.ok(await waitFor(async () => { await failFast(events, context); return true }, 5000), 'the same hook works again without a restart')
  // (The test server keeps nothing across a restart: only the jobs added since are there.)
  t.equal((await queue.getJobCounts('waiting')).waiting, 3)
  // The patient queue's late add (after its timeout) lands when Redis is back; a retry adds no second job.
  t.ok(await waitFor(async () => (await patient.getJobCounts('waiting')).waiting === 3, 5000), 'the late add landed')
  await bounded(events, context)
  t.equal((await patient.getJobCounts('waiting')).waiting, 3, 'the retried delivery found its jobs')
})

t.test('Redis frozen (SIGSTOP): the hook rejects at its timeout, and a late add creates no duplicate on retry', async (t) => {
  const { queue } = await testQueue(t, server)
  const enqueue = bullmqEnqueue(queue, { timeout: 300 })
  await enqueue(sampleEvents(1), context)
  const events = sampleEvents(2)
  server.pause()
  let resumed = false
  t.teardown(() => { if (!resumed) server.resume() })
  const frozen = enqueue(events, context)
  t.ok(await within(frozen.catch(() => {}), 5000), 'settles while Redis answers nothing')
  await t.rejects(frozen, { name: 'EnqueueTimeoutError' })
  server.resume()
  resumed = true
  await enqueue(events, context)
  t.equal((await queue.getJobCounts('waiting')).waiting, 3)
})

t.test('through the web handler\'s enqueue option: 200 { queued } once BullMQ accepted; a re-signed resend adds no job; Redis down is 503 with Retry-After', async (t) => {
  const { queue } = await testQueue(t, server)
  const keys = generateSigningKeyPair()
  const log = memoryLogger()
  const handler = createWebhookHandler({ customerHandles: [CUSTOMER], publicKey: keys.publicKey, enqueue: bullmqEnqueue(queue, { timeout: 1000 }), logger: log })
  const events = sampleEvents(4)
  const post = async (created: number): Promise<Response> => {
    const signed = signWebhook({ events, privateKey: keys.privateKey, keyId: 'mckey', created })
    return await handler(new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: signed.body }))
  }
  const now = Math.floor(Date.now() / 1000)
  const first = await post(now)
  t.equal(first.status, 200)
  t.same(await first.json(), { queued: 4 })
  const resend = await post(now - 1)
  t.equal(resend.status, 200, 'a re-signed resend is accepted again')
  t.equal((await queue.getJobCounts('waiting')).waiting, 4, 'and adds no job')
  const job = await queue.getJob(eventFingerprint(events[3]!))
  t.same(job!.data, { event: events[3], keyId: 'mckey' })

  await server.stop()
  t.teardown(() => server.start())
  const down = await post(now - 2)
  t.equal(down.status, 503)
  t.ok(Number(down.headers.get('retry-after')) > 0, 'with Retry-After')
  t.match(await down.json(), { code: 'queue_unavailable' })
  await server.start()
})
