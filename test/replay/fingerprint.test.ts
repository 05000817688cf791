import crypto from 'node:crypto'
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
