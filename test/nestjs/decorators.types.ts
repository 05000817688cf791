// Type-level checks of the NestJS decorators (type-checked with the project, never run):
// @OnWebhookEvent narrows the event a method takes to the types it names.
import type { ClickEvent, HardBouncedEvent, OpenEvent, WebhookEvent } from '../../src/events/types.js'
import { OnWebhookEvent } from '../../src/nestjs/index.js'

export class Handlers {
  @OnWebhookEvent('hard-bounced')
  bounced (_event: HardBouncedEvent): void {}

  @OnWebhookEvent(['open', 'click'])
  engaged (event: OpenEvent | ClickEvent): string { return event.event }

  @OnWebhookEvent('*')
  all (_event: WebhookEvent): void {}

  @OnWebhookEvent('delivered')
  noArguments (): void {}

  // @ts-expect-error an open event is not what 'hard-bounced' delivers
  @OnWebhookEvent('hard-bounced')
  wrong (_event: OpenEvent): void {}

  // @ts-expect-error not an event type
  @OnWebhookEvent('bounced')
  unknownType (): void {}
}
