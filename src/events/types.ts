/** The event types MailChannels sends (`test` comes from the validate endpoint). */
export const WEBHOOK_EVENT_TYPES = [
  'processed',
  'delivered',
  'open',
  'click',
  'hard-bounced',
  'soft-bounced',
  'dropped',
  'complained',
  'unsubscribed',
  'test',
] as const

export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number]

/** Fields every event may carry, camelCased from the wire's snake_case. */
export interface WebhookEventBase {
  /** Account (or sub-account) handle that sent the message. Always present. */
  customerHandle: string
  /** Unix seconds, UTC. Always present. */
  timestamp: number
  /** The sender address. */
  email?: string
  /** The `request_id` of the send call that produced the message. */
  requestId?: string
  /** The Message-Id. */
  smtpId?: string
  campaignId?: string
  recipients?: string[]
  /**
   * Every field of the event as sent that it does not carry as a typed property: snake_case keys,
   * values as sent. On a known type, present only when there is one: a field this version does not
   * model (`message_id`, a field the service adds later) or a modelled one sent as `null`. These
   * fields take part in `eventFingerprint`, so an event is never mistaken for another that differs
   * only there.
   */
  fields?: Readonly<Record<string, unknown>>
}

export interface ProcessedEvent extends WebhookEventBase { event: 'processed' }
export interface DeliveredEvent extends WebhookEventBase { event: 'delivered' }
export interface OpenEvent extends WebhookEventBase { event: 'open', userAgent?: string, ip?: string }
export interface ClickEvent extends WebhookEventBase { event: 'click', userAgent?: string, ip?: string, url?: string }
export interface HardBouncedEvent extends WebhookEventBase {
  event: 'hard-bounced'
  /** SMTP enhanced status, e.g. `"5.1.1"`. */
  status?: string
  reason?: string
}
export interface SoftBouncedEvent extends WebhookEventBase { event: 'soft-bounced', status?: string, reason?: string }
export interface DroppedEvent extends WebhookEventBase { event: 'dropped', status?: string, reason?: string }
export interface ComplainedEvent extends WebhookEventBase { event: 'complained' }
export interface UnsubscribedEvent extends WebhookEventBase { event: 'unsubscribed' }
export interface TestEvent extends WebhookEventBase { event: 'test' }

/**
 * An event type this version does not know yet. It is kept, not dropped, so a new
 * provider event never fails a delivery; `event` is the literal `'unknown'` so that
 * `switch (event.event)` still narrows the known types.
 */
export interface UnknownWebhookEvent extends WebhookEventBase {
  event: 'unknown'
  /** The `event` value as sent. */
  eventName: string
  /** Every field of the event other than the common ones (and common ones sent as `null`), as sent (snake_case keys). */
  fields: Record<string, unknown>
}

/** A verified event, narrowed by `event`. */
export type WebhookEvent =
  | ProcessedEvent
  | DeliveredEvent
  | OpenEvent
  | ClickEvent
  | HardBouncedEvent
  | SoftBouncedEvent
  | DroppedEvent
  | ComplainedEvent
  | UnsubscribedEvent
  | TestEvent
  | UnknownWebhookEvent
