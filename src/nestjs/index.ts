// mailchannels-webhooks/nestjs: a NestJS module (NestJS 12 on @nestjs/platform-express or
// @nestjs/platform-fastify). Nest's packages are optional peer dependencies; nothing else in the
// library imports them. docs/nestjs.md shows the whole of it.
export { MailChannelsWebhooksModule, MAILCHANNELS_WEBHOOKS_OPTIONS } from './module.js'
export { MailChannelsWebhooksReceiver, type AnswerMode } from './receiver.js'
export { MailChannelsWebhook, WebhookEvents, OnWebhookEvent, type WebhookEventMethod } from './decorators.js'
export { MailChannelsWebhookGuard, MailChannelsWebhookReplyFilter, MailChannelsWebhookReply } from './guard.js'
export type { MailChannelsWebhooksModuleOptions } from './options.js'
export type { WebhookEvent } from '../events/types.js'
export type * from '../events/types.js'
export type { EventHandlerContext, DeliveryErrorCode, DispatchedBody, QueuedBody, WebhookErrorBody } from '../receiver/index.js'
export type { DispatchContext, EventOf, WebhookEventName, TransactionContext, Enqueuer, EnqueueContext } from '../dispatch/types.js'
export type { Logger } from '../logger.js'
