// What the webhook adapters (Fastify, Express, the web handler, Hono) take from the receiver: the
// request pipeline (./pipeline.ts) with its port, and the receiver's options (./options.ts). The
// I/O of each kind of runtime lives beside it: ./node/ (node:http streams and responses) and
// ./web/ (fetch `Request` / `Response`).
export {
  createWebhookPipeline,
  refusal,
  settle,
  type AcceptedOutcome,
  type PipelineOptions,
  type PipelineSetup,
  type SettleHandler,
  type WebhookErrorBody,
  type WebhookPipeline,
  type WebhookPort,
} from './pipeline.js'
export {
  keyStoreFactory,
  rejectUnknownOptions,
  resolveBodyLimit,
  resolveReceiverOptions,
  type EventAnswer,
  type EventHandlerContext,
  type WebhookReceiverOptions,
  type WebhookRouteOptions,
} from './options.js'
export { answerDelivery, type DeliveryErrorCode, type DispatchedBody, type QueuedBody } from './answer.js'
