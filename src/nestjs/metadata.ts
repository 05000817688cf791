// The metadata keys of the NestJS module and the verified events of each request. Nest's own
// decorators set metadata with reflect-metadata (a peer of @nestjs/common); these are read back
// at start-up (the receiver's discovery) and per request (the guard, @WebhookEvents()).
import type { IncomingMessage } from 'node:http'
import type { ExecutionContext } from '@nestjs/common'
import type { WebhookEvent } from '../events/types.js'

/** On a route method: it receives MailChannels deliveries (`@MailChannelsWebhook()`). */
export const WEBHOOK_ROUTE = 'mailchannels-webhooks:route'
/** On a provider method: the event types it handles (`@OnWebhookEvent(...)`). */
export const WEBHOOK_HANDLER = 'mailchannels-webhooks:handler'
/** Nest's `@HttpCode()` key: https://github.com/nestjs/nest/blob/master/packages/common/constants.ts */
export const HTTP_CODE = '__httpCode__'
/** Nest's key of a route method's parameters (on its class, by method name). */
export const ROUTE_ARGS = '__routeArguments__'

interface ReflectMetadata {
  getMetadata (key: unknown, target: object, property?: string | symbol): unknown
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

/** The factory of `@WebhookEvents()`: the events the guard verified for this request. */
export function webhookEventsOfContext (_data: unknown, context: ExecutionContext): WebhookEvent[] {
  const events = verifiedEvents.get(nodeRequest(context.switchToHttp().getRequest()))
  if (events === undefined) {
    throw new Error('@WebhookEvents() has no verified delivery to give: it belongs on a parameter of a route marked @MailChannelsWebhook()')
  }
  return events
}

/** Whether a route method takes a `@WebhookEvents()` parameter. */
export function takesWebhookEvents (controller: object, method: string): boolean {
  const args = metadata.getMetadata(ROUTE_ARGS, controller.constructor, method) as Record<string, { factory?: unknown }> | undefined
  return args !== undefined && Object.values(args).some((arg) => arg.factory === webhookEventsOfContext)
}
