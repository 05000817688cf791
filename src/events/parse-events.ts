import { utf8 } from '#crypto'
import { VerificationError } from '../errors.js'
import type { WebhookEvent, WebhookEventType } from './types.js'

/** Decides whether a `customer_handle` may deliver to this endpoint. */
export type CustomerHandlePolicy = (customerHandle: string) => boolean

const invalid = (message: string): VerificationError => new VerificationError('invalid_payload', message)
const POISONED = 'The body contains a forbidden "__proto__" or "constructor.prototype" key.'

/**
 * Whether the parse holds what secure-json-parse refuses (https://github.com/fastify/secure-json-parse):
 * an own `__proto__` key, or a `constructor` object with an own `prototype`, anywhere in the
 * tree. For the usual shape it is answered exactly and cheaply: when the text holds exactly one
 * `{` per array element and every element is an object, the elements are the only objects (a
 * `constructor` cannot hold one), and only their own keys need a look. Otherwise, when the text
 * could spell either key (plainly or with `\u` escapes), the whole tree is walked. Done here
 * rather than with secure-json-parse, whose text scan repeats JSON.parse's work, to keep the
 * Worker bundle small (docs/design-notes.md).
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
  if (!text.includes('\\u') && !SUSPECT_KEY.test(text)) return false // neither key can be in the tree
  // Iterative, not recursive: a deeply nested body must not overflow the stack.
  const stack: unknown[] = [parsed]
  while (stack.length > 0) {
    const node = stack.pop()
    if (typeof node !== 'object' || node === null) continue
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) stack.push(node[i])
      continue
    }
    if (Object.hasOwn(node, '__proto__')) return true
    const ctor = (node as { constructor?: unknown }).constructor
    if (Object.hasOwn(node, 'constructor') && typeof ctor === 'object' && ctor !== null && Object.hasOwn(ctor, 'prototype')) return true
    for (const key in node) stack.push((node as Record<string, unknown>)[key])
  }
  return false
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
 * Events are rebuilt from known keys, so nothing from the body is spread into them; the keys an
 * event's type does not model are copied into its `fields`, as sent.
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
  // Prototype poisoning (__proto__, constructor.prototype keys) is refused, as secure-json-parse
  // does, before any other verdict on the body. For an array of events it is settled while the
  // events are built (see `suspect`); every other outcome asks isPoisoned first.
  if (!Array.isArray(parsed)) throw poisonedOr(parsed, text, invalid('The body must be a JSON array of events.'))
  if (parsed.length > maxEvents) {
    throw poisonedOr(parsed, text, new VerificationError('payload_too_large', `The delivery holds ${parsed.length} events, more than maxEvents (${maxEvents}).`))
  }

  const events = new Array<WebhookEvent>(parsed.length)
  // Most deliveries hold one customer handle: the policy is asked again only when it changes.
  let accepted: string | null = null
  suspect = false
  let i = 0
  try {
    for (; i < parsed.length; i++) {
      const event = toEvent(parsed[i], i)
      const handle = event.customerHandle
      if (handle !== accepted) {
        if (allowCustomer !== null && !allowCustomer(handle)) {
          throw new VerificationError('customer_not_allowed', `Event ${i} belongs to a customer handle that is not in customerHandles.`)
        }
        accepted = handle
      }
      events[i] = event
    }
  } catch (err) {
    throw poisonedOr(parsed, text, err)
  }
  if (suspect && isPoisoned(parsed, text)) throw invalid(POISONED)
  return events
}

/** The poisoning verdict if the parse is poisoned, else `err`: poisoning is reported first. */
const poisonedOr = (parsed: unknown, text: string, err: unknown): unknown => isPoisoned(parsed, text) ? invalid(POISONED) : err

