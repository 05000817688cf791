// The decorators: `@MailChannelsWebhook()` on a controller route, `@WebhookEvents()` on its
// parameter, `@OnWebhookEvent(type)` on a provider's method. Plain functions that apply Nest's own
// decorators, so the library needs no decorator support from the compiler that builds it.
import { createParamDecorator, HttpCode, UseFilters, UseGuards } from '@nestjs/common'
import type { EventOf, WebhookEventName } from '../dispatch/types.js'
import { HTTP_CODE, metadata, webhookEventsOfContext, WEBHOOK_HANDLER, WEBHOOK_ROUTE } from './metadata.js'
import { MailChannelsWebhookGuard, MailChannelsWebhookReplyFilter } from './guard.js'

/**
 * Marks a controller route as a MailChannels webhook endpoint:
 *
 * ```ts
 * @Post('webhooks/mailchannels')
 * @MailChannelsWebhook()
 * receive (@WebhookEvents() events: WebhookEvent[]) { ... }
 * ```
 *
 * A guard verifies every delivery from the exact bytes received (the app is created with
 * `{ rawBody: true }`) before any interceptor, pipe or handler runs. Refused, duplicate and
 * (with `@OnWebhookEvent` handlers or `enqueue`) answered deliveries get the library's own
 * reply: its status, `code`, body and headers, whatever exception filters and pipes the app has
 * (a filter on the method, which Nest consults before the app's global ones). Otherwise the
 * method runs with the verified events, and its answer settles the replay claim (a 2xx
 * completes it, anything else releases it for MailChannels' retry). The route answers 200 unless
 * the method has its own `@HttpCode()`.
 */
export function MailChannelsWebhook (): MethodDecorator {
  return (target, key, descriptor) => {
    const handler = descriptor.value as object
    metadata.defineMetadata(WEBHOOK_ROUTE, true, handler)
    UseGuards(MailChannelsWebhookGuard)(target, key, descriptor)
    UseFilters(MailChannelsWebhookReplyFilter)(target, key, descriptor)
    // POST routes answer 201 in Nest; a delivery answered by your handler is acknowledged with 200.
    if (metadata.getMetadata(HTTP_CODE, handler) === undefined) HttpCode(200)(target, key, descriptor)
  }
}

/**
 * The verified, typed events of the delivery, as a route parameter of a method marked
 * `@MailChannelsWebhook()`: `receive (@WebhookEvents() events: WebhookEvent[])`.
 */
export const WebhookEvents: () => ParameterDecorator = createParamDecorator(webhookEventsOfContext)

/** A handler method of event type `N`: the event narrowed to its type, and the dispatch context. */
export type WebhookEventMethod<N extends WebhookEventName> = (event: EventOf<N>, context: any) => unknown

/**
 * Marks a method of any provider (an `@Injectable()` class of any module) as the handler of the
 * events of one type, several types, or every event (`'*'`):
 *
 * ```ts
 * @Injectable()
 * class Bounces {
 *   constructor (@Inject(Suppressions) private readonly suppressions: Suppressions) {}
 *   @OnWebhookEvent('hard-bounced')
 *   async suppress (event: HardBouncedEvent, { fingerprint }: DispatchContext<EventHandlerContext>) { ... }
 * }
 * ```
 *
 * Found at start-up (Nest's `DiscoveryService`, as `@OnEvent` is) and registered on the module's
 * `WebhookEventRouter`, so with the module's `seenEvents` store each event's handlers take
 * effect once. The method gets what a router handler gets: the event, and
 * `{ keyId, fingerprint, signal, log }` (plus `db` with a transactional store). A method may carry
 * several of these. Unknown type names fail the start-up, naming them.
 */
export function OnWebhookEvent<N extends WebhookEventName> (type: N | readonly N[] | '*'): <M extends WebhookEventMethod<N>>(target: object, key: string | symbol, descriptor: TypedPropertyDescriptor<M>) => void {
  return (_target, _key, descriptor) => {
    const handler = descriptor.value as object
    const types = (metadata.getMetadata(WEBHOOK_HANDLER, handler) as unknown[] | undefined) ?? []
    metadata.defineMetadata(WEBHOOK_HANDLER, [...types, type], handler)
  }
}
