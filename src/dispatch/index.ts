export { WebhookEventRouter } from './router.js'
export type { WebhookEventRouterOptions, DispatchInput } from './router.js'
export type { WebhookEventName, EventOf, DispatchContext, WebhookEventHandler, TransactionContext, EventOutcome, DispatchReport, EnqueueContext, Enqueuer } from './types.js'
