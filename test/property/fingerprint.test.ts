// The event fingerprint's canonical encoding: injective (two events share a text only when they
// are the same event as received), and blind to what a resend may change (key order, whitespace,
// the recipients' order). See src/replay/fingerprint.ts for the definition.
import crypto from 'node:crypto'
import { isDeepStrictEqual } from 'node:util'
import fc from 'fast-check'
import t from 'tap'
import { check, KEYS, NOW_MS, sign } from './helpers/fixtures.js'
import { eventFingerprint, verifyWebhook, type WebhookEvent } from '../../src/index.js'
import { parseEvents } from '../../src/events/parse-events.js'
import { canonicalEventText } from '../../src/replay/fingerprint.js'
import { referenceCanonicalText } from '../replay/helpers/canonical-reference.js'

const HEAD = 'mcwh-event-v2:'

// Small alphabets on purpose: generated pairs then often agree in part or in full, so both sides
// of "same text if and only if same event" are exercised.
const text = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('', 'a', 'b', '"', '\\', ',', ':', '{', '}', '[', ']', 'a,b', '"a":1', '\u2028', '\ud800', '\udc00', '\ud83d\ude00', '\u0000') },
  fc.string({ maxLength: 4 }),
  fc.string({ unit: 'binary', maxLength: 3 }),
)
/**
 * On Node 24.21.0, JSON.parse (V8) was seen to read an object key written with an escape as an
 * earlier key once many objects had been parsed: `{"\\":0}` then `{"\ud800":0}` gave the key
 * `\` (a plain .mjs loop, Node 24.21.0 only; never on Node 20 or 22), and a re-serialised event
 * whose keys held `\"` was read with other keys. The parse, not the fingerprint, merges such keys,
 * so on Node 24 and later the generated keys hold no character JSON escapes (docs/replay.md,
 * "The fingerprint", says so). Values are unaffected and keep every character.
 */
const PARSE_MISREADS_ESCAPED_KEYS = Number(process.versions.node.split('.')[0]) >= 24
const ESCAPED_IN_JSON = /["\\\u0000-\u001f\ud800-\udfff]/
const parsableKey = (k: string): boolean => !PARSE_MISREADS_ESCAPED_KEYS || !ESCAPED_IN_JSON.test(k)
const key = fc.oneof(fc.constantFrom('a', 'b', 'n', 'message_id', 'email', 'url', 'status', 'recipients', 'x"y', ''), text).filter(parsableKey)
const number = fc.oneof(fc.constantFrom(0, -0, 1, -1, 0.5, 1e21, 5e-324, 2 ** 53), fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }))
const json: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' },
    fc.oneof(text, number, fc.boolean(), fc.constant(null)),
    fc.array(tie('value'), { maxLength: 3 }),
    fc.dictionary(key, tie('value'), { maxKeys: 3 })),
})).value
const maybe = <T>(arb: fc.Arbitrary<T>): fc.Arbitrary<T | null> => fc.option(arb, { nil: null, freq: 3 })
/** A wire event as the service may send it: known and unknown types, modelled and unmodelled fields. */
const wireEvent = fc.record({
  event: fc.oneof(fc.constantFrom('delivered', 'open', 'click', 'hard-bounced', 'dropped', 'test'), fc.constantFrom('deferred', 'unknown', '')),
  customer_handle: fc.constantFrom('acct_1', 'acct_2'),
  timestamp: fc.constantFrom(0, 1700000000, Number.MAX_SAFE_INTEGER),
  email: maybe(text),
  request_id: maybe(text),
  recipients: maybe(fc.array(text, { maxLength: 3 })),
  url: maybe(text),
  status: maybe(text),
  user_agent: maybe(text),
  message_id: maybe(text),
  n: json,
  detail: json,
}, { requiredKeys: ['event', 'customer_handle', 'timestamp'] })

/** Parsed as a receiver parses a delivery of this one event. */
const parse = (wire: unknown): WebhookEvent => parseEvents(Buffer.from(JSON.stringify([wire])), 1, null)[0]!

