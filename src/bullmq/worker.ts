// The consumer side: a BullMQ Worker that runs a WebhookEventRouter over the jobs of bullmqEnqueue.
import { UnrecoverableError, Worker, type Job, type WorkerOptions } from 'bullmq'
import type { WebhookEventRouter } from '../dispatch/router.js'
import { WEBHOOK_EVENT_TYPES, type WebhookEvent } from '../events/types.js'
import { noopLogger, type Logger } from '../logger.js'
import { publishDeadLetter } from '../diagnostics/dead-letter.js'
import { deadLetterError, isDeadLetterStore, type DeadLetterStore } from '../replay/dead-letters-types.js'
import type { WebhookEventJobData } from './enqueue.js'
import { EventInProgressError } from './errors.js'
import { checkClusterPrefix, DEFAULT_PREFIX } from './prefix.js'
import { DEFAULT_QUEUE_NAME } from './queue.js'

/** What a job resolves (its `returnvalue`): what became of its event (`parked`: it is a dead letter now). */
export type WebhookEventJobResult = 'handled' | 'skipped' | 'unhandled' | 'parked'

/** The job of a webhook event, as the worker's handlers receive it. */
export type WebhookEventJob = Job<WebhookEventJobData, WebhookEventJobResult>

/**
 * What the worker adds to every handler's context (besides `fingerprint`, `signal` and `log`):
 * type your router `new WebhookEventRouter<WebhookEventJobContext>()` to read them.
 */
export interface WebhookEventJobContext {
  /** The BullMQ job (`job.id` is the event's fingerprint, `job.attemptsMade` the attempts so far). */
  readonly job: WebhookEventJob
  /** The key id the event's delivery was verified with. */
  readonly keyId: string
}

/**
 * What the worker takes: a `WebhookEventRouter` (declare it `new WebhookEventRouter<WebhookEventJobContext>()`
 * to read `context.job` and `context.keyId` in handlers). The worker calls `dispatch([event], { job, keyId, log, signal })`.
 */
export type WebhookEventJobDispatcher = Pick<WebhookEventRouter<WebhookEventJobContext>, 'dispatch'>

export interface WebhookEventWorkerOptions extends Omit<WorkerOptions, 'prefix' | 'autorun'> {
  /**
   * The queue to work on: the name given to `createWebhookEventQueue` (or to your `new Queue`).
   * @default 'mailchannels-events'
   */
  queueName?: string
  /**
   * BullMQ's key prefix: the same as the queue's. Its `{hash tag}` keeps every key of the queue in
   * one Redis Cluster slot, which BullMQ needs on a cluster: on an ioredis `Cluster` connection a
   * prefix without one is refused (`ClusterPrefixError`).
   * @default '{mailchannels-webhooks}'
   */
  prefix?: string
  /**
   * Start taking jobs at once; with `false`, call `worker.run()` yourself.
   * @default true
   */
  autorun?: boolean
  /**
   * Where the worker logs connection errors and failed events (messages only, never event data),
   * and what handlers get as `context.log`.
   * @default a logger that logs nothing
   */
  log?: Logger
  /**
   * Where an event whose job used up its attempts is parked, so the operator finds it with the
   * router's dead letters (`dead-letters list` in the CLI): the job then completes with `'parked'`
   * instead of staying in BullMQ's failed set; retry it with a router that has `deadLetters` on the
   * same store. Give it to a worker whose router has no `deadLetters`: a router with them counts
   * each job attempt itself and parks after its `after` (keep that below the job's `attempts`).
   * @default undefined (a job that used up its attempts stays in the failed set)
   */
  deadLetters?: DeadLetterStore
}

const EVENT_NAMES: ReadonlySet<string> = new Set<string>([...WEBHOOK_EVENT_TYPES, 'unknown'])

/**
 * A BullMQ `Worker` that takes the jobs added by `bullmqEnqueue` and runs `router.dispatch([event])`
 * for each, with `{ job, keyId }` in the handlers' context. BullMQ retries a job whose event failed
 * (a handler threw, the seen-events store failed) or was deferred (another dispatch holds its claim)
 * with the job's `attempts` and `backoff`, so a failing handler is retried by the queue, not by
 * MailChannels. A job that completes returns `'handled'`, `'skipped'` or `'unhandled'`.
 *
 * Give the router a shared seen-events store (`RedisClaimStore`) so that a job run again (a
 * worker crashed after the handlers resolved, a stalled job, a resend after the job was removed)
 * does not repeat a handled effect. The connection must suit a worker: options (BullMQ sets
 * `maxRetriesPerRequest: null`) or an ioredis instance created with `maxRetriesPerRequest: null`.
 *
 * @example
 * const router = new WebhookEventRouter<WebhookEventJobContext>({ seenEvents: new RedisClaimStore({ client: redis }) })
 *   .on('hard-bounced', async (event, { fingerprint }) => { await suppress(event.email, fingerprint) })
 * const worker = createWebhookEventWorker(router, { connection: { host: 'redis' }, concurrency: 10 })
 * process.on('SIGTERM', () => { void worker.close() })
 */