/**
 * Set by `otherFields` when an event holds what could carry prototype poisoning: an own
 * `__proto__` key or an object value (a `constructor` key only poisons with one). Every other
 * key of an event is a typed one, whose value is a string, a number or an array of strings (or
 * the event is refused), so when no event sets it, the array and its events are the only
 * objects and none holds `__proto__` or a `constructor` object: no walk is needed.
 */
let suspect = false

const hasOwnProperty = Object.prototype.hasOwnProperty

const notString = (key: string, i: number): VerificationError => invalid(`Event ${i}: "${key}" must be a string.`)

/** What the type-specific keys of each type are: bits of `KIND_OF`, per wire key. */
const OPEN = 1
const CLICK = 2
const BOUNCE = 4
/** Known types without type-specific keys map to 0; an unknown type is not in it. */
const KIND_OF: ReadonlyMap<string, number> = new Map([
  ['processed', 0], ['delivered', 0], ['complained', 0], ['unsubscribed', 0], ['test', 0],
  ['open', OPEN], ['click', CLICK], ['hard-bounced', BOUNCE], ['soft-bounced', BOUNCE], ['dropped', BOUNCE],
] satisfies Array<[WebhookEventType, number]>)

/**
 * Whether `key` is a typed property on events of this kind (a known type's bits, or -1 for an
 * unknown type, which types only the common keys). A switch on the key instead of a Set per
 * type: this runs for every key of every event with fields.
 */
function isTypedKey (key: string, kind: number): boolean {
  switch (key) {
    case 'event': case 'customer_handle': case 'timestamp': case 'email': case 'request_id': case 'smtp_id': case 'campaign_id': case 'recipients':
      return true
    case 'url':
      return kind === CLICK
    case 'user_agent': case 'ip':
      return kind === CLICK || kind === OPEN
    case 'status': case 'reason':
      return kind === BOUNCE
    default:
      return false
  }
}

/**
 * Events are plain objects made by this constructor, whose prototype is `Object.prototype`: the
 * same objects as a literal gives (prototype, own properties, their order), but V8 sizes a
 * constructor's objects for the properties they end up with (in-object slack tracking), so the
 * optional properties added one by one need no separate backing store. This runs once per event.
 */
