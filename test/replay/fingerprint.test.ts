import crypto from 'node:crypto'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import { eventFingerprint, HTTP_STATUS_BY_TYPE, verifyWebhook, type WebhookEvent } from '../../src/index.js'
import { eventFingerprints } from '../../src/replay/fingerprint.js'
import { canonicalEventText } from '../../src/replay/fingerprint.js'
import { parseEvents, toEvent } from '../../src/events/parse-events.js'
import { VerificationError } from '../../src/errors.js'
import { generateSigningKeyPair, signWebhook, toWireEvent } from '../../src/testing/index.js'

const bounce = {
  event: 'hard-bounced',
  customer_handle: 'acct_1',
  timestamp: 1700000000,
  request_id: 'req-1',
  smtp_id: '<m1@example.com>',
  email: 'sender@example.com',
  campaign_id: 'camp-1',
  recipients: ['a@example.net', 'b@example.net'],
  status: '5.1.1',
  reason: 'no such user',
}
const click = {
  event: 'click',
  customer_handle: 'acct_1',
  timestamp: 1700000000,
  request_id: 'req-1',
  smtp_id: '<m1@example.com>',
  email: 'sender@example.com',
  recipients: ['a@example.net'],
  url: 'https://example.com/x',
  ip: '192.0.2.1',
  user_agent: 'Mail/1.0',
}
const fp = (raw: Record<string, unknown>): string => eventFingerprint(toEvent(raw, 0))

/**
 * What a delivery holding this one wire event (JSON text) comes to: the event's fingerprint, or
 * the typed error that refused the delivery.
 */
function outcome (eventJson: string): string {
  try {
    const [event] = parseEvents(Buffer.from(`[${eventJson}]`), 10, null)
    return eventFingerprint(event!)
  } catch (err) {
    if (err instanceof VerificationError) return `refused: ${err.type}`
    throw err
  }
}

/** Distinct wire events: none may share a fingerprint with another; a refusal is a typed error, never a shared value. */
function assertNeverMerged (t: Test, events: Record<string, string>): void {
  const byFingerprint = new Map<string, string>()
  for (const [name, json] of Object.entries(events)) {
    const result = outcome(json)
    if (result.startsWith('refused: ')) {
      t.equal(result, 'refused: invalid_payload', `${name}: refused as an invalid payload`)
      continue
    }
    t.notOk(byFingerprint.has(result), `${name}: its own fingerprint${byFingerprint.has(result) ? ` (shared with ${byFingerprint.get(result)!})` : ''}`)
    byFingerprint.set(result, name)
  }
}

const UNKNOWN_HEAD = '"event":"deferred","customer_handle":"acct_1","timestamp":1700000000'

t.test('two different events never share a fingerprint: numbers JSON.stringify writes as null', async (t) => {
  assertNeverMerged(t, {
    'n: 1e400': `{${UNKNOWN_HEAD},"n":1e400}`,
    'n: null': `{${UNKNOWN_HEAD},"n":null}`,
    'n: -1e400': `{${UNKNOWN_HEAD},"n":-1e400}`,
    'n absent': `{${UNKNOWN_HEAD}}`,
    'n: 0': `{${UNKNOWN_HEAD},"n":0}`,
    'nested 1e400': `{${UNKNOWN_HEAD},"n":[1e400]}`,
    'nested null': `{${UNKNOWN_HEAD},"n":[null]}`,
  })
  // A number with no double value is refused with a typed error that says where it is.
  t.throws(() => parseEvents(Buffer.from(`[{${UNKNOWN_HEAD},"detail":{"n":[1e400]}}]`), 10, null),
    { name: 'VerificationError', type: 'invalid_payload', message: /Event 0: "detail" holds a number out of range/ })
})

t.test('a delivery holding a number out of double range is refused by verify with invalid_payload (400), not accepted', async (t) => {
  const keys = generateSigningKeyPair()
  const signed = signWebhook({ payload: `[{${UNKNOWN_HEAD},"n":-1e400}]`, privateKey: keys.privateKey })
  const r = await verifyWebhook({ payload: signed.body, headers: signed.headers, publicKey: keys.publicKey })
  t.equal(r.data, null)
  t.equal(r.error?.type, 'invalid_payload')
  t.equal(HTTP_STATUS_BY_TYPE[r.error!.type], 400)
  t.match(r.error?.message, /Event 0: "n" holds a number out of range/)
})

