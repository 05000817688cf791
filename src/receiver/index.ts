// The framework-free, runtime-neutral receiver every adapter builds on (Fastify, Express, the
// fetch handler). Node-only helpers for the Node adapters live in ./node/.
export {
  createReceiver,
  createStandaloneReceiver,
  rejection,
  settle,
  DUPLICATE_BODY,
  type AcceptedOutcome,
  type DuplicateOutcome,
  type ReceiveOutcome,
  type Receiver,
  type ReceiverRequest,
  type RejectedOutcome,
  type WebhookErrorBody,
} from './receiver.js'
export {
  DEFAULT_BODY_LIMIT,
  keyStoreFactory,
  rejectUnknownOptions,
  resolveLogger,
  resolveReceiverOptions,
  type ResolvedReceiver,
  type WebhookReceiverOptions,
  type WebhookRouteOptions,
} from './options.js'
export { tooLarge } from './transport.js'
export { errorReply, reasonPhrase, JSON_CONTENT_TYPE, NO_STORE, type ErrorBody, type Reply } from './reply.js'
export {
  answerDelivery,
  dispatchReply,
  errorMessage,
  handlerErrorReply,
  resolveEventAnswer,
  DEFAULT_ENQUEUE_TIMEOUT,
  type DeliveryErrorCode,
  type DeliveryReply,
  type DispatchedBody,
  type EventAnswer,
  type QueuedBody,
  type ReceiverContext,
  type WebhookEventDispatcher,
} from './dispatch.js'
