import { webhookEventsOf } from './hooks.js'
import { mailchannelsWebhooksPlugin } from './plugin.js'

export default mailchannelsWebhooksPlugin
export { mailchannelsWebhooksPlugin as mailchannelsWebhooks, webhookEventsOf }
export type { MailChannelsWebhooksOptions } from './plugin.js'
export type { WebhookReceiverOptions, WebhookRouteOptions, EventHandlerContext, WebhookErrorBody, DeliveryErrorCode, DispatchedBody, QueuedBody } from '../receiver/index.js'
export type { Enqueuer, EnqueueContext } from '../dispatch/types.js'
export type { WebhookEvent } from '../events/types.js'
export type { ReplayStore, DeliveryReplayStore } from '../replay/types.js'
export type { ClaimStore } from '../replay/claim-store.js'
export { batchesRoute } from './batches-route.js'
export type { BatchesRouteOptions } from './batches-route.js'
export type { BatchesAuthorize, BatchesClient, BatchesPage, BatchesErrorBody } from '../batches-route/core.js'
