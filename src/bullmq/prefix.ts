// The key prefix of the BullMQ queue, and the check that its keys can live on a Redis Cluster.
// Only BullMQ's types are needed here, so that `bullmqEnqueue` can check a queue it is given.
import { ClusterPrefixError } from './errors.js'

/**
 * The key prefix `createWebhookEventQueue` and `createWebhookEventWorker` use unless given one.
 * Its `{hash tag}` puts every key of the queue in one Redis Cluster slot: BullMQ's scripts touch
 * several keys of a queue at once, which a cluster only allows within one slot.
 */
export const DEFAULT_PREFIX = '{mailchannels-webhooks}'

/**
 * Whether every key BullMQ makes for a queue (`<prefix>:<name>:<type>`) hashes to one cluster
 * slot: the text between the first `{` and the next `}` picks a key's slot when it is not empty
 * (https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/#hash-tags), so
 * that pair must sit within `<prefix>:<name>`, which every key of the queue starts with.
 */
function hasHashTag (qualifiedName: string): boolean {
  const open = qualifiedName.indexOf('{')
  if (open === -1) return false
  const close = qualifiedName.indexOf('}', open + 1)
  return close > open + 1
}

/** An ioredis `Cluster` (or a client that says it is one, as BullMQ reads it). */
function isCluster (connection: unknown): boolean {
  return typeof connection === 'object' && connection !== null && (connection as { isCluster?: unknown }).isCluster === true
}

/**
 * Throws `ClusterPrefixError` when `connection` is a Redis Cluster client and the queue's keys
 * would span slots. Connection options (not a client) make BullMQ open a single Redis: any
 * prefix works there.
 */
export function checkClusterPrefix (caller: string, connection: unknown, prefix: string, queueName: string): void {
  if (isCluster(connection) && !hasHashTag(`${prefix}:${queueName}`)) {
    throw new ClusterPrefixError(caller, prefix, queueName, DEFAULT_PREFIX)
  }
}
