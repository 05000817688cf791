// src/events/parse-events.ts by example: what a handler receives for each event type MailChannels
// sends, and how a body that is not a list of events is refused (rows F7 F11 F12 in test/README.md
// hold the same contract against a model, in test/property/parse-events.test.ts).
import t from 'tap'
import { parseEvents, toEvent } from '../../src/events/parse-events.js'
import { VerificationError } from '../../src/errors.js'

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text)
const parse = (value: unknown, maxEvents = 100, allow: ((h: string) => boolean) | null = null): unknown =>
  parseEvents(bytes(JSON.stringify(value)), maxEvents, allow)
const base = { customer_handle: 'acct_1', timestamp: 1_700_000_000, email: 'from@example.com', request_id: 'r1', smtp_id: '<m1@example.com>', campaign_id: 'c1', recipients: ['to@example.com'] }

/** The verdict of `fn`: its `VerificationError`'s type and message, or what else it did. */
function refusal (fn: () => unknown): { type: string, message: string } | string {
  try {
    fn()
    return 'accepted'
  } catch (err) {
    return err instanceof VerificationError ? { type: err.type, message: err.message } : `threw ${String(err)}`
  }
}

t.test('each type gets its typed properties camelCased; what its type does not model stays in fields, as sent', async (t) => {
  const events = parse([
    { ...base, event: 'click', url: 'https://example.com/a', user_agent: 'UA', ip: '192.0.2.1' },
    { ...base, event: 'open', user_agent: 'UA', ip: '192.0.2.1', url: 'https://example.com/b' },
    { ...base, event: 'hard-bounced', status: '5.1.1', reason: 'no such user' },
    { ...base, event: 'delivered', message_id: 'mid-1' },
  ]) as Array<Record<string, unknown>>
  const common = { customerHandle: 'acct_1', timestamp: 1_700_000_000, email: 'from@example.com', requestId: 'r1', smtpId: '<m1@example.com>', campaignId: 'c1', recipients: ['to@example.com'] }
  t.strictSame(events[0], { event: 'click', ...common, url: 'https://example.com/a', userAgent: 'UA', ip: '192.0.2.1' })
  t.strictSame(events[1], { event: 'open', ...common, userAgent: 'UA', ip: '192.0.2.1', fields: { url: 'https://example.com/b' } }, 'an open carries no url: it is a field')
  t.strictSame(events[2], { event: 'hard-bounced', ...common, status: '5.1.1', reason: 'no such user' })
  t.strictSame(events[3], { event: 'delivered', ...common, fields: { message_id: 'mid-1' } })
  t.equal(Object.getPrototypeOf(events[0]), Object.prototype, 'plain objects')
  t.notOk('fields' in events[0]!, 'no empty fields when every key is typed')
})

t.test('a type this version does not know is kept as unknown, with every non-common key in fields', async (t) => {
  const [event] = parse([{ ...base, event: 'deferred', url: 'https://example.com', attempt: 2 }]) as Array<Record<string, unknown>>
  t.equal(event!.event, 'unknown')
  t.equal(event!.eventName, 'deferred')
  t.strictSame(event!.fields, { url: 'https://example.com', attempt: 2 })
})

t.test('a typed key sent as null goes to fields; any other non-string is refused, naming the event and the key', async (t) => {
  const [event] = parse([{ ...base, event: 'dropped', reason: null }]) as Array<Record<string, unknown>>
  t.notOk('reason' in event!, 'not typed')
  t.strictSame(event!.fields, { reason: null })
  t.match(refusal(() => parse([{ ...base, event: 'click' }, { ...base, event: 'click', url: 7 }])), { type: 'invalid_payload', message: 'Event 1: "url" must be a string.' })
  t.match(refusal(() => parse([{ ...base, event: 'delivered', recipients: ['a', 1] }])), { type: 'invalid_payload', message: /"recipients" must be an array of strings/ })
  t.match(refusal(() => parse([{ ...base, event: 'delivered', timestamp: -1 }])), { type: 'invalid_payload', message: /"timestamp" must be a non-negative integer/ })
  t.match(refusal(() => parse([{ ...base, event: 'delivered', customer_handle: undefined }])), { type: 'invalid_payload', message: /"customer_handle" must be a string/ })
})

