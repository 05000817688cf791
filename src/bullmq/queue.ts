// The queue both sides share: one name and one hash-tagged prefix by default, so a receiver's
// Queue and the workers meet without configuration and the queue works on Redis Cluster.
import { Queue, type QueueOptions } from 'bullmq'
import { noopLogger, type Logger } from '../logger.js'
import type { WebhookEventJobData } from './enqueue.js'
import { checkClusterPrefix, DEFAULT_PREFIX } from './prefix.js'

/** The queue name `createWebhookEventQueue` and `createWebhookEventWorker` use unless given one. */
export const DEFAULT_QUEUE_NAME = 'mailchannels-events'

export interface WebhookEventQueueOptions extends Omit<QueueOptions, 'prefix'> {
  /**
   * The queue's name: give the workers the same `queueName`.
   * @default 'mailchannels-events'
   */
  name?: string
  /**
   * BullMQ's key prefix: give the workers the same. Keep a `{hash tag}` in it for Redis Cluster:
   * on an ioredis `Cluster` connection a prefix without one is refused (`ClusterPrefixError`).
   * @default '{mailchannels-webhooks}'
   */
  prefix?: string
  /**
   * Where connection errors are logged (BullMQ writes them to the console without a listener).
   * @default a logger that logs nothing
   */
  log?: Logger
}

/**
 * The BullMQ `Queue` a receiver adds events to (`bullmqEnqueue(queue)`), with the name and
 * prefix the workers of `createWebhookEventWorker` use by default. Give it a fail-fast
 * connection: an ioredis instance with `enableOfflineQueue: false`, so that while Redis is down
 * a delivery is answered 503 at once instead of waiting for the enqueue timeout.
 *
 * @example
 * const queue = createWebhookEventQueue({ connection: new Redis(process.env.REDIS_URL, { enableOfflineQueue: false }) })
 */
export function createWebhookEventQueue (options: WebhookEventQueueOptions): Queue<WebhookEventJobData> {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('createWebhookEventQueue: options are required, with at least connection (the Redis the queue lives on).')
  }
  const { name = DEFAULT_QUEUE_NAME, prefix = DEFAULT_PREFIX, log = noopLogger, ...queueOptions } = options
  if (typeof name !== 'string' || name === '' || name.includes(':')) {
    throw new TypeError('createWebhookEventQueue: name must be a non-empty string without ":".')
  }
  if (typeof prefix !== 'string' || prefix === '') {
    throw new TypeError('createWebhookEventQueue: prefix must be a non-empty string (keep a {hash tag} in it for Redis Cluster).')
  }
  if (queueOptions.connection === undefined || queueOptions.connection === null) {
    throw new TypeError('createWebhookEventQueue: connection is required: an ioredis instance created with enableOfflineQueue: false (fails fast while Redis is down), or connection options.')
  }
  checkClusterPrefix('createWebhookEventQueue', queueOptions.connection, prefix, name)
  const queue = new Queue<WebhookEventJobData>(name, { ...queueOptions, prefix })
  queue.on('error', (err) => { log.warn({ err: err instanceof Error ? err.message : String(err) }, 'mailchannels webhook queue: BullMQ error') })
  return queue
}
