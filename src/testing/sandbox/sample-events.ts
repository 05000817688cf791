import crypto from 'node:crypto'
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../events/types.js'
import type { WireEvent } from '../sign-webhook.js'

/** Options of `sampleEvents`. */
export interface SampleEventsOptions {
  /**
   * The `customer_handle` on every event.
   * @default "sandbox"
   */
  customerHandle?: string
  /**
   * The `timestamp` of the events, Unix seconds.
   * @default now
   */
  timestamp?: number
  /**
   * Index into the ten event types of the first event; later events follow in order.
   * @default 0 (`processed`)
   */
  startAt?: number
}

const SENDERS = ['news@shop.example', 'receipts@shop.example', 'alerts@app.example']
const RECIPIENTS = ['alice@example.net', 'bob@example.org', 'carol@example.com', 'dave@example.net']
const USER_AGENTS = [
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36',
]
const BOUNCES: Record<'hard-bounced' | 'soft-bounced' | 'dropped', { status: string, reason: string }> = {
  'hard-bounced': { status: '5.1.1', reason: 'User does not exist' },
  'soft-bounced': { status: '4.2.2', reason: 'Mailbox full' },
  dropped: { status: '5.7.1', reason: 'Recipient suppressed' },
}

const pick = <T>(list: readonly T[]): T => list[crypto.randomInt(list.length)]!

/**
 * Builds one realistic wire event of the given type, with the fields that type carries
 * (as MailChannels documents them). Values are invented; documentation IP ranges and example domains only.
 */
export function sampleEvent (type: WebhookEventType, customerHandle = 'sandbox', timestamp = Math.floor(Date.now() / 1000)): WireEvent {
  const requestId = crypto.randomBytes(15).toString('base64url')
  if (type === 'test') {
    return {
      customer_handle: customerHandle,
      email: 'test@mailchannels.com',
      timestamp,
      smtp_id: `<${requestId}@tx.mailchannels.net>`,
      event: 'test',
      request_id: requestId,
    }
  }
  const event: WireEvent = {
    email: pick(SENDERS),
    customer_handle: customerHandle,
    timestamp,
    event: type,
    request_id: requestId,
    smtp_id: `<${requestId}@tx.mailchannels.net>`,
    campaign_id: 'spring-sale',
    recipients: [pick(RECIPIENTS)],
  }
  if (type === 'open' || type === 'click') {
    event.user_agent = pick(USER_AGENTS)
    event.ip = `203.0.113.${crypto.randomInt(1, 255)}`
  }
  if (type === 'click') event.url = 'https://shop.example/spring-sale?utm_source=email'
  if (type === 'hard-bounced' || type === 'soft-bounced' || type === 'dropped') Object.assign(event, BOUNCES[type])
  return event
}

/**
 * Builds `count` wire events cycling through the ten types in order, so any ten consecutive
 * events cover every type (`processed`, `delivered`, `open`, `click`, `hard-bounced`,
 * `soft-bounced`, `dropped`, `complained`, `unsubscribed`, `test`).
 */
export function sampleEvents (count: number, options: SampleEventsOptions = {}): WireEvent[] {
  if (!Number.isSafeInteger(count) || count < 0) throw new TypeError('count must be a non-negative integer')
  const { customerHandle = 'sandbox', timestamp = Math.floor(Date.now() / 1000), startAt = 0 } = options
  const events: WireEvent[] = []
  for (let i = 0; i < count; i++) {
    events.push(sampleEvent(WEBHOOK_EVENT_TYPES[(startAt + i) % WEBHOOK_EVENT_TYPES.length]!, customerHandle, timestamp))
  }
  return events
}
