// The producer side: a receiver's `enqueue` hook that adds one BullMQ job per event.
// Only BullMQ's types are imported here: the caller brings the Queue.
import type { JobsOptions, Queue } from 'bullmq'
import type { WebhookEvent } from '../events/types.js'
import type { EnqueueContext } from '../dispatch/types.js'
import { eventFingerprint } from '../replay/fingerprint.js'
import { EnqueueTimeoutError, ReplicaWaitError } from './errors.js'
import { checkClusterPrefix } from './prefix.js'

/** What every job carries: the verified event (as JSON) and the key id its delivery was verified with. */
export interface WebhookEventJobData {
  readonly event: WebhookEvent
  readonly keyId: string
}

/** Job options this hook may set; `jobId` is not among them: it is always the event's `eventFingerprint`. */
export type WebhookEventJobOptions = Omit<JobsOptions, 'jobId'>

/** Seconds a completed job is kept: as long as a seen-events store remembers an event by default. */
const THREE_DAYS = 3 * 24 * 60 * 60

/**
 * The job options `bullmqEnqueue` applies unless the queue's `defaultJobOptions` or the
 * `jobOptions` option set them:
 * - `attempts: 10` with exponential `backoff` from 2 s (2 s, 4 s ... about 17 minutes in all), so a
 *   failing handler is retried by the queue, not by MailChannels;
 * - `removeOnComplete: { age: 3 days }`: a job's id is its event's fingerprint, and BullMQ adds no
 *   second job while one with that id exists, so a completed job is kept as long as a resend may
 *   come. Completed jobs hold their event (about 0.5 KiB each): at high volume, lower the age and
 *   let the worker's seen-events store (small done marks) skip the rest;
 * - `removeOnFail: false`: a job that used up its attempts stays in the failed set, to be
 *   inspected and retried (`job.retry()`); while it is there a resend adds no new job.
 */
export const DEFAULT_JOB_OPTIONS: Readonly<WebhookEventJobOptions> = Object.freeze({
  attempts: 10,
  backoff: Object.freeze({ type: 'exponential', delay: 2000 }),
  removeOnComplete: Object.freeze({ age: THREE_DAYS }),
  removeOnFail: false,
})

export interface BullmqEnqueueOptions {
  /**
   * Options of every job, over `DEFAULT_JOB_OPTIONS` and the queue's own `defaultJobOptions`.
   * `jobId` cannot be set. Keep `removeOnComplete` long enough for resends (see `DEFAULT_JOB_OPTIONS`).
   * @default {} (DEFAULT_JOB_OPTIONS, then the queue's defaultJobOptions)
   */
  jobOptions?: WebhookEventJobOptions
  /**
   * Milliseconds to wait for BullMQ to accept a delivery's jobs before giving up (the receiver then
   * answers 503 with `Retry-After` and MailChannels retries). Bounds the wait when Redis is down,
   * unreachable or frozen, whatever the connection's options. A job added after the timeout is
   * harmless: the retried delivery finds it by id and adds no second one.
   * @default 3000
   */
  timeout?: number
  /**
   * Replicas that must have a delivery's jobs before the hook resolves: after adding them, Redis
   * `WAIT` runs on the connection (the node) that wrote them. Replication is asynchronous, so
   * without this a master that dies just after answering can take jobs with it that MailChannels
   * was told (2xx) were accepted; with it, the hook rejects with `ReplicaWaitError` (503, retried)
   * when fewer replicas acknowledged within `waitTimeout`. Set it only where every master has
   * that many replicas. `0`: do not wait.
   * @default 0
   */
  waitForReplicas?: number
  /**
   * Longest wait, in ms, for the `waitForReplicas` acknowledgements; below `timeout`, and below
   * the connection's `commandTimeout` if it has one (`WAIT` holds its reply that long).
   * @default 250 (or timeout - 1 when timeout is shorter)
   */
  waitTimeout?: number
}

const MAX_TIMER = 2 ** 31 - 1

/**
 * What `bullmqEnqueue` returns: an `Enqueuer` hook for the receivers' `enqueue` option,
 * also callable directly (only `keyId` of the context is used).
 */
export type BullmqEnqueuer = (events: readonly WebhookEvent[], context: Pick<EnqueueContext, 'keyId'> & Partial<EnqueueContext>) => Promise<void>

/**
 * An `enqueue` hook for the receivers that adds each verified event to a BullMQ queue as its own
 * job, and resolves once BullMQ has accepted them all (the delivery is then answered 2xx).
 *
 * - Job id: the event's `eventFingerprint` (43 base64url characters), so a resend, a retry after a
 *   503 or two receivers racing on one delivery never create a second job while the first is kept.
 * - Job name: the event type (`'hard-bounced'`...); job data: `{ event, keyId }` (`WebhookEventJobData`).
 * - Rejects (the receiver answers 503, nothing is lost) when BullMQ refuses the jobs or does not
 *   answer within `timeout`. Give the queue a fail-fast connection (`enableOfflineQueue: false`)
 *   so that a Redis that is down is answered at once rather than at the timeout.
 * - Throws `ClusterPrefixError` at once for a queue on an ioredis `Cluster` whose prefix (or name)
 *   holds no `{hash tag}`: its jobs could never be added (see `createWebhookEventQueue`).
 *
 * @example
 * const queue = createWebhookEventQueue({ connection: new Redis(url, { enableOfflineQueue: false }) })
 * await app.register(mailchannelsWebhooks, { customerHandles: ['acct_1'], enqueue: bullmqEnqueue(queue) })
 */