t.test('the customer policy is asked once per run of events with the same handle, and refuses the first other one by index', async (t) => {
  const asked: string[] = []
  const allow = (h: string): boolean => { asked.push(h); return h !== 'acct_x' }
  const events = ['acct_1', 'acct_1', 'acct_2', 'acct_2', 'acct_1'].map((h) => ({ ...base, customer_handle: h, event: 'processed' }))
  t.equal((parse(events, 100, allow) as unknown[]).length, 5)
  t.strictSame(asked, ['acct_1', 'acct_2', 'acct_1'])
  t.match(refusal(() => parse([...events, { ...base, customer_handle: 'acct_x', event: 'processed' }], 100, allow)), { type: 'customer_not_allowed', message: /^Event 5 belongs to a customer handle/ })
})

t.test('bodies that are not a list of events are refused with a typed error', async (t) => {
  const raw = (b: Uint8Array): unknown => refusal(() => parseEvents(b, 100, null))
  t.match(raw(new Uint8Array(0)), { type: 'invalid_payload', message: /empty/ })
  t.match(raw(Uint8Array.of(0xef, 0xbb, 0xbf, 0x5b, 0x5d)), { type: 'invalid_payload', message: /byte order mark/ })
  t.match(raw(Uint8Array.of(0x5b, 0xc3, 0x28, 0x5d)), { type: 'invalid_payload', message: /not valid UTF-8/ })
  t.match(raw(bytes('[{')), { type: 'invalid_payload', message: /not valid JSON/ })
  t.match(raw(bytes('{"event":"processed"}')), { type: 'invalid_payload', message: /must be a JSON array/ })
  t.match(raw(bytes('[1]')), { type: 'invalid_payload', message: 'Event 0 is not a JSON object.' })
  t.match(refusal(() => parse([{ ...base, event: 'processed' }, { ...base, event: 'processed' }], 1)), { type: 'payload_too_large', message: /2 events, more than maxEvents \(1\)/ })
})

t.test('prototype poisoning is refused before any other verdict on the body', async (t) => {
  const poisoned = bytes(`[${JSON.stringify({ ...base, event: 'processed' })},{"__proto__":{"admin":true}}]`)
  t.match(refusal(() => parseEvents(poisoned, 1, null)), { type: 'invalid_payload', message: /__proto__/ }, 'even when the delivery also holds too many events')
  const nested = bytes(`[${JSON.stringify({ ...base, event: 'processed', meta: { constructor: { prototype: { x: 1 } } } })}]`)
  t.match(refusal(() => parseEvents(nested, 100, null)), { type: 'invalid_payload', message: /constructor\.prototype/ })
  t.equal(({} as Record<string, unknown>).admin, undefined, 'nothing reached Object.prototype')
})

t.test('a number no double holds (1e400) is refused in any field, at any depth', async (t) => {
  const body = (fields: string): Uint8Array => bytes(`[{"event":"processed","customer_handle":"acct_1","timestamp":1,${fields}}]`)
  t.match(refusal(() => parseEvents(body('"score":1e400'), 100, null)), { type: 'invalid_payload', message: /"score" holds a number out of range/ })
  t.match(refusal(() => parseEvents(body('"meta":{"a":[1,{"b":-1e400}]}'), 100, null)), { type: 'invalid_payload', message: /"meta" holds a number out of range/ })
  t.equal((parseEvents(body('"score":1e308'), 100, null) as unknown[]).length, 1, 'the largest doubles pass')
})

t.test('toEvent keeps an own "__proto__" key of an object it is handed as data in fields', async (t) => {
  const raw = JSON.parse(`{"event":"processed","customer_handle":"acct_1","timestamp":1,"__proto__":{"admin":true}}`) as object
  const event = toEvent(raw, 0) as unknown as { fields: Record<string, unknown> }
  t.ok(Object.hasOwn(event.fields, '__proto__'), 'an own key')
  t.equal(Object.getPrototypeOf(event.fields), Object.prototype, 'not the prototype')
})