export function createWebhookEventWorker (
  router: WebhookEventJobDispatcher,
  options: WebhookEventWorkerOptions,
): Worker<WebhookEventJobData, WebhookEventJobResult> {
  if (typeof router !== 'object' || router === null || typeof (router as Partial<WebhookEventJobDispatcher>).dispatch !== 'function') {
    throw new TypeError('createWebhookEventWorker: router must be a WebhookEventRouter (new WebhookEventRouter().on(...)).')
  }
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('createWebhookEventWorker: options are required, with at least connection (the Redis the queue lives on).')
  }
  const { queueName = DEFAULT_QUEUE_NAME, prefix = DEFAULT_PREFIX, log = noopLogger, deadLetters, ...workerOptions } = options
  if (deadLetters !== undefined && !isDeadLetterStore(deadLetters)) {
    throw new TypeError('createWebhookEventWorker: deadLetters must be a DeadLetterStore (the router\'s deadLetters.store: RedisDeadLetterStore, postgresDeadLetters...).')
  }
  if (typeof queueName !== 'string' || queueName === '' || queueName.includes(':')) {
    throw new TypeError('createWebhookEventWorker: queueName must be a non-empty string without ":" (the name of the queue the events are added to).')
  }
  if (typeof prefix !== 'string' || prefix === '') {
    throw new TypeError('createWebhookEventWorker: prefix must be a non-empty string, the same as the queue\'s (e.g. \'{mailchannels-webhooks}\').')
  }
  if (workerOptions.connection === undefined || workerOptions.connection === null) {
    throw new TypeError('createWebhookEventWorker: connection is required: Redis connection options ({ host, port }) or an ioredis instance created with maxRetriesPerRequest: null.')
  }
  if (!isLogger(log)) throw new TypeError('createWebhookEventWorker: log must be a logger (debug, info, warn and error methods), e.g. a pino instance.')
  // Thrown here, so a worker that could never take a job is never started (it would log CROSSSLOT errors forever).
  checkClusterPrefix('createWebhookEventWorker', workerOptions.connection, prefix, queueName)

  const processor = async (job: WebhookEventJob, _token?: string, signal?: AbortSignal): Promise<WebhookEventJobResult> => {
    const { event, keyId } = readJobData(job)
    const report = await router.dispatch([event], signal === undefined ? { job, keyId, log } : { job, keyId, log, signal })
    const outcome = report.outcomes[0]!
    switch (outcome.status) {
      case 'handled':
      case 'skipped':
      case 'unhandled':
      case 'parked':
        return outcome.status
      case 'deferred':
        throw new EventInProgressError(outcome.fingerprint)
      case 'failed': {
        const last = job.attemptsMade + 1 >= (job.opts.attempts ?? 1)
        if (last && deadLetters !== undefined && await parkJob(deadLetters, event, outcome.fingerprint, outcome.error, job.attemptsMade + 1, log)) return 'parked'
        log[last ? 'error' : 'warn']({ jobId: job.id, attempt: job.attemptsMade + 1, err: errorMessage(outcome.error) },
          last ? 'mailchannels webhook event failed on its last attempt; the job stays in the failed set' : 'mailchannels webhook event failed; BullMQ retries it')
        throw outcome.error instanceof Error ? outcome.error : new Error(errorMessage(outcome.error))
      }
    }
  }

  const worker = new Worker<WebhookEventJobData, WebhookEventJobResult>(queueName, processor, { ...workerOptions, prefix })
  // Without a listener BullMQ writes connection errors to the console.
  worker.on('error', (err) => { log.warn({ err: errorMessage(err) }, 'mailchannels webhook worker: BullMQ error') })
  return worker
}

/**
 * Parks the event of a job that used up its attempts (source `bullmq`), counting them all; whether
 * it is parked (the job then completes). A store failure leaves the job to fail as before.
 */
async function parkJob (store: DeadLetterStore, event: WebhookEvent, fingerprint: string, error: unknown, attempts: number, log: Logger): Promise<boolean> {
  try {
    const failure = { event, fingerprint, error: deadLetterError(error), parkAfter: Math.min(attempts, 100), source: 'bullmq' as const }
    let result = await store.recordFailure(failure)
    // Counted as the job's attempts, so the dead letter says how often it was tried.
    while (!result.parked) result = await store.recordFailure(failure)
    publishDeadLetter('parked', event.event, fingerprint, result.attempts, 'bullmq')
    log.warn({ fingerprint, type: event.event, attempts: result.attempts }, 'mailchannels webhook event used up its job attempts; parked as a dead letter')
    return true
  } catch (err) {
    log.error({ fingerprint, err: errorMessage(err) }, 'mailchannels webhook event could not be parked as a dead letter; the job stays in the failed set')
    return false
  }
}

/**
 * The job's event, checked: jobs come back from JSON, and a queue may hold a job that
 * `bullmqEnqueue` did not add. Such a job fails at once, without retries.
 */
function readJobData (job: WebhookEventJob): WebhookEventJobData {
  const data = job.data as unknown
  const event = (data !== null && typeof data === 'object' ? (data as { event?: unknown }).event : undefined) as Partial<WebhookEvent> | undefined
  const keyId = (data as { keyId?: unknown } | null)?.keyId
  if (event === null || typeof event !== 'object' || Array.isArray(event) ||
    typeof event.event !== 'string' || !EVENT_NAMES.has(event.event) ||
    typeof event.customerHandle !== 'string' || typeof event.timestamp !== 'number' ||
    (event.event === 'unknown' && (typeof event.eventName !== 'string' || event.fields === null || typeof event.fields !== 'object')) ||
    typeof keyId !== 'string') {
    throw new UnrecoverableError('The job does not hold a webhook event ({ event, keyId } as added by bullmqEnqueue); it is not retried.')
  }
  return { event: event as WebhookEvent, keyId }
}

function errorMessage (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

function isLogger (l: unknown): l is Logger {
  if (l === null || typeof l !== 'object') return false
  const x = l as Record<string, unknown>
  return typeof x.debug === 'function' && typeof x.info === 'function' && typeof x.warn === 'function' && typeof x.error === 'function'
}
