// An untagged BullMQ prefix on a Redis Cluster is refused when the queue, the worker or the hook
// is made, not at the first delivery (ioredis: "All the keys in a pipeline command should belong
// to the same slot", every delivery 503) or in a worker that logs CROSSSLOT errors forever.
// No server is needed for a check made at construction: a real ioredis Cluster with lazyConnect,
// pointed at a port that refuses connections, never connected unless BullMQ starts using it.
// The refusal rule is held to the slots the queue's keys really get (keySlot, which
// test/replay/cluster-stores.test.ts holds to CLUSTER KEYSLOT).
import t, { type Test } from 'tap'
import { Queue } from 'bullmq'
import { Cluster, Redis } from 'ioredis'
import {
  bullmqEnqueue, ClusterPrefixError, createWebhookEventQueue, createWebhookEventWorker, DEFAULT_PREFIX, DEFAULT_QUEUE_NAME,
} from '../../src/bullmq/index.js'
import { WebhookEventRouter } from '../../src/dispatch/router.js'
import { keySlot } from '../../src/replay/redis-client.js'
import { closedPort } from '../helpers/closed-port.js'

const port = await closedPort()
const router = new WebhookEventRouter().on('*', () => {})

/** A Cluster client that has not connected (and, if BullMQ makes it try, gives up at once). */
function lazyCluster (t: Test): Cluster {
  const c = new Cluster([{ host: '127.0.0.1', port }], { lazyConnect: true, clusterRetryStrategy: () => null, enableOfflineQueue: false })
  c.on('error', () => {})
  t.teardown(() => { c.disconnect() })
  return c
}

/** Whether every key BullMQ makes for the queue lands in one cluster slot. */
function oneSlot (prefix: string, name: string): boolean {
  const slots = new Set(['wait', 'active', 'meta', 'events', 'id', 'completed', 'stalled-check', 'de:x'].map((type) => keySlot(`${prefix}:${name}:${type}`)))
  return slots.size === 1
}

// [prefix, queue name]
const UNTAGGED: Array<[string, string]> = [
  ['bull', 'events'],
  ['mailchannels-webhooks', DEFAULT_QUEUE_NAME],
  ['{}', 'events'], // an empty tag does not count: the whole key is hashed
  ['{}{app}', 'events'], // only the first '{' counts, and its tag is empty
  ['app{', 'events'],
  ['app}{x', 'events'],
]
const TAGGED: Array<[string, string]> = [
  [DEFAULT_PREFIX, DEFAULT_QUEUE_NAME],
  ['{app}', 'events'],
  ['app:{mcwh}:bull', 'events'],
  ['bull', '{orders}'], // the tag may sit in the queue name: every key of the queue still shares it
]

t.test('the rule is the slot rule: refused pairs spread over several slots, accepted ones share one', async (t) => {
  for (const [prefix, name] of UNTAGGED) t.notOk(oneSlot(prefix, name), `${prefix}:${name} spans slots`)
  for (const [prefix, name] of TAGGED) t.ok(oneSlot(prefix, name), `${prefix}:${name} is one slot`)
})

t.test('createWebhookEventQueue on a Cluster refuses an untagged prefix, naming the rule and the default', async (t) => {
  for (const [prefix, name] of UNTAGGED) {
    const cluster = lazyCluster(t)
    let queue: Queue | undefined
    const err = (() => { try { queue = createWebhookEventQueue({ connection: cluster, prefix, name }); return null } catch (e) { return e } })()
    if (queue !== undefined) t.teardown(() => queue!.close())
    t.type(err, ClusterPrefixError, `${prefix}:${name} refused`)
    t.type(err, TypeError)
    t.match(err, {
      name: 'ClusterPrefixError',
      prefix,
      queueName: name,
      message: /^createWebhookEventQueue: .*hash tag/,
    })
    const message = String((err as Error | null)?.message)
    t.ok(message.includes(JSON.stringify(prefix)), 'names the prefix given')
    t.ok(message.includes(`'${DEFAULT_PREFIX}'`), 'names the default prefix')
    t.ok(message.includes('https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/#hash-tags'), 'links the hash-tag rule')
    t.equal(cluster.status, 'wait', 'nothing was connected')
  }
})

t.test('createWebhookEventWorker on a Cluster refuses an untagged prefix at once: no worker runs, nothing connects', async (t) => {
  for (const [prefix, name] of UNTAGGED) {
    for (const autorun of [true, false]) {
      const cluster = lazyCluster(t)
      let worker: { close: () => Promise<void> } | undefined
      const err = (() => { try { worker = createWebhookEventWorker(router, { connection: cluster, prefix, queueName: name, autorun }); return null } catch (e) { return e } })()
      if (worker !== undefined) t.teardown(() => worker!.close())
      t.type(err, ClusterPrefixError, `${prefix}:${name} refused (autorun ${autorun})`)
      t.match(err, { prefix, queueName: name, message: /^createWebhookEventWorker: .*hash tag.*\{mailchannels-webhooks\}/ })
      t.equal(cluster.status, 'wait', 'nothing was connected')
    }
  }
})

t.test('bullmqEnqueue refuses a queue whose prefix is untagged on a Cluster, before any delivery', async (t) => {
  for (const [prefix, name] of UNTAGGED) {
    const cluster = lazyCluster(t)
    const queue = new Queue(name, { connection: cluster, prefix })
    queue.on('error', () => {})
    t.teardown(() => queue.close())
    t.throws(() => bullmqEnqueue(queue), { name: 'ClusterPrefixError', prefix, queueName: name, message: /^bullmqEnqueue: .*hash tag/ }, `${prefix}:${name} refused`)
  }
})

t.test('tagged prefixes (or a tag in the queue name) are accepted on a Cluster', async (t) => {
  for (const [prefix, name] of TAGGED) {
    const queue = createWebhookEventQueue({ connection: lazyCluster(t), prefix, name })
    t.teardown(() => queue.close())
    t.equal(typeof bullmqEnqueue(queue), 'function', `${prefix}:${name} accepted by the hook`)
    const worker = createWebhookEventWorker(router, { connection: lazyCluster(t), prefix, queueName: name, autorun: false })
    t.teardown(() => worker.close())
    t.equal(worker.name, name)
  }
})

t.test('on a single Redis any prefix is accepted: every key is on the one server', async (t) => {
  const connection = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => null, enableOfflineQueue: false, maxRetriesPerRequest: null })
  connection.on('error', () => {})
  t.teardown(() => { connection.disconnect() })
  const queue = createWebhookEventQueue({ connection, prefix: 'bull', name: 'events' })
  queue.on('error', () => {})
  t.teardown(() => queue.close())
  t.equal(typeof bullmqEnqueue(queue), 'function')
  const worker = createWebhookEventWorker(router, { connection, prefix: 'bull', queueName: 'events', autorun: false })
  t.teardown(() => worker.close())
  t.equal(worker.name, 'events')
})
