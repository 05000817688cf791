/**
 * BullMQ did not accept a delivery's jobs within `bullmqEnqueue`'s `timeout` (Redis down,
 * unreachable or frozen). The receiver answers 503 with `Retry-After`; MailChannels retries.
 */
export class EnqueueTimeoutError extends Error {
  override readonly name = 'EnqueueTimeoutError'
  /** The timeout that ran out, in milliseconds. */
  readonly timeout: number

  constructor (count: number, timeout: number) {
    super(`BullMQ did not accept ${count} job${count === 1 ? '' : 's'} within ${timeout} ms (is Redis reachable?).`)
    this.timeout = timeout
  }
}

/**
 * Thrown by the worker's processor when another dispatch holds a live claim on the job's event
 * (a seen-events store says it is being handled right now): BullMQ retries the job with its backoff,
 * and the retry skips the event once that other dispatch has handled it.
 */
export class EventInProgressError extends Error {
  override readonly name = 'EventInProgressError'
  /** The event's `eventFingerprint`. */
  readonly fingerprint: string

  constructor (fingerprint: string) {
    super(`Event ${fingerprint} is being handled by another dispatch; the job is retried later.`)
    this.fingerprint = fingerprint
  }
}

/**
 * Fewer replicas than `bullmqEnqueue`'s `waitForReplicas` acknowledged a delivery's jobs within
 * `waitTimeout`: a failover now could lose them, so the delivery is not acknowledged (the receiver
 * answers 503 and MailChannels retries; the jobs already added are found by id, not added twice).
 */
export class ReplicaWaitError extends Error {
  override readonly name = 'ReplicaWaitError'
  /** Replicas required. */
  readonly required: number
  /** Replicas that acknowledged in time. */
  readonly acknowledged: number

  constructor (required: number, acknowledged: number, timeout: number) {
    super(`Only ${Number.isNaN(acknowledged) ? 'an unknown number' : acknowledged} of ${required} Redis replicas acknowledged the jobs within ${timeout} ms.`)
    this.required = required
    this.acknowledged = acknowledged
  }
}

/**
 * A queue, worker or `bullmqEnqueue` hook on a Redis Cluster client whose BullMQ keys would not
 * share one cluster slot: the prefix (or the queue name) holds no non-empty `{hash tag}`.
 * BullMQ's scripts touch several keys of a queue at once, which a cluster allows only within one
 * slot, so such a queue could never take a job (and a worker would fail forever); it is refused
 * when made. Keep the default prefix `'{mailchannels-webhooks}'` or put a `{...}` in yours.
 */
export class ClusterPrefixError extends TypeError {
  override readonly name = 'ClusterPrefixError'
  /** The prefix refused. */
  readonly prefix: string
  /** The queue's name. */
  readonly queueName: string

  constructor (caller: string, prefix: string, queueName: string, defaultPrefix: string) {
    super(`${caller}: on a Redis Cluster the prefix needs a {hash tag}, and ${JSON.stringify(prefix)} (queue ${JSON.stringify(queueName)}) has none: ` +
      'BullMQ runs scripts over several keys of a queue, which a cluster allows only when they share one slot, and only the ' +
      'text between the first "{" and the next "}" of a key (if not empty) picks its slot ' +
      '(https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/#hash-tags). ' +
      `Keep the default prefix '${defaultPrefix}' or put a {...} in yours, e.g. '{${prefix.replace(/[{}]/g, '') || 'bull'}}', the same on the queue and its workers.`)
    this.prefix = prefix
    this.queueName = queueName
  }
}