const TypedEvent = function TypedEvent () {} as unknown as new () => Record<string, unknown>
TypedEvent.prototype = Object.prototype

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

  // Plain assignments in a fixed order (no helper per key): this runs once per event, up to
  // maxEvents times per delivery, and keeps the events' shapes few. `typed` counts the wire
  // keys taken as typed properties: when the event holds more keys, the rest go to `fields`.
  // A key that is absent or null is not typed (a null goes to `fields`); any other non-string
  // is refused.
  const event = new TypedEvent()
  event.event = name
  event.customerHandle = customerHandle
  event.timestamp = timestamp
  let typed = 3
  let nulls = false // a typed key sent as null: it goes to `fields`
  let v = r.email
  if (typeof v === 'string') { event.email = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('email', i)
  v = r.request_id
  if (typeof v === 'string') { event.requestId = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('request_id', i)
  v = r.smtp_id
  if (typeof v === 'string') { event.smtpId = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('smtp_id', i)
  v = r.campaign_id
  if (typeof v === 'string') { event.campaignId = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('campaign_id', i)
  const recipients = r.recipients
  if (recipients === null) nulls = true
  else if (recipients !== undefined) {
    if (!Array.isArray(recipients)) throw invalid(`Event ${i}: "recipients" must be an array of strings.`)
    for (let j = 0; j < recipients.length; j++) {
      if (typeof recipients[j] !== 'string') throw invalid(`Event ${i}: "recipients" must be an array of strings.`)
    }
    // The array itself, not a copy: nothing else holds the parse's array (a copy per event was
    // a measurable share of building 10,000 events, mostly in garbage collection).
    event.recipients = recipients
    typed++
  }

  const kind = KIND_OF.get(name)
  if (kind === CLICK) {
    v = r.url
    if (typeof v === 'string') { event.url = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('url', i)
  }
  if (kind === CLICK || kind === OPEN) {
    v = r.user_agent
    if (typeof v === 'string') { event.userAgent = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('user_agent', i)
    v = r.ip
    if (typeof v === 'string') { event.ip = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('ip', i)
  } else if (kind === BOUNCE) {
    v = r.status
    if (typeof v === 'string') { event.status = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('status', i)
    v = r.reason
    if (typeof v === 'string') { event.reason = v; typed++ } else if (v === null) nulls = true; else if (v !== undefined) throw notString('reason', i)
  } else if (kind === undefined) {
    event.event = 'unknown'
    event.eventName = name
    event.fields = otherFields(r, -1, i, nulls) ?? {}
    return event as unknown as WebhookEvent
  }
  // Counting keys costs no allocation; only an event with keys left over pays for `fields`.
  let keys = 0
  for (const _ in r) keys++
  if (keys !== typed) {
    const fields = otherFields(r, kind, i, nulls)
    if (fields !== null) event.fields = fields
  }
  return event as unknown as WebhookEvent
}

/**
 * The event's keys that are not typed properties, with their values as sent (`null` when there
 * are none): keys the type does not model, and modelled keys sent as `null`. Every number in
 * them must be finite.
 */
function otherFields (r: Record<string, unknown>, kind: number, i: number, nulls: boolean): Record<string, unknown> | null {
  let fields: Record<string, unknown> | null = null
  let n = 0
  for (const key in r) {
    // A typed key is skipped without reading its value unless one was sent as null.
    if (isTypedKey(key, kind) && (!nulls || r[key] !== null)) continue
    // Not Object.hasOwn: V8 proves this form true for a for-in key of the object itself, where
    // Object.hasOwn took over half of building an event with fields.
    if (!hasOwnProperty.call(r, key)) continue
    const value = r[key]
    if (typeof value === 'object' && value !== null) {
      suspect = true
      assertFinite(value, key, i)
    } else if (typeof value === 'number' && !Number.isFinite(value)) {
      throw outOfRange(key, i)
    }
    fields ??= {}
    // An own "__proto__" key (refused in a body, possible in an object handed to toEvent) stays data.
    if (key === '__proto__') {
      suspect = true
      Object.defineProperty(fields, key, { value, enumerable: true, writable: true, configurable: true })
      n++
      continue
    }
    // One store site per position: in a delivery whose events share their extra keys, each site
    // sees one key and V8 inlines it, where a single site goes megamorphic (a quarter of the
    // cost of `fields`, measured).
    switch (n++) {
      case 0: fields[key] = value; break
      case 1: fields[key] = value; break
      case 2: fields[key] = value; break
      case 3: fields[key] = value; break
      default: fields[key] = value
    }
  }
  return fields
}

/**
 * Refuses a number JSON.parse could only give as ±Infinity (`1e400`): no double holds it, so the
 * event could not be kept apart from one that sends `1e401`, and JSON (a queue, a log, a database)
 * would write it back as `null`, a different event. Iterative: values may nest to any depth.
 */
function assertFinite (value: unknown, key: string, i: number): void {
  if (typeof value !== 'object' || value === null) {
    if (typeof value === 'number' && !Number.isFinite(value)) throw outOfRange(key, i)
    return
  }
  const stack: object[] = [value]
  while (stack.length > 0) {
    const node = stack.pop() as Record<string, unknown> | unknown[]
    const items = Array.isArray(node) ? node : Object.values(node)
    for (let j = 0; j < items.length; j++) {
      const item = items[j]
      if (typeof item === 'object' && item !== null) stack.push(item)
      else if (typeof item === 'number' && !Number.isFinite(item)) throw outOfRange(key, i)
    }
  }
}

const outOfRange = (key: string, i: number): VerificationError =>
  invalid(`Event ${i}: ${JSON.stringify(key)} holds a number out of range (it has no finite double value, e.g. 1e400).`)