/** What the encoding must tell apart: the wire object as JSON gives it, -0 as 0, recipients as a multiset. */
function normalise (wire: Record<string, unknown>): Record<string, unknown> {
  const plain = JSON.parse(JSON.stringify(wire), (_k, v: unknown) => Object.is(v, -0) ? 0 : v) as Record<string, unknown>
  if (Array.isArray(plain.recipients)) plain.recipients = (plain.recipients as unknown[]).map((x) => JSON.stringify(x)).sort().map((x) => JSON.parse(x) as unknown)
  return plain
}

t.test('the canonical text reads back as the event (so no two events share one)', async (t) => {
  await check(t, fc.property(wireEvent, (wire) => {
    const canonical = canonicalEventText(parse(wire))
    if (!canonical.startsWith(HEAD)) return false
    // A decodable encoding is injective: the event is recovered from its text alone.
    return isDeepStrictEqual(JSON.parse(canonical.slice(HEAD.length)), normalise(wire))
  }), 3000)
})

t.test('two events have the same text exactly when they are the same event', async (t) => {
  let same = 0
  await check(t, fc.property(wireEvent, wireEvent, (a, b) => {
    const equalText = canonicalEventText(parse(a)) === canonicalEventText(parse(b))
    const equalEvent = isDeepStrictEqual(normalise(a), normalise(b))
    if (equalEvent) same++
    return equalText === equalEvent && (eventFingerprint(parse(a)) === eventFingerprint(parse(b))) === equalEvent
  }), 3000)
  // Also the nearest neighbours: one value changed, or one key added.
  await check(t, fc.property(wireEvent, key, json, (a, k, v) => {
    const b = { ...a, [k]: v }
    if (k === 'event' || k === 'customer_handle' || k === 'timestamp' || k === 'recipients') return true
    let eb: WebhookEvent
    try { eb = parse(b) } catch { return true } // a modelled key with a value of the wrong type is refused
    const equalEvent = isDeepStrictEqual(normalise(a), normalise(b))
    if (equalEvent) same++
    return (eventFingerprint(parse(a)) === eventFingerprint(eb)) === equalEvent
  }), 3000)
  t.ok(same > 0, `equal pairs were generated too (${same})`)
})

/** The same value with its keys in another order at every depth (the order given by `seed`). */
function reorder (value: unknown, seed: number): unknown {
  if (Array.isArray(value)) return value.map((v, i) => reorder(v, seed + i))
  if (typeof value !== 'object' || value === null) return value
  const keys = Object.keys(value)
  const shuffled = keys.map((k, i) => [k, ((i + 1) * 2654435761 + seed) % 1000] as const).sort((x, y) => x[1] - y[1]).map(([k]) => k)
  return Object.fromEntries(shuffled.map((k) => [k, reorder((value as Record<string, unknown>)[k], seed * 31 + 7)]))
}

t.test('a resend re-serialised (keys in another order, other whitespace, recipients reordered) keeps its fingerprint', async (t) => {
  await check(t, fc.asyncProperty(wireEvent, fc.nat(), fc.constantFrom(0, 1, 2, '\t', ' \r\n'), async (wire, seed, indent) => {
    const again = reorder(wire, seed) as Record<string, unknown>
    if (Array.isArray(again.recipients)) again.recipients = [...(again.recipients as unknown[])].reverse()
    const body = JSON.stringify([again], null, indent)
    // Through the public verify, signed as a delivery would be.
    const d = sign({ body })
    const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: KEYS.publicKey, now: NOW_MS })
    if (r.error !== null) return false
    return eventFingerprint(r.data[0]!) === eventFingerprint(parse(wire))
  }), 500)
})

t.test('the fingerprint survives a JSON round trip of the typed event (a queue, a database)', async (t) => {
  await check(t, fc.property(wireEvent, (wire) => {
    const event = parse(wire)
    return eventFingerprint(JSON.parse(JSON.stringify(event)) as WebhookEvent) === eventFingerprint(event)
  }), 2000)
})

