// BullMQ on a real Redis Cluster (three masters, three replicas): with the hash-tagged prefix
// every key of the queue lives in one slot, so one job per event is added (none more for a
// resend, through the web handler as well) and workers on the cluster run each event once.
// Without a hash tag the keys of one queue span slots: the queue, the hook and the worker are refused when made.
import t from 'tap'
import { Queue } from 'bullmq'
import { Cluster } from 'ioredis'
import { bullmqEnqueue, createWebhookEventQueue, createWebhookEventWorker, DEFAULT_PREFIX } from '../../src/bullmq/index.js'
import { WebhookEventRouter } from '../../src/dispatch/router.js'
import { noopLogger } from '../../src/logger.js'
import { eventFingerprint } from '../../src/replay/fingerprint.js'
import { keySlot } from '../../src/replay/redis-client.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { createWebhookHandler } from '../../src/web/index.js'
import { CLUSTER_FAIL_FAST, startRedisCluster } from '../helpers/redis-cluster.js'
import { waitFor } from '../replay/helpers/redis-server.js'
import { CUSTOMER, queueName, sampleEvents } from './helpers.js'

// The longest a condition may take to hold: waitFor returns as soon as it holds, so only a
// failing run waits this long; a busy machine (four test files on two cores) must not fail it.
const WAIT_MS = 120_000

// Like the redis-server tests, this one fails (saying what to install) rather than skip without redis-server and redis-cli.
const cluster = await startRedisCluster()
t.teardown(() => cluster.close())
const context = { keyId: 'mckey', log: noopLogger }

t.test('one job per event on the cluster, none more for a resend; a worker on the cluster handles each event once', async (t) => {
  const connection = await cluster.client()
  const queue = createWebhookEventQueue({ connection, name: queueName('cluster') })
  t.teardown(() => queue.close())
  const keys = generateSigningKeyPair()
  const handler = createWebhookHandler({ customerHandles: [CUSTOMER], publicKey: keys.publicKey, enqueue: bullmqEnqueue(queue) })
  const events = sampleEvents(20)
  const post = async (created: number): Promise<Response> => {
    const signed = signWebhook({ events, privateKey: keys.privateKey, created })
    return await handler(new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: signed.body }))
  }
  const now = Math.floor(Date.now() / 1000)
  const first = await post(now)
  t.equal(first.status, 200)
  t.same(await first.json(), { queued: 20 })
  // A re-signed resend, then concurrent copies of it through the hook itself.
  t.equal((await post(now - 1)).status, 200)
  await Promise.all(Array.from({ length: 5 }, async () => await bullmqEnqueue(queue)(events.map((e) => structuredClone(e)), context)))
  t.same(await queue.getJobCounts('waiting', 'active', 'completed', 'failed'), { waiting: 20, active: 0, completed: 0, failed: 0 })
  for (const event of events) t.equal((await queue.getJob(eventFingerprint(event)))?.data.keyId, 'mckey')

  const handled = new Map<string, number>()
  const router = new WebhookEventRouter().on('*', (_event, { fingerprint }) => { handled.set(fingerprint, (handled.get(fingerprint) ?? 0) + 1) })
  // A worker's connection: BullMQ's blocking commands need maxRetriesPerRequest: null (ioredis' default on a Cluster's nodes).
  const workerConnection = new Cluster([...cluster.startupNodes], { redisOptions: { maxRetriesPerRequest: null } })
  workerConnection.on('error', () => {})
  const worker = createWebhookEventWorker(router, { connection: workerConnection, queueName: queue.name, concurrency: 5, drainDelay: 1 })
  t.teardown(async () => { await worker.close(); workerConnection.disconnect() })
  t.ok(await waitFor(async () => (await queue.getJobCounts('completed')).completed === 20, WAIT_MS), 'every job completed')
  t.same([...handled.keys()].sort(), events.map(eventFingerprint).sort())
  t.ok([...handled.values()].every((n) => n === 1), 'each event handled once')
  // Resent after the jobs completed: still kept (removeOnComplete by age), so no new job.
  await bullmqEnqueue(queue)(events, context)
  t.same(await queue.getJobCounts('waiting', 'completed'), { waiting: 0, completed: 20 })
})

