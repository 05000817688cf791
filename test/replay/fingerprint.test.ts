import crypto from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import { eventFingerprint, FINGERPRINT_FIELDS, type WebhookEvent } from '../../src/index.js'
import { toEvent } from '../../src/events/parse-events.js'

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

t.test('the pinned value does not change between versions', async (t) => {
  // A stored fingerprint must keep matching after an upgrade: changing the canonical form breaks deployments.
  t.equal(fp(bounce), eventFingerprint({
    event: 'hard-bounced', customerHandle: 'acct_1', timestamp: 1700000000, requestId: 'req-1', smtpId: '<m1@example.com>',
    email: 'sender@example.com', campaignId: 'camp-1', recipients: ['b@example.net', 'a@example.net'], status: '5.1.1', reason: 'no such user',
  }))
  t.equal(fp(bounce), 'JLOlRcyREWc7E75q82N6cpL0Rr3dzWNvUd4Ap2hBZa4')
  t.equal(fp(click), 'IiAUuHwuKmvrvlmivHo-yes3ZfB5IXLDGIqGfhOIyMY')
  // The documented canonical form, computed by hand.
  const documented = JSON.stringify(['mcwh-event-v1', ['event', 'click'], ['customerHandle', 'acct_1'], ['timestamp', 1700000000],
    ['requestId', 'req-1'], ['smtpId', '<m1@example.com>'], ['email', 'sender@example.com'], ['recipients', ['a@example.net']],
    ['url', 'https://example.com/x'], ['ip', '192.0.2.1'], ['userAgent', 'Mail/1.0']])
  t.equal(fp(click), crypto.createHash('sha256').update(documented).digest('base64url'))
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

t.test('FINGERPRINT_FIELDS lists what is documented', async (t) => {
  t.same([...FINGERPRINT_FIELDS], ['event', 'customerHandle', 'timestamp', 'requestId', 'smtpId', 'email', 'campaignId', 'recipients', 'url', 'ip', 'userAgent', 'status', 'reason'])
  const every: WebhookEvent = toEvent(click, 0)
  t.equal(typeof eventFingerprint(every), 'string')
})

t.test('deeply nested extra fields of an unknown event are fingerprinted without recursion overflow (T13)', async (t) => {
  let deep: unknown = 1
  for (let i = 0; i < 100_000; i++) deep = [deep]
  const event = { event: 'unknown', eventName: 'future', customerHandle: 'acct_1', timestamp: 1, fields: { x: deep } } as const
  const fp = eventFingerprint(event as never)
  t.match(fp, /^[A-Za-z0-9_-]{43}$/)
  t.equal(eventFingerprint(event as never), fp, 'stable')
})

// The canonical text was first built as an array and serialised with JSON.stringify; the
// fingerprint is now written out directly. Stored fingerprints must keep matching: the direct
// form must give the very same bytes as the reference below (the first implementation, verbatim).
function referenceFingerprint (event: WebhookEvent): string {
  const parts: unknown[] = ['mcwh-event-v1']
  const source = event as unknown as Record<string, unknown>
  for (const name of FINGERPRINT_FIELDS) {
    let value = source[name]
    if (name === 'event' && event.event === 'unknown') value = event.eventName
    if (value === undefined || value === null) continue
    if (name === 'recipients' && Array.isArray(value)) value = [...(value as string[])].sort()
    parts.push([name, value])
  }
  if (event.event === 'unknown') parts.push(['fields', referenceCanonical(event.fields)])
  return crypto.createHash('sha256').update(JSON.stringify(parts)).digest('base64url')
}
function referenceCanonical (value: unknown, depth = 0): unknown {
  if (depth > 32) return ['...']
  if (Array.isArray(value)) return ['[]', ...value.map((v) => referenceCanonical(v, depth + 1))]
  if (typeof value !== 'object' || value === null) return value
  const out: unknown[] = ['{}']
  for (const key of Object.keys(value).sort()) out.push([key, referenceCanonical((value as Record<string, unknown>)[key], depth + 1)])
  return out
}

t.test('the fingerprint of any event is the one the reference canonical form gives (property)', async (t) => {
  const text = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.constantFrom('', '"', '\\', '\u2028', '\ud800', '\u0000'))
  const scalar = fc.oneof(text, fc.integer(), fc.double(), fc.boolean(), fc.constant(null))
  const json = fc.letrec((tie) => ({
    value: fc.oneof({ depthSize: 'small' }, scalar, fc.array(tie('value'), { maxLength: 4 }), fc.dictionary(text, tie('value'), { maxKeys: 4 })),
  })).value
  const optional = <T>(arb: fc.Arbitrary<T>): fc.Arbitrary<T | undefined> => fc.option(arb, { nil: undefined })
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
    extra: optional(json),
    more: optional(json),
  }, { requiredKeys: ['event', 'customer_handle', 'timestamp'] })
  let checked = 0
  fc.assert(fc.property(raw, (r) => {
    let event: WebhookEvent
    try { event = toEvent(r, 0) } catch { return true }
    checked++
    return eventFingerprint(event) === referenceFingerprint(event)
  }), { numRuns: 2000 })
  t.ok(checked > 1000, `most generated events parse (${checked})`)
  // Hand-built events a parser would not produce: null and odd values are treated alike too.
  const odd = [
    { event: 'open', customerHandle: 'a', timestamp: -0, recipients: null, email: null, reason: '\ud83d' },
    { event: 'unknown', eventName: 'x', customerHandle: 'a', timestamp: 1, fields: { b: [1, { a: undefined, c: () => 1 }], a: Symbol('s') } },
    { event: 'click', customerHandle: 'a', timestamp: 1.5e300, recipients: ['b', 'a', 'b'], url: 'https://x/\u2028' },
  ]
  for (const e of odd) t.equal(eventFingerprint(e as never), referenceFingerprint(e as never), JSON.stringify(e.event))
})

t.test('every UTF-16 code unit in a string field, alone and in a surrogate pair, serialises as JSON.stringify does', async (t) => {
  // Strings without a character JSON escapes are quoted directly; this sweep holds that shortcut
  // to the reference for each of the 65,536 code units and for pairs.
  const wrong: string[] = []
  const check = (s: string): void => {
    const event = { event: 'open', customerHandle: 'acct_1', timestamp: 1, email: s } as WebhookEvent
    if (eventFingerprint(event) !== referenceFingerprint(event)) wrong.push(JSON.stringify(s))
  }
  for (let unit = 0; unit <= 0xffff; unit++) check(`a${String.fromCharCode(unit)}b`)
  for (const pair of ['\ud83d\ude00', '\ud800\udc00', '\udbff\udfff', '\ude00\ud83d', 'x\ud83d']) check(pair)
  t.same(wrong, [])
})
