// The framework-free, runtime-neutral receiver every adapter builds on (Fastify, Express, the
// web handler, Hono): the request flow with its ending (./flow.ts), the receiver's steps
// (./receiver.ts), the answer of `handlers` / `enqueue` (./answer.ts) and the options
// (./options.ts). The I/O of each kind of runtime lives beside it: ./node/ (node:http streams and
// responses) and ./web/ (fetch `Request` / `Response`).
export {
  createReceiver,
  createStandaloneReceiver,
  failureReply,
  rejection,
  settle,
  DUPLICATE_BODY,
  type AcceptedOutcome,
  type DuplicateOutcome,
  type ReceiveOutcome,
  type Receiver,
  type RejectedOutcome,
  type RequestPort,
  type WebhookErrorBody,
} from './receiver.js'
export {
  createWebhookFlow,
  webhookFlow,
  type FlowSetup,
  type SettleHandler,
  type WebhookFlow,
  type WebhookIO,
} from './flow.js'
export {
  DEFAULT_BODY_LIMIT,
  DEFAULT_ENQUEUE_TIMEOUT,
  keyStoreFactory,
  rejectUnknownOptions,
  resolveBodyLimit,
  resolveEventAnswer,
  resolveLogger,
  resolveReceiverOptions,
  type EventAnswer,
  type ReceiverContext,
  type ResolvedReceiver,
  type WebhookEventDispatcher,
  type WebhookReceiverOptions,
  type WebhookRouteOptions,
} from './options.js'
export { checkTransport, tooLarge, tooLargeMessage } from './transport.js'
export { errorReply, reasonPhrase, JSON_CONTENT_TYPE, NO_STORE, type ErrorBody, type Reply } from './reply.js'
export {
  answerDelivery,
  dispatchReply,
  errorMessage,
  handlerErrorReply,
  type DeliveryErrorCode,
  type DeliveryReply,
  type DispatchedBody,
  type QueuedBody,
} from './answer.js'
