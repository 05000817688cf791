// The metadata keys of the NestJS module and the verified events of each request. Nest's own
// decorators set metadata with reflect-metadata (a peer of @nestjs/common); these are read back
// at start-up (the receiver's discovery) and per request (the guard, @WebhookEvents()).
import type { IncomingMessage } from 'node:http'
import type { WebhookEvent } from '../events/types.js'

/** On a route method: it receives MailChannels deliveries (`@MailChannelsWebhook()`). */
export const WEBHOOK_ROUTE = 'mailchannels-webhooks:route'
/** On a provider method: the event types it handles (`@OnWebhookEvent(...)`). */
export const WEBHOOK_HANDLER = 'mailchannels-webhooks:handler'
/** Nest's `@HttpCode()` key: https://github.com/nestjs/nest/blob/master/packages/common/constants.ts */
export const HTTP_CODE = '__httpCode__'
/**
 * @nestjs/platform-fastify's `@RouteConfig()` key, read from the route's handler into Fastify's
 * route `config` (https://github.com/nestjs/nest/blob/master/packages/platform-fastify/constants.ts).
 * Written without importing that package, which Express apps do not install.
 */
export const FASTIFY_ROUTE_CONFIG = '__fastify_route_config__'
/** The name under the Fastify route config that marks a webhook route for the receiver's early check. */
export const FASTIFY_CONFIG_FLAG = 'mailchannelsWebhook'

interface ReflectMetadata {
  getMetadata (key: unknown, target: object): unknown
  defineMetadata (key: unknown, value: unknown, target: object): void
}
/** reflect-metadata's API, which @nestjs/common loads (typed here without its global declarations). */
export const metadata = Reflect as unknown as ReflectMetadata

/** The verified events of each request, by its Node request: set by the guard, read by `@WebhookEvents()`. */
export const verifiedEvents = new WeakMap<IncomingMessage, WebhookEvent[]>()

/** The Node request under a platform's request (Fastify's `request.raw`; Express's request is one). */
export function nodeRequest (req: unknown): IncomingMessage {
  const raw = (req as { raw?: unknown }).raw
  return (raw !== undefined && raw !== null && typeof raw === 'object' ? raw : req) as IncomingMessage
}