t.test('two different events never share a fingerprint: differences at any depth count', async (t) => {
  const nest = (depth: number, leaf: string): string => '['.repeat(depth) + leaf + ']'.repeat(depth)
  const events: Record<string, string> = {}
  for (const depth of [31, 32, 33, 40, 1000]) {
    events[`depth ${depth}, leaf 1`] = `{${UNKNOWN_HEAD},"deep":${nest(depth, '1')}}`
    events[`depth ${depth}, leaf 2`] = `{${UNKNOWN_HEAD},"deep":${nest(depth, '2')}}`
    events[`depth ${depth}, leaf {}`] = `{${UNKNOWN_HEAD},"deep":${nest(depth, '{"a":"x"}')}}`
  }
  assertNeverMerged(t, events)
  // Hand-built, far deeper than any recursion could go.
  const deep = (leaf: unknown): unknown => { let v = leaf; for (let i = 0; i < 100_000; i++) v = [v]; return v }
  const a = eventFingerprint({ event: 'unknown', eventName: 'x', customerHandle: 'acct_1', timestamp: 1, fields: { d: deep(1) } })
  const b = eventFingerprint({ event: 'unknown', eventName: 'x', customerHandle: 'acct_1', timestamp: 1, fields: { d: deep(2) } })
  t.not(a, b, 'two 100,000-deep values that differ only at the bottom')
})

t.test('two different events never share a fingerprint: fields the library does not model, on known types', async (t) => {
  const head = '"customer_handle":"acct_1","timestamp":1700000000,"request_id":"req-1","email":"s@example.com"'
  for (const type of ['delivered', 'processed', 'open', 'click', 'hard-bounced', 'dropped', 'complained', 'test']) {
    assertNeverMerged(t, {
      [`${type}`]: `{"event":"${type}",${head}}`,
      [`${type}, message_id a`]: `{"event":"${type}",${head},"message_id":"a"}`,
      [`${type}, message_id b`]: `{"event":"${type}",${head},"message_id":"b"}`,
      [`${type}, a field added tomorrow`]: `{"event":"${type}",${head},"added_tomorrow":{"x":1}}`,
      [`${type}, another value of it`]: `{"event":"${type}",${head},"added_tomorrow":{"x":2}}`,
      [`${type}, email null`]: `{"event":"${type}",${head.replace('"s@example.com"', 'null')}}`,
      [`${type}, email absent`]: `{"event":"${type}",${head.replace(',"email":"s@example.com"', '')}}`,
      [`${type}, a field of another type (url)`]: `{"event":"${type}",${head},"url":"https://example.com/a"}`,
      [`${type}, another url`]: `{"event":"${type}",${head},"url":"https://example.com/b"}`,
      [`${type}, a field of another type (status)`]: `{"event":"${type}",${head},"status":"5.1.1"}`,
      [`${type}, another status`]: `{"event":"${type}",${head},"status":"4.2.2"}`,
    })
  }
})

t.test('fields the library does not model stay on the typed event, as sent', async (t) => {
  const [delivered, open] = parseEvents(Buffer.from(JSON.stringify([
    { event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000, message_id: '<m1@example.com>', email: null, added_tomorrow: { x: [1, 'two'] } },
    { event: 'open', customer_handle: 'acct_1', timestamp: 1700000000, ip: '192.0.2.1' },
  ])), 10, null)
  t.strictSame(delivered, {
    event: 'delivered',
    customerHandle: 'acct_1',
    timestamp: 1700000000,
    fields: { message_id: '<m1@example.com>', email: null, added_tomorrow: { x: [1, 'two'] } },
  }, 'a known type: what it does not model is in fields, snake_case keys and values as sent')
  t.strictSame(open, { event: 'open', customerHandle: 'acct_1', timestamp: 1700000000, ip: '192.0.2.1' }, 'no fields when everything is modelled')
  // The fingerprint is the same after a JSON round trip (a queue, a database column), and when
  // the typed event is written back to the wire and parsed again.
  t.equal(eventFingerprint(JSON.parse(JSON.stringify(delivered)) as WebhookEvent), eventFingerprint(delivered!))
  t.equal(eventFingerprint(toEvent(toWireEvent(delivered!), 0)), eventFingerprint(delivered!))
})