export function bullmqEnqueue (queue: Queue, options: BullmqEnqueueOptions = {}): BullmqEnqueuer {
  if (typeof queue !== 'object' || queue === null || typeof (queue as Partial<Queue>).addBulk !== 'function') {
    throw new TypeError('bullmqEnqueue: queue must be a BullMQ Queue (new Queue(name, { connection }) or createWebhookEventQueue()).')
  }
  // A queue made by hand may carry BullMQ's own default prefix, 'bull': on a cluster every delivery would get 503.
  checkClusterPrefix('bullmqEnqueue', queue.opts?.connection, queue.opts?.prefix ?? 'bull', queue.name)
  if (typeof options !== 'object' || options === null) throw new TypeError('bullmqEnqueue: options must be an object.')
  const timeout = options.timeout ?? 3000
  if (typeof timeout !== 'number' || !Number.isSafeInteger(timeout) || timeout < 1 || timeout > MAX_TIMER) {
    throw new RangeError(`bullmqEnqueue: timeout must be an integer number of milliseconds between 1 and ${MAX_TIMER}.`)
  }
  const waitForReplicas = options.waitForReplicas ?? 0
  if (typeof waitForReplicas !== 'number' || !Number.isSafeInteger(waitForReplicas) || waitForReplicas < 0) {
    throw new RangeError('bullmqEnqueue: waitForReplicas must be a non-negative integer (the replicas that must have the jobs; 0 to not wait).')
  }
  const waitTimeout = options.waitTimeout ?? Math.max(1, Math.min(250, timeout - 1))
  if ((waitForReplicas > 0 || options.waitTimeout !== undefined) && (typeof waitTimeout !== 'number' || !Number.isSafeInteger(waitTimeout) || waitTimeout < 1 || waitTimeout >= timeout)) {
    throw new RangeError(`bullmqEnqueue: waitTimeout must be a positive integer number of milliseconds below timeout (${timeout}).`)
  }
  const jobOptions = options.jobOptions ?? {}
  if (typeof jobOptions !== 'object' || jobOptions === null) throw new TypeError('bullmqEnqueue: jobOptions must be an object of BullMQ job options.')
  if ('jobId' in jobOptions) {
    throw new TypeError('bullmqEnqueue: jobOptions.jobId cannot be set: each job\'s id is its event\'s eventFingerprint, which is what keeps a resend from adding a second job.')
  }
  // The queue's own defaults win over ours (BullMQ would apply them anyway), the option over both.
  const opts: JobsOptions = { ...DEFAULT_JOB_OPTIONS, ...queue.defaultJobOptions, ...jobOptions }
  delete opts.jobId

  return async (events, context) => {
    if (events.length === 0) return
    const jobs = events.map((event) => ({
      name: event.event,
      data: { event, keyId: context.keyId } satisfies WebhookEventJobData,
      opts: { ...opts, jobId: eventFingerprint(event) },
    }))
    const work = waitForReplicas === 0
      ? queue.addBulk(jobs)
      : queue.addBulk(jobs).then(async () => { await waitForReplication(queue, waitForReplicas, waitTimeout) })
    await withTimeout(work, timeout, events.length)
  }
}

/** The part of an ioredis pipeline used to WAIT on the node of the queue's keys. */
interface WaitPipeline {
  exists (key: string): WaitPipeline
  wait (numreplicas: number, timeout: number): WaitPipeline
  exec (): Promise<Array<[Error | null, unknown]> | null>
}

/**
 * `WAIT count timeout` on the connection that wrote the queue's keys: a pipeline holding one key
 * of the queue goes to that key's node (on a Cluster, the node serving the queue's hash tag),
 * over the same connection as the jobs, and `WAIT` counts the replicas that have every write
 * made on it so far.
 */
async function waitForReplication (queue: Queue, count: number, timeout: number): Promise<void> {
  const client = await queue.getBackend().client as unknown as { pipeline: () => WaitPipeline }
  const replies = await client.pipeline().exists(queue.toKey('meta')).wait(count, timeout).exec()
  const reply = replies?.[1]
  if (reply === undefined) throw new ReplicaWaitError(count, Number.NaN, timeout)
  if (reply[0] !== null) throw reply[0]
  const acknowledged = reply[1]
  if (typeof acknowledged !== 'number' || acknowledged < count) throw new ReplicaWaitError(count, Number(acknowledged), timeout)
}

/** Races `work` against a timer; a late settlement of `work` is swallowed (never an unhandled rejection). */
async function withTimeout (work: Promise<unknown>, ms: number, count: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new EnqueueTimeoutError(count, ms)), ms)
  })
  work.catch(() => {})
  try {
    await Promise.race([work, late])
  } finally {
    clearTimeout(timer)
  }
}
