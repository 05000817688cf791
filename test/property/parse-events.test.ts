// parseEvents against a plain model of its contract (rows F7 F11 F12 in test/README.md): the
// events are built in one pass over the parse, with the poisoning verdict, the fields an event's
// type does not model and the customer-handle policy settled on the way. The model below does
// each step on its own, the straightforward way: the verdicts (error type and message), the
// events, their property order and their `fields` (keys, values, order) must be the same.
import fc from 'fast-check'
import t from 'tap'
import { isDeepStrictEqual } from 'node:util'
import { check } from './helpers/fixtures.js'
import { parseEvents } from '../../src/events/parse-events.js'
import { utf8 } from '../../src/crypto/node.js'
import { VerificationError } from '../../src/errors.js'

const COMMON = ['event', 'customer_handle', 'timestamp', 'email', 'request_id', 'smtp_id', 'campaign_id', 'recipients']
const TYPED: Record<string, string[]> = {
  click: [...COMMON, 'url', 'user_agent', 'ip'],
  open: [...COMMON, 'user_agent', 'ip'],
  'hard-bounced': [...COMMON, 'status', 'reason'],
  'soft-bounced': [...COMMON, 'status', 'reason'],
  dropped: [...COMMON, 'status', 'reason'],
}
const KNOWN = ['processed', 'delivered', 'open', 'click', 'hard-bounced', 'soft-bounced', 'dropped', 'complained', 'unsubscribed', 'test']
const CAMEL: Record<string, string> = { customer_handle: 'customerHandle', request_id: 'requestId', smtp_id: 'smtpId', campaign_id: 'campaignId', user_agent: 'userAgent' }
const POISONED = 'The body contains a forbidden "__proto__" or "constructor.prototype" key.'

class Refused extends Error {
  constructor (readonly type: string, message: string) { super(message) }
}
const bad = (message: string): Refused => new Refused('invalid_payload', message)

/** secure-json-parse's verdict, by walking the whole parse. */
function poisoned (node: unknown): boolean {
  if (typeof node !== 'object' || node === null) return false
  if (Array.isArray(node)) return node.some(poisoned)
  if (Object.hasOwn(node, '__proto__')) return true
  const ctor = (node as Record<string, unknown>).constructor
  if (Object.hasOwn(node, 'constructor') && typeof ctor === 'object' && ctor !== null && Object.hasOwn(ctor, 'prototype')) return true
  return Object.values(node).some(poisoned)
}

function finite (value: unknown): boolean {
  if (typeof value === 'number') return Number.isFinite(value)
  if (typeof value !== 'object' || value === null) return true
  return Object.values(value).every(finite)
}

/** One wire event, step by step in the documented order. */
function modelEvent (r: unknown, i: number): Record<string, unknown> {
  if (typeof r !== 'object' || r === null || Array.isArray(r)) throw bad(`Event ${i} is not a JSON object.`)
  const raw = r as Record<string, unknown>
  if (typeof raw.event !== 'string') throw bad(`Event ${i}: "event" must be a string.`)
  if (typeof raw.customer_handle !== 'string') throw bad(`Event ${i}: "customer_handle" must be a string.`)
  const ts = raw.timestamp
  if (typeof ts !== 'number' || !Number.isSafeInteger(ts) || ts < 0) throw bad(`Event ${i}: "timestamp" must be a non-negative integer (Unix seconds).`)
  const known = KNOWN.includes(raw.event)
  const typed = known ? (TYPED[raw.event] ?? COMMON) : COMMON
  const event: Record<string, unknown> = { event: known ? raw.event : 'unknown', customerHandle: raw.customer_handle, timestamp: ts }
  const order = known ? typed.slice(3) : COMMON.slice(3)
  // The type-specific keys are checked in the order url, user_agent, ip / status, reason.
  for (const key of order) {
    const v = raw[key]
    if (v === undefined || v === null) continue
    if (key === 'recipients') {
      if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) throw bad(`Event ${i}: "recipients" must be an array of strings.`)
    } else if (typeof v !== 'string') {
      throw bad(`Event ${i}: "${key}" must be a string.`)
    }
    event[CAMEL[key] ?? key] = v
  }
  if (!known) event.eventName = raw.event
  const fields: Record<string, unknown> = {}
  let any = false
  for (const key of Object.keys(raw)) {
    const value = raw[key]
    if (value !== null && typed.includes(key)) continue
    if (!finite(value)) throw bad(`Event ${i}: ${JSON.stringify(key)} holds a number out of range (it has no finite double value, e.g. 1e400).`)
    Object.defineProperty(fields, key, { value, enumerable: true, writable: true, configurable: true })
    any = true
  }
  if (any || !known) event.fields = fields
  return event
}