t.test('shape: 43 base64url characters, deterministic', async (t) => {
  t.match(fp(bounce), /^[A-Za-z0-9_-]{43}$/)
  t.equal(fp(bounce), fp(structuredClone(bounce)))
})

t.test('key order and recipients order do not matter', async (t) => {
  const reversed = Object.fromEntries(Object.entries(bounce).reverse())
  t.equal(fp(reversed), fp(bounce))
  t.equal(fp({ ...bounce, recipients: ['b@example.net', 'a@example.net'] }), fp(bounce))
  // The same event re-serialised with other whitespace, as a resend may be.
  const reparsed = JSON.parse(JSON.stringify([bounce], null, 2)) as Array<Record<string, unknown>>
  t.equal(fp(reparsed[0]!), fp(bounce))
})

t.test('the pinned value: the documented canonical form of the event as received', async (t) => {
  // A stored fingerprint must keep matching after an upgrade: changing the canonical form is a new version tag.
  t.equal(fp(bounce), eventFingerprint({
    event: 'hard-bounced', customerHandle: 'acct_1', timestamp: 1700000000, requestId: 'req-1', smtpId: '<m1@example.com>',
    email: 'sender@example.com', campaignId: 'camp-1', recipients: ['b@example.net', 'a@example.net'], status: '5.1.1', reason: 'no such user',
  }), 'a hand-built typed event gives the same value')
  t.equal(fp(bounce), '7FUkrcaRxeo5KJYrtxfauKILGBjN5st_pEcz8ZhW1yw')
  t.equal(fp(click), 'Dav8g-TlLIIHPHIFwS0EqqP1I2zQpQhMZ9ksDQwHhQ4')
  // The documented form, written out by hand: the wire object, keys sorted, recipients sorted.
  const documented = 'mcwh-event-v2:{"customer_handle":"acct_1","email":"sender@example.com","event":"click","ip":"192.0.2.1",' +
    '"recipients":["a@example.net"],"request_id":"req-1","smtp_id":"<m1@example.com>","timestamp":1700000000,' +
    '"url":"https://example.com/x","user_agent":"Mail/1.0"}'
  t.equal(canonicalEventText(toEvent(click, 0)), documented)
  t.equal(fp(click), crypto.createHash('sha256').update(documented).digest('base64url'))
  t.equal(canonicalEventText(toEvent({ event: 'future', customer_handle: 'a', timestamp: 1, z: [1, { b: null, a: -0 }], recipients: ['y', 'x'] }, 0)),
    'mcwh-event-v2:{"customer_handle":"a","event":"future","recipients":["x","y"],"timestamp":1,"z":[1,{"a":0,"b":null}]}')
})

t.test('eventFingerprints is eventFingerprint for each event of a delivery', async (t) => {
  const events = [bounce, click, { ...click, message_id: 'x' }, { event: 'future', customer_handle: 'a', timestamp: 1, n: [1] }].map((raw, i) => toEvent(raw, i))
  t.same(eventFingerprints(events), events.map(eventFingerprint))
  t.same(eventFingerprints([]), [])
})

t.test('any identifying field change gives another fingerprint', async (t) => {
  const changes: Array<[string, Record<string, unknown>, Record<string, unknown>]> = [
    ['event', bounce, { event: 'soft-bounced' }],
    ['customer_handle', bounce, { customer_handle: 'acct_2' }],
    ['timestamp', bounce, { timestamp: 1700000001 }],
    ['request_id', bounce, { request_id: 'req-2' }],
    ['smtp_id', bounce, { smtp_id: '<m2@example.com>' }],
    ['email', bounce, { email: 'other@example.com' }],
    ['campaign_id', bounce, { campaign_id: 'camp-2' }],
    ['recipients (one more)', bounce, { recipients: ['a@example.net', 'b@example.net', 'c@example.net'] }],
    ['recipients (one less)', bounce, { recipients: ['a@example.net'] }],
    ['recipients (absent)', bounce, { recipients: undefined }],
    ['status', bounce, { status: '5.1.2' }],
    ['reason', bounce, { reason: 'mailbox full' }],
    ['url', click, { url: 'https://example.com/y' }],
    ['ip', click, { ip: '192.0.2.2' }],
    ['user_agent', click, { user_agent: 'Mail/2.0' }],
  ]
  const seen = new Set([fp(bounce), fp(click)])
  for (const [name, base, change] of changes) {
    const changed = fp({ ...base, ...change })
    t.not(changed, fp(base), name)
    t.notOk(seen.has(changed), `${name}: no collision with any other variant`)
    seen.add(changed)
  }
})