// The text's fast path (constant pieces per key, the customer handle and the event name quoted
// once, the fields' keys merged by slot) against its definition as it was before that path: the
// fingerprints must never change, for parsed events and hand-built ones alike.
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: text },
  { weight: 2, arbitrary: number },
  fc.constantFrom(null, undefined, true, false, NaN, Infinity, -Infinity, () => 1),
  fc.constantFrom(new Date(0), { toJSON: () => 'x"y' }, { toJSON: () => undefined }),
  json,
)
/** Typed property names, their wire keys and keys around them in sort order, as `fields` keys. */
const fieldKey = fc.oneof(
  key,
  fc.constantFrom('campaign_id', 'customer_handle', 'email', 'event', 'ip', 'reason', 'recipients', 'request_id', 'smtp_id', 'status',
    'timestamp', 'url', 'user_agent', 'a', 'c', 'customer', 'events', 'reasons', 'recipient', 'smtp', 'time', 'user_agent_', 'z', '~', '0', '10', '9', '__proto__'),
)
const handBuilt = fc.record({
  event: fc.oneof(fc.constantFrom('delivered', 'open', 'click', 'hard-bounced', 'soft-bounced', 'dropped', 'processed', 'complained', 'unsubscribed', 'test', 'unknown'), anyValue),
  eventName: anyValue,
  customerHandle: fc.oneof(fc.constantFrom('acct_1', 'acct_2', 'a"b', '\ud800'), anyValue),
  timestamp: fc.oneof(fc.constantFrom(0, -0, 1700000000, 1.5, 1e21), anyValue),
  campaignId: anyValue,
  email: anyValue,
  ip: anyValue,
  reason: anyValue,
  recipients: fc.oneof(fc.array(text, { maxLength: 1 }), fc.array(anyValue, { maxLength: 3 }), anyValue),
  requestId: anyValue,
  smtpId: anyValue,
  status: anyValue,
  url: anyValue,
  userAgent: anyValue,
  fields: fc.oneof(
    { weight: 3, arbitrary: fc.dictionary(fieldKey, anyValue, { maxKeys: 4 }) },
    fc.dictionary(fieldKey, anyValue, { minKeys: 9, maxKeys: 12 }),
    fc.constantFrom(undefined, null, {}, [], ['a', 'b'], 'fields', 3),
  ),
}, { requiredKeys: [] })

t.test('the canonical text is the same as its reference definition (src/replay/fingerprint.ts before its fast path)', async (t) => {
  const sameText = (event: WebhookEvent): boolean => {
    let expected: string
    try { expected = referenceCanonicalText(event) } catch (err) {
      // Both refuse the same events (a BigInt, a cycle), with the same error.
      try { canonicalEventText(event) } catch (e) { return (e as Error).message === (err as Error).message }
      return false
    }
    return canonicalEventText(event) === expected && eventFingerprint(event) === crypto.hash('sha256', expected, 'base64url')
  }
  await check(t, fc.property(wireEvent, (wire) => sameText(parse(wire))), 3000)
  await check(t, fc.property(handBuilt, (raw) => sameText(raw as unknown as WebhookEvent)), 5000)
  // The handle quoted once is per handle: events of several customers one after the other.
  await check(t, fc.property(fc.array(handBuilt, { minLength: 2, maxLength: 6 }), (raws) => raws.every((raw) => sameText(raw as unknown as WebhookEvent))), 500)
  // A fields object with inherited keys only, and one whose own key shadows a typed property.
  const inherited = Object.create({ reason: 'inherited' }) as Record<string, unknown>
  t.ok(sameText({ event: 'delivered', customerHandle: 'acct_1', timestamp: 1, fields: inherited } as unknown as WebhookEvent))
  t.ok(sameText({ event: 'dropped', customerHandle: 'acct_1', timestamp: 1, reason: 'a', fields: { reason: 'b', status: '5.0.0' } } as unknown as WebhookEvent))
  t.ok(sameText({ event: 'delivered', customerHandle: 'acct_1', timestamp: 1, fields: { recipients: ['b', 'a'], z: 1, a: 2 } } as unknown as WebhookEvent))
})
