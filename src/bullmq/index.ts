// mailchannels-webhooks/bullmq: ack fast, process later. Receivers add each verified event to a
// BullMQ queue as its own job (`bullmqEnqueue`); workers run a WebhookEventRouter over the jobs
// (`createWebhookEventWorker`) with BullMQ's retries. Needs `bullmq` (an optional peer dependency).
export { bullmqEnqueue, DEFAULT_JOB_OPTIONS } from './enqueue.js'
export type { BullmqEnqueuer, BullmqEnqueueOptions, WebhookEventJobData, WebhookEventJobOptions } from './enqueue.js'
export { createWebhookEventQueue, DEFAULT_QUEUE_NAME } from './queue.js'
export { DEFAULT_PREFIX } from './prefix.js'
export type { WebhookEventQueueOptions } from './queue.js'
export { createWebhookEventWorker } from './worker.js'
export type { WebhookEventJobDispatcher, WebhookEventWorkerOptions, WebhookEventJobContext, WebhookEventJob, WebhookEventJobResult } from './worker.js'
export { ClusterPrefixError, EnqueueTimeoutError, EventInProgressError, ReplicaWaitError } from './errors.js'