t.test('values cannot shift between fields', async (t) => {
  const a = toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1, request_id: 'x', smtp_id: '' }, 0)
  const b = toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1, request_id: '', smtp_id: 'x' }, 0)
  t.not(eventFingerprint(a), eventFingerprint(b))
  const c = toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1, recipients: ['a,b'] }, 0)
  const d = toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1, recipients: ['a', 'b'] }, 0)
  t.not(eventFingerprint(c), eventFingerprint(d))
})

t.test('unknown event types: the name as sent and every extra field', async (t) => {
  const raw = { event: 'deferred', customer_handle: 'acct_1', timestamp: 1700000000, recipients: ['a@example.net'], attempt: 2, detail: { code: 421, text: 'later' } }
  const base = fp(raw)
  t.equal(fp({ ...raw, detail: { text: 'later', code: 421 } }), base, 'nested key order does not matter')
  t.not(fp({ ...raw, event: 'delayed' }), base, 'event name')
  t.not(fp({ ...raw, attempt: 3 }), base, 'extra field value')
  t.not(fp({ ...raw, detail: { code: 421, text: 'later', more: true } }), base, 'nested extra field')
  t.not(fp({ ...raw, detail: [['code', 421], ['text', 'later']] }), base, 'an array never collides with an object')
  const known = toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000 }, 0)
  const unknown = toEvent({ event: 'delivered2', customer_handle: 'acct_1', timestamp: 1700000000 }, 0)
  t.not(eventFingerprint(known), eventFingerprint(unknown))
})

t.test('deeply nested extra fields of an unknown event are fingerprinted without recursion overflow (T13)', async (t) => {
  let deep: unknown = 1
  for (let i = 0; i < 100_000; i++) deep = [deep]
  const event = { event: 'unknown', eventName: 'future', customerHandle: 'acct_1', timestamp: 1, fields: { x: deep } } as const
  const fp = eventFingerprint(event as never)
  t.match(fp, /^[A-Za-z0-9_-]{43}$/)
  t.equal(eventFingerprint(event as never), fp, 'stable')
})

/**
 * The documented definition, written plainly: canonical JSON of the wire object (keys sorted at
 * every depth, recipients sorted), after the version tag. Recursive, so for shallow values only.
 */
function referenceFingerprint (wire: Record<string, unknown>): string {
  const w = { ...wire }
  if (Array.isArray(w.recipients)) w.recipients = (w.recipients as unknown[]).map((x) => referenceCanonical(x ?? null)).sort().map((x) => JSON.parse(x) as unknown)
  return crypto.createHash('sha256').update('mcwh-event-v2:' + referenceCanonical(w)).digest('base64url')
}
function referenceCanonical (value: unknown): string {
  if (Array.isArray(value)) return '[' + value.map((v) => referenceCanonical(v ?? null)).join(',') + ']'
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value)
  if (typeof value !== 'object' || value === null) return JSON.stringify(value)
  const keys = Object.keys(value).filter((k) => (value as Record<string, unknown>)[k] !== undefined).sort()
  return '{' + keys.map((k) => JSON.stringify(k) + ':' + referenceCanonical((value as Record<string, unknown>)[k])).join(',') + '}'
}
/** A typed event's wire object: typed properties under their wire names (null ones left out), `event` as sent, then `fields`. */
function wireOf (event: WebhookEvent): Record<string, unknown> {
  const names: Record<string, string> = { customerHandle: 'customer_handle', requestId: 'request_id', smtpId: 'smtp_id', campaignId: 'campaign_id', userAgent: 'user_agent' }
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(event)) if (v !== null && v !== undefined && k !== 'fields' && k !== 'eventName') out[names[k] ?? k] = v
  if (event.event === 'unknown') out.event = event.eventName
  return { ...out, ...event.fields }
}

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

