import { utf8 } from '#crypto'
import sjson from 'secure-json-parse'
import { VerificationError } from '../errors.js'
import type { WebhookEvent, WebhookEventType } from './types.js'

/** Decides whether a `customer_handle` may deliver to this endpoint. */
export type CustomerHandlePolicy = (customerHandle: string) => boolean

const KNOWN = new Set<string>([
  'processed', 'delivered', 'open', 'click', 'hard-bounced', 'soft-bounced', 'dropped', 'complained', 'unsubscribed', 'test',
] satisfies WebhookEventType[])

/** Keys mapped on every event; anything else goes to `fields` of an unknown event. */
const COMMON_KEYS = new Set(['event', 'customer_handle', 'timestamp', 'email', 'request_id', 'smtp_id', 'campaign_id', 'recipients'])

const invalid = (message: string): VerificationError => new VerificationError('invalid_payload', message)
const POISONED = 'The body contains a forbidden "__proto__" or "constructor.prototype" key.'

/**
 * Whether secure-json-parse would reject this parse: an own `__proto__` key, or a
 * `constructor` object with an own `prototype`, anywhere in the tree. Its own pre-scan of
 * the text costs ~5% of JSON.parse, so for the usual shape it is answered exactly and
 * cheaply: when the text holds exactly one `{` per array element and every element is an
 * object, the elements are the only objects (a `constructor` cannot hold one), and only
 * their own keys need a look. Anything else goes through secure-json-parse itself.
 */
function isPoisoned (parsed: unknown, text: string): boolean {
  if (Array.isArray(parsed) && countUpTo(text, '{', parsed.length + 1) === parsed.length) {
    let flat = true
    for (let i = 0; i < parsed.length; i++) {
      const e: unknown = parsed[i]
      if (typeof e !== 'object' || e === null || Array.isArray(e)) flat = false
      else if (Object.hasOwn(e, '__proto__')) return true
    }
    if (flat) return false
  }
  if (!text.includes('\\u') && !SUSPECT_KEY.test(text)) return false // its own pre-check could not match either
  try {
    sjson.parse(text)
    return false
  } catch (err) {
    if (err instanceof SyntaxError && /prototype/i.test(err.message)) return true
    throw invalid('The body is not valid JSON.')
  }
}
const SUSPECT_KEY = /__proto__|constructor/

/** How many times `ch` occurs in `text`, counting no further than `limit`. */
function countUpTo (text: string, ch: string, limit: number): number {
  let n = 0
  for (let p = text.indexOf(ch); p !== -1 && n < limit; p = text.indexOf(ch, p + 1)) n++
  return n
}

/**
 * Decodes and parses *verified* bytes into typed events.
 * Fatal UTF-8 (no BOM), prototype-safe JSON, a top-level array of at most `maxEvents`
 * flat event objects; every `customer_handle` must pass `allowCustomer`.
 * Events are rebuilt from known keys, so nothing from the body is spread into them.
 */
export function parseEvents (body: Uint8Array, maxEvents: number, allowCustomer: CustomerHandlePolicy | null): WebhookEvent[] {
  if (body.length === 0) throw invalid('The body is empty; expected a JSON array of events.')
  if (body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf) throw invalid('The body starts with a UTF-8 byte order mark; expected plain JSON.')
  // Fatal UTF-8: the port decodes ASCII the cheapest way it can.
  const text = utf8(body)
  if (text === undefined) throw invalid('The body is not valid UTF-8.')

  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (err) {
    const poisoned = err instanceof SyntaxError && /prototype/i.test(err.message)
    throw invalid(poisoned ? POISONED : 'The body is not valid JSON.')
  }
  // Prototype poisoning (__proto__, constructor.prototype keys) is refused, as secure-json-parse does.
  if (isPoisoned(parsed, text)) throw invalid(POISONED)
  if (!Array.isArray(parsed)) throw invalid('The body must be a JSON array of events.')
  if (parsed.length > maxEvents) {
    throw new VerificationError('payload_too_large', `The delivery holds ${parsed.length} events, more than maxEvents (${maxEvents}).`)
  }

  const events = new Array<WebhookEvent>(parsed.length)
  for (let i = 0; i < parsed.length; i++) {
    const event = toEvent(parsed[i], i)
    if (allowCustomer !== null && !allowCustomer(event.customerHandle)) {
      throw new VerificationError('customer_not_allowed', `Event ${i} belongs to a customer handle that is not in customerHandles.`)
    }
    events[i] = event
  }
  return events
}

/** A string, or absent (`undefined`/`null` on the wire). Throws for anything else. */
function optString (v: unknown, key: string, i: number): string | undefined {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'string') throw invalid(`Event ${i}: "${key}" must be a string.`)
  return v
}

/** Maps one wire event (snake_case) to a `WebhookEvent`. Exported for the test kit and property tests. */
export function toEvent (raw: unknown, i: number): WebhookEvent {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw invalid(`Event ${i} is not a JSON object.`)
  const r = raw as Record<string, unknown>
  const name = r.event
  if (typeof name !== 'string') throw invalid(`Event ${i}: "event" must be a string.`)
  const customerHandle = r.customer_handle
  if (typeof customerHandle !== 'string') throw invalid(`Event ${i}: "customer_handle" must be a string.`)
  const timestamp = r.timestamp
  if (typeof timestamp !== 'number' || !Number.isSafeInteger(timestamp) || timestamp < 0) {
    throw invalid(`Event ${i}: "timestamp" must be a non-negative integer (Unix seconds).`)
  }

  // Plain assignments in a fixed order (no helper per key): this runs once per event,
  // up to maxEvents times per delivery, and keeps the events' shapes few.
  const event: Record<string, unknown> = { event: name, customerHandle, timestamp }
  let v = optString(r.email, 'email', i)
  if (v !== undefined) event.email = v
  v = optString(r.request_id, 'request_id', i)
  if (v !== undefined) event.requestId = v
  v = optString(r.smtp_id, 'smtp_id', i)
  if (v !== undefined) event.smtpId = v
  v = optString(r.campaign_id, 'campaign_id', i)
  if (v !== undefined) event.campaignId = v
  const recipients = r.recipients
  if (recipients !== undefined && recipients !== null) {
    if (!Array.isArray(recipients)) throw invalid(`Event ${i}: "recipients" must be an array of strings.`)
    const copy = new Array<string>(recipients.length)
    for (let j = 0; j < recipients.length; j++) {
      const x: unknown = recipients[j]
      if (typeof x !== 'string') throw invalid(`Event ${i}: "recipients" must be an array of strings.`)
      copy[j] = x
    }
    event.recipients = copy
  }

  switch (name) {
    case 'click':
      v = optString(r.url, 'url', i)
      if (v !== undefined) event.url = v
    // falls through: a click carries what an open carries
    case 'open':
      v = optString(r.user_agent, 'user_agent', i)
      if (v !== undefined) event.userAgent = v
      v = optString(r.ip, 'ip', i)
      if (v !== undefined) event.ip = v
      break
    case 'hard-bounced':
    case 'soft-bounced':
    case 'dropped':
      v = optString(r.status, 'status', i)
      if (v !== undefined) event.status = v
      v = optString(r.reason, 'reason', i)
      if (v !== undefined) event.reason = v
      break
    default:
      if (!KNOWN.has(name)) {
        const fields: Record<string, unknown> = {}
        for (const key of Object.keys(r)) if (!COMMON_KEYS.has(key)) fields[key] = r[key]
        event.event = 'unknown'
        event.eventName = name
        event.fields = fields
      }
  }
  return event as unknown as WebhookEvent
}
