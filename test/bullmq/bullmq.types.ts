// Compile-time test of mailchannels-webhooks/bullmq: `npx tsc -p tsconfig.json` checks it (it is
// not a runtime test file). Every `@ts-expect-error` line must fail to compile, or the type-check fails.
import Fastify from 'fastify'
import { Queue, type Job, type Worker } from 'bullmq'
import { Redis } from 'ioredis'
import { WebhookEventRouter, type WebhookEvent } from '../../src/index.js'
import mailchannelsWebhooks from '../../src/fastify/index.js'
import type { Enqueuer } from '../../src/dispatch/types.js'
import { createWebhookHandler } from '../../src/web/index.js'
import {
  bullmqEnqueue, createWebhookEventQueue, createWebhookEventWorker,
  type WebhookEventJobContext, type WebhookEventJobData, type WebhookEventJobResult,
} from '../../src/bullmq/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

export async function producer (): Promise<void> {
  const connection = new Redis({ enableOfflineQueue: false })
  const queue = createWebhookEventQueue({ connection })
  // Any BullMQ Queue fits, typed or not.
  const untyped = new Queue('events', { connection, prefix: '{mailchannels-webhooks}' })
  const enqueue = bullmqEnqueue(queue, { timeout: 2000, jobOptions: { attempts: 3 } })
  bullmqEnqueue(untyped)
  // The hook is the receivers' Enqueuer, and a direct call needs only the keyId.
  const hook: Enqueuer = enqueue
  await enqueue([] as WebhookEvent[], { keyId: 'mckey' })
  await Fastify().register(mailchannelsWebhooks, { customerHandles: ['acct_1'], path: '/hook', enqueue })
  createWebhookHandler({ customerHandles: ['acct_1'], enqueue: hook })
  // @ts-expect-error a job's id is always its event's fingerprint
  bullmqEnqueue(queue, { jobOptions: { jobId: 'x' } })
  // @ts-expect-error a queue, not a connection
  bullmqEnqueue(connection)
}

export function consumer (): void {
  // Handlers of a job-context router read the job and the key id, the event narrowed.
  const router = new WebhookEventRouter<WebhookEventJobContext>().on('hard-bounced', (event, context) => {
    assertType<Equal<typeof context.job, Job<WebhookEventJobData, WebhookEventJobResult>>>(true)
    assertType<Equal<typeof context.keyId, string>>(true)
    assertType<Equal<typeof event.status, string | undefined>>(true)
    assertType<Equal<typeof context.job.data.event, WebhookEvent>>(true)
  })
  const worker = createWebhookEventWorker(router, { connection: { host: '127.0.0.1' }, concurrency: 5, lockDuration: 10_000 })
  assertType<Equal<typeof worker, Worker<WebhookEventJobData, WebhookEventJobResult>>>(true)
  // A plain router fits too.
  createWebhookEventWorker(new WebhookEventRouter().on('*', () => {}), { connection: { host: '127.0.0.1' } })
  // @ts-expect-error the worker gives handlers { job, keyId }, not { tenant }
  createWebhookEventWorker(new WebhookEventRouter<{ tenant: string }>(), { connection: { host: '127.0.0.1' } })
  // @ts-expect-error connection is required
  createWebhookEventWorker(router, { concurrency: 5 })
}