t.test('the fingerprint of any parsed event is the documented form of the wire event (property)', async (t) => {
  const text = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.constantFrom('', '"', '\\', '\u2028', '\ud800', '\u0000'))
  const scalar = fc.oneof(text, fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null))
  const json = fc.letrec((tie) => ({
    value: fc.oneof({ depthSize: 'small' }, scalar, fc.array(tie('value'), { maxLength: 4 }), fc.dictionary(text.filter(parsableKey), tie('value'), { maxKeys: 4 })),
  })).value
  const optional = <T>(arb: fc.Arbitrary<T>): fc.Arbitrary<T | null> => fc.option(arb, { nil: null })
  const type = fc.oneof(fc.constantFrom('delivered', 'processed', 'dropped', 'hard-bounced', 'soft-bounced', 'open', 'click', 'complained', 'unsubscribed'), text)
  const raw = fc.record({
    event: type,
    customer_handle: text,
    timestamp: fc.oneof(fc.nat(), fc.maxSafeNat()),
    request_id: optional(text),
    smtp_id: optional(text),
    email: optional(text),
    campaign_id: optional(text),
    recipients: optional(fc.array(text, { maxLength: 5 })),
    url: optional(text),
    ip: optional(text),
    user_agent: optional(text),
    status: optional(text),
    reason: optional(text),
    message_id: optional(text),
    extra: json,
    more: json,
  }, { requiredKeys: ['event', 'customer_handle', 'timestamp'] })
  let checked = 0
  fc.assert(fc.property(raw, (r) => {
    // As received: the JSON text of the event, parsed.
    let event: WebhookEvent | undefined
    try {
      [event] = parseEvents(Buffer.from(JSON.stringify([r])), 1, null)
    } catch (err) {
      return err instanceof VerificationError && err.type === 'invalid_payload' && /"__proto__"/.test(err.message) // refused, as prototype poisoning
    }
    const wire = JSON.parse(JSON.stringify(r)) as Record<string, unknown>
    checked++
    return eventFingerprint(event!) === referenceFingerprint(wire) && eventFingerprint(event!) === referenceFingerprint(wireOf(event!))
  }), { numRuns: 2000 })
  t.ok(checked > 1900, `most generated events parse (${checked})`)
  // Hand-built events a parser would not produce: null typed properties, odd values.
  const odd = [
    { event: 'open', customerHandle: 'a', timestamp: -0, recipients: null, email: null, reason: '\ud83d' },
    { event: 'unknown', eventName: 'x', customerHandle: 'a', timestamp: 1, fields: { b: [1, { a: undefined, c: () => 1 }], a: Symbol('s'), n: [NaN, Infinity, -Infinity] } },
    { event: 'click', customerHandle: 'a', timestamp: 1.5e300, recipients: ['b', 'a', 'b'], url: 'https://x/\u2028', fields: { when: new Date(0) } },
  ]
  for (const e of odd) {
    const wire = wireOf(e as never)
    if (wire.when instanceof Date) wire.when = wire.when.toJSON()
    const fields = (e as { fields?: Record<string, unknown> }).fields
    if (fields?.b !== undefined) { wire.b = [1, {}]; delete wire.a }
    t.equal(eventFingerprint(e as never), referenceFingerprint(wire), String(e.event))
  }
})

t.test('every UTF-16 code unit in a string field, alone and in a surrogate pair, serialises as JSON.stringify does', async (t) => {
  // Strings without a character JSON escapes are quoted directly; this sweep holds that shortcut
  // to the reference for each of the 65,536 code units and for pairs.
  const wrong: string[] = []
  const check = (s: string): void => {
    const event = { event: 'open', customerHandle: 'acct_1', timestamp: 1, email: s } as WebhookEvent
    if (eventFingerprint(event) !== referenceFingerprint(wireOf(event))) wrong.push(JSON.stringify(s))
  }
  for (let unit = 0; unit <= 0xffff; unit++) check(`a${String.fromCharCode(unit)}b`)
  for (const pair of ['\ud83d\ude00', '\ud800\udc00', '\udbff\udfff', '\ude00\ud83d', 'x\ud83d']) check(pair)
  t.same(wrong, [])
})