function model (text: string, maxEvents: number, allow: (h: string) => boolean): Array<Record<string, unknown>> {
  const parsed: unknown = JSON.parse(text)
  if (poisoned(parsed)) throw bad(POISONED)
  if (!Array.isArray(parsed)) throw bad('The body must be a JSON array of events.')
  if (parsed.length > maxEvents) throw new Refused('payload_too_large', `The delivery holds ${parsed.length} events, more than maxEvents (${maxEvents}).`)
  return parsed.map((raw, i) => {
    const event = modelEvent(raw, i)
    if (!allow(event.customerHandle as string)) throw new Refused('customer_not_allowed', `Event ${i} belongs to a customer handle that is not in customerHandles.`)
    return event
  })
}

type Outcome = { events: Array<Record<string, unknown>> } | { type: string, message: string }
function outcome (run: () => Array<Record<string, unknown>>): Outcome {
  try {
    return { events: run() }
  } catch (err) {
    if (err instanceof Refused || err instanceof VerificationError) return { type: err.type, message: err.message }
    throw err
  }
}

/** Property order too, fields included: deepEqual does not look at it. */
function keyOrder (events: Array<Record<string, unknown>>): string[][] {
  return events.flatMap((e) => [Object.keys(e), e.fields === undefined ? [] : Object.keys(e.fields as object)])
}

// JSON text, not objects, so that "__proto__" is a real key.
const str = fc.oneof(fc.constantFrom('"acct_1"', '"acct_2"', '"x"', '""', '"250"'), fc.string({ maxLength: 5 }).map((s) => JSON.stringify(s)))
const nested = fc.constantFrom('{"a":1}', '{"__proto__":{}}', '{"constructor":{"prototype":1}}', '[{"constructor":{"prototype":null}}]', '{"constructor":{"name":"x"}}', '[1,[2e400]]', '{"b":-1e400}', '["a","b"]')
const value = fc.oneof(
  { weight: 6, arbitrary: str },
  { weight: 2, arbitrary: fc.constant('null') },
  { weight: 2, arbitrary: fc.constantFrom('1700000000', '0', '-1', '1.5', '1e400', '9007199254740993', 'true') },
  { weight: 2, arbitrary: fc.constantFrom('["a@example.com"]', '[]', '["a",1]', '[null]') },
  { weight: 1, arbitrary: nested },
)
const key = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...COMMON.slice(3), 'url', 'user_agent', 'ip', 'status', 'reason') },
  { weight: 1, arbitrary: fc.constantFrom('message_id', 'constructor', '__proto__', '\\u005f_proto__', 'prototype', 'hasOwnProperty', '0') },
  { weight: 1, arbitrary: fc.string({ maxLength: 4 }).map((s) => JSON.stringify(s).slice(1, -1)) },
)
const eventText = fc.record({
  name: fc.oneof({ weight: 8, arbitrary: fc.constantFrom(...KNOWN.map((k) => `"${k}"`), '"future"', '"__proto__"', '"hasOwnProperty"') }, { weight: 1, arbitrary: fc.constantFrom('1', 'null') }),
  handle: fc.oneof({ weight: 8, arbitrary: fc.constant('"acct_1"') }, { weight: 1, arbitrary: fc.constantFrom('"acct_2"', '7') }),
  timestamp: fc.oneof({ weight: 8, arbitrary: fc.constant('1700000000') }, { weight: 1, arbitrary: fc.constantFrom('-1', '1.5', '"1"') }),
  extra: fc.array(fc.tuple(key, value), { maxLength: 5 }),
  at: fc.nat(6),
}).map(({ name, handle, timestamp, extra, at }) => {
  const members = [`"customer_handle":${handle}`, `"timestamp":${timestamp}`, ...extra.map(([k, v]) => `"${k}":${v}`)]
  members.splice(Math.min(at, members.length), 0, `"event":${name}`)
  return `{${members.join(',')}}`
})
const body = fc.array(fc.oneof({ weight: 12, arbitrary: eventText }, { weight: 1, arbitrary: fc.constantFrom('1', '"x"', '[]', 'null') }), { maxLength: 4 })
  .map((events) => `[${events.join(',')}]`)