t.test('without a hash tag the queue, the worker and the hook are refused when made; a tag in the queue name works', async (t) => {
  const connection = await cluster.client()
  // A name whose queue keys lie on different masters (redis-cli --cluster create gives three
  // masters slots 0-5460, 5461-10922 and 10923-16383): one whose keys all landed on one master
  // could be read, and the test would fail by chance, not because the library changed.
  let name = queueName('untagged')
  const master = (key: string): number => { const slot = keySlot(key); return slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2 }
  while (new Set(['wait', 'active', 'completed', 'failed'].map((k) => master(`bull:${name}:${k}`))).size < 2) name = queueName('untagged')
  // BullMQ's own default prefix, 'bull': the keys of one queue span slots, so ioredis would refuse
  // every enqueue ("All the keys in a pipeline command should belong to the same slot").
  t.throws(() => createWebhookEventQueue({ connection, name, prefix: 'bull' }), { name: 'ClusterPrefixError', prefix: 'bull', message: /hash tag.*'\{mailchannels-webhooks\}'/ })
  const queue = new Queue(name, { connection, prefix: 'bull' })
  queue.on('error', () => {})
  t.teardown(() => queue.close())
  t.throws(() => bullmqEnqueue(queue), { name: 'ClusterPrefixError', queueName: name })
  // A worker would log CROSSSLOT errors forever: it is never started.
  const router = new WebhookEventRouter().on('*', () => {})
  t.throws(() => createWebhookEventWorker(router, { connection, queueName: name, prefix: 'bull' }), { name: 'ClusterPrefixError' })
  t.same(await queue.getJobCounts('waiting', 'active', 'completed', 'failed').catch(() => null), null, 'the untagged queue cannot even be read on the cluster')

  // The tag may sit in the queue name: every key of the queue still shares one slot.
  const tagged = new Queue(`{${name}}`, { connection, prefix: 'bull' })
  tagged.on('error', () => {})
  t.teardown(() => tagged.close())
  const events = sampleEvents(3)
  await bullmqEnqueue(tagged)(events, context)
  t.same(await tagged.getJobCounts('waiting'), { waiting: 3 })
  t.match(DEFAULT_PREFIX, /^\{.+\}$/)
})

t.test('with waitForReplicas: 1, jobs acknowledged before their master is killed are still there after the failover', async (t) => {
  // WAIT holds the command for up to waitTimeout: the connection's commandTimeout must be longer.
  const connection = await cluster.client({ redisOptions: { ...CLUSTER_FAIL_FAST.redisOptions, commandTimeout: 2000 } })
  const queue = createWebhookEventQueue({ connection, name: queueName('failover') })
  t.teardown(() => queue.close())
  const events = sampleEvents(10)
  await bullmqEnqueue(queue, { waitForReplicas: 1, waitTimeout: 1000 })(events, context)
  // Two replicas are more than any master has: refused, bounded.
  await t.rejects(bullmqEnqueue(queue, { waitForReplicas: 2, waitTimeout: 200 })(events, context), { name: 'ReplicaWaitError', required: 2, acknowledged: 1 })

  const master = await cluster.masterOf(queue.toKey('meta'))
  await cluster.kill(master)
  await cluster.waitForPromotion(master)
  const after = await cluster.client()
  const reader = new Queue(queue.name, { connection: after, prefix: DEFAULT_PREFIX })
  reader.on('error', () => {})
  t.teardown(() => reader.close())
  t.ok(await waitFor(async () => (await reader.getJobCounts('waiting')).waiting === 10, WAIT_MS), 'every job survived the failover')
  for (const event of events) t.ok(await reader.getJob(eventFingerprint(event)), 'by its id')
})