t.test('parseEvents gives the model\'s verdict, events, property order and fields on event-shaped JSON', async (t) => {
  const seen = { events: 0, poisoned: 0, refused: 0, withFields: 0 }
  await check(t, fc.property(body, fc.constantFrom(2, 10), (text, maxEvents) => {
    const allow = (h: string): boolean => h === 'acct_1'
    const want = outcome(() => model(text, maxEvents, allow))
    const got = outcome(() => parseEvents(Buffer.from(text), maxEvents, allow) as unknown as Array<Record<string, unknown>>)
    if ('events' in want) {
      seen.events++
      if (want.events.some((e) => e.fields !== undefined)) seen.withFields++
    } else if (want.message === POISONED) seen.poisoned++
    else seen.refused++
    if ('events' in want && 'events' in got) {
      return isDeepStrictEqual(got.events, want.events) && isDeepStrictEqual(keyOrder(got.events), keyOrder(want.events)) &&
        got.events.every((e) => Object.getPrototypeOf(e) === Object.prototype)
    }
    return isDeepStrictEqual(got, want)
  }), 3000)
  t.ok(seen.events > 200 && seen.poisoned > 100 && seen.refused > 200 && seen.withFields > 100, `every outcome exercised: ${JSON.stringify(seen)}`)
})

t.test('a policy refusal, a type error or too many events behind a poisoned event still reports the poisoning', async (t) => {
  const allow = (h: string): boolean => h === 'acct_1'
  const poison = '{"event":"delivered","customer_handle":"acct_1","timestamp":1,"__proto__":1}'
  for (const first of ['{"event":"delivered","customer_handle":"acct_2","timestamp":1}', '{"event":"delivered","customer_handle":"acct_1","timestamp":-1}', '7']) {
    const r = outcome(() => parseEvents(Buffer.from(`[${first},${poison}]`), 10, allow) as never)
    t.same(r, { type: 'invalid_payload', message: POISONED }, first)
  }
  t.same(outcome(() => parseEvents(Buffer.from(`[${poison},${poison}]`), 1, allow) as never), { type: 'invalid_payload', message: POISONED })
})

t.test('the customer-handle policy is asked once per run of events with the same handle', async (t) => {
  const asked: string[] = []
  const allow = (h: string): boolean => { asked.push(h); return h !== 'acct_3' }
  const ev = (h: string): string => `{"event":"delivered","customer_handle":"${h}","timestamp":1}`
  t.equal(parseEvents(Buffer.from(`[${['acct_1', 'acct_1', 'acct_2', 'acct_2', 'acct_1'].map(ev).join(',')}]`), 10, allow).length, 5)
  t.same(asked, ['acct_1', 'acct_2', 'acct_1'])
  t.same(outcome(() => parseEvents(Buffer.from(`[${ev('acct_1')},${ev('acct_3')}]`), 10, allow) as never),
    { type: 'customer_not_allowed', message: 'Event 1 belongs to a customer handle that is not in customerHandles.' })
})

t.test('utf8 decodes exactly what a fatal TextDecoder decodes, on both sides of the large-body path', async (t) => {
  const fatal = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })
  const reference = (b: Uint8Array): string | undefined => { try { return fatal.decode(b) } catch { return undefined } }
  const large = Buffer.alloc(0x100000, 0x61) // past the port's latin1 limit: decoded as UTF-8, then checked
  const tail = fc.oneof(
    fc.uint8Array({ maxLength: 12 }),
    fc.string({ unit: 'binary', maxLength: 6 }).map((s) => new Uint8Array(Buffer.from(s, 'utf8'))), // valid, U+FFFD included sometimes
    fc.constantFrom(Uint8Array.of(0xef, 0xbf, 0xbd), Uint8Array.of(0xed, 0xa0, 0x80), Uint8Array.of(0xc0, 0xaf), Uint8Array.of(0xf4, 0x90, 0x80, 0x80), Uint8Array.of(0xc3, 0xa9)),
  )
  let invalid = 0
  await check(t, fc.property(fc.boolean(), tail, (big, bytes) => {
    const b = big ? Buffer.concat([large, bytes]) : Buffer.from(bytes)
    const want = reference(b)
    if (want === undefined) invalid++
    return utf8(b) === want
  }), 400)
  t.ok(invalid > 20, `invalid inputs exercised: ${invalid}`)
})
