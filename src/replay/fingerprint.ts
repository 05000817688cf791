import { hashBase64url } from '#crypto'
import { WEBHOOK_EVENT_TYPES, type WebhookEvent } from '../events/types.js'

/** Pins the definition below: a change to the canonical form is a new tag. */
const VERSION = 'mcwh-event-v2'

/**
 * A stable identifier for one event, for business-level idempotency: MailChannels events
 * carry no id, and a resent delivery is re-signed (new `created`, new signature), so the
 * replay store cannot recognise it while its events are identical.
 *
 * SHA-256 (base64url, 43 characters) of the UTF-8 text `mcwh-event-v2:` followed by the event
 * as received, in canonical JSON: the wire object (snake_case keys: the typed properties under
 * their wire names, `event` as sent, and every entry of `fields`), keys sorted by UTF-16 code
 * units at every depth, no whitespace, strings as `JSON.stringify` writes them, numbers as
 * `String(n)` (so `-0` is `0`), and the `recipients` array's items sorted (their order says
 * nothing). Values JSON does not have in a hand-built event are taken as `JSON.stringify` takes
 * them (an `undefined` property left out, `toJSON` called), except `NaN`, `Infinity` and
 * `-Infinity`, written as those words; a parsed event never holds one (such a delivery is
 * refused). The encoding can be read back unambiguously, so two events give the same text only
 * when they are the same event; the result does not depend on key order or formatting, and
 * survives a JSON round trip of the typed event.
 */
export function eventFingerprint (event: WebhookEvent): string {
  return hashBase64url('sha256', canonicalEventText(event))
}

/**
 * `events.map(eventFingerprint)`, for a whole delivery: one canonical text and one SHA-256
 * per event (each event needs its own digest to be recognised on its own later).
 */
export function eventFingerprints (events: readonly WebhookEvent[]): string[] {
  const out = new Array<string>(events.length)
  for (let i = 0; i < events.length; i++) out[i] = hashBase64url('sha256', canonicalEventText(events[i]!))
  return out
}

/** Characters JSON.stringify may escape in a string (surrogates: only when lone; any sends it the slow way). */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/

/** `JSON.stringify(s)`, quoting plain strings directly (most of the text is such strings). */
const str = (s: string): string => NEEDS_ESCAPE.test(s) ? JSON.stringify(s) : '"' + s + '"'

const HEAD = VERSION + ':'

/** HEAD's length: the text is still at its start (the next entry opens the object) when it has this length. */
const START = HEAD.length

/**
 * `s` as one flat string: V8 keeps a concatenation as a rope, which every text it is a piece of
 * would walk again when flattened for the hash.
 */
function flat (s: string): string {
  return JSON.parse(JSON.stringify(s)) as string
}

/** The wire keys of the typed properties, sorted by UTF-16 code units: the order they are written in. */
const TYPED_KEYS = ['campaign_id', 'customer_handle', 'email', 'event', 'ip', 'reason', 'recipients', 'request_id', 'smtp_id', 'status', 'timestamp', 'url', 'user_agent'] as const
/**
 * The i-th typed key's text before its value: `{"key":` opening the object, `,"key":` after an
 * entry, `","key":` after an entry whose value is a string. A string value's closing quote is
 * left for what comes next (the next key's piece or the final `"}`): one piece fewer per entry.
 */
const OPEN = TYPED_KEYS.map((k) => flat(`{"${k}":`))
const NEXT = TYPED_KEYS.map((k) => flat(`,"${k}":`))
const CLOSE_NEXT = TYPED_KEYS.map((k) => flat(`","${k}":`))
/** The same with a string value's opening quote. */
const OPEN_Q = OPEN.map((k) => flat(k + '"'))
const NEXT_Q = NEXT.map((k) => flat(k + '"'))
const CLOSE_NEXT_Q = CLOSE_NEXT.map((k) => flat(k + '"'))
/** No field left to write: past the last slot. */
const NO_SLOT = TYPED_KEYS.length + 1

/** Typed key `k` with string value `v`, its closing quote left off: opening the object, after an entry, after a string. */
function openString (k: number, v: string): [string, string, string] {
  const inner = NEEDS_ESCAPE.test(v) ? JSON.stringify(v).slice(1, -1) : v
  return [OPEN_Q[k] + inner, NEXT_Q[k] + inner, CLOSE_NEXT_Q[k] + inner]
}

/** The event key's pieces (`openString`) for each name a typed event carries: no escape test per event. */
const EVENT_TEXT = new Map<unknown, readonly [string, string, string]>(WEBHOOK_EVENT_TYPES.map((name) => [name, openString(3, name).map(flat) as [string, string, string]]))

/**
 * The customer handle's pieces (`openString`) for the last handle seen: a delivery holds one
 * handle (or a few), so it is quoted once, not per event. Built by concatenation alone: a
 * delivery that alternates handles rebuilds them per event at about the cost of quoting them.
 */
let handleCache: { readonly handle: string, readonly pieces: readonly [string, string, string] } | undefined

/**
 * The text `eventFingerprint` hashes (exported for the property tests). Typed properties are
 * read by name, already in the wire keys' sorted order (`TYPED_KEYS`); the keys of `fields`,
 * when there are some, are sorted and merged into that order. Built by concatenation of two
 * pieces per entry, a constant one (separator, key, quotes) and the value (a shared array of
 * pieces joined once measured slower, bench/events-bench.mjs): most of an event's strings need
 * no escape, which one regular expression test per value tells, and the constant parts (keys,
 * the event name, the customer handle) come quoted already.
 */
export function canonicalEventText (event: WebhookEvent): string {
  const e = event as unknown as Record<string, unknown>
  const f = e.fields
  // The fields' keys, sorted, and where they go (null when there is none).
  const m = f !== undefined && f !== null && typeof f === 'object' ? fieldsMerge(f as Record<string, unknown>) : null
  let t = HEAD
  // Whether the last value written is a string whose closing quote is still to be written.
  let q = false
  if (m !== null && m.slot === 0) { t = writeFields(m, t, 0, q); q = m.q }
  let v = e.campaignId
  if (v !== undefined && v !== null) { t = put(t, 0, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 1) { t = writeFields(m, t, 1, q); q = m.q }
  v = e.customerHandle
  if (typeof v === 'string') {
    let h = handleCache
    if (h === undefined || h.handle !== v) h = handleCache = { handle: v, pieces: openString(1, v) }
    t += h.pieces[t.length === START ? 0 : q ? 2 : 1]!
    q = true
  } else if (v !== undefined && v !== null) { t = put(t, 1, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 2) { t = writeFields(m, t, 2, q); q = m.q }
  v = e.email
  if (v !== undefined && v !== null) { t = put(t, 2, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 3) { t = writeFields(m, t, 3, q); q = m.q }
  v = e.event === 'unknown' ? e.eventName : e.event
  const named = EVENT_TEXT.get(v)
  if (named !== undefined) { t += named[t.length === START ? 0 : q ? 2 : 1]; q = true } else if (v !== undefined && v !== null) { t = put(t, 3, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 4) { t = writeFields(m, t, 4, q); q = m.q }
  v = e.ip
  if (v !== undefined && v !== null) { t = put(t, 4, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 5) { t = writeFields(m, t, 5, q); q = m.q }
  v = e.reason
  if (v !== undefined && v !== null) { t = put(t, 5, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 6) { t = writeFields(m, t, 6, q); q = m.q }
  v = e.recipients
  if (v !== undefined && v !== null) { t += (t.length === START ? OPEN[6] : q ? CLOSE_NEXT[6] : NEXT[6]) + recipientsText(v); q = false }
  if (m !== null && m.slot === 7) { t = writeFields(m, t, 7, q); q = m.q }
  v = e.requestId
  if (v !== undefined && v !== null) { t = put(t, 7, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 8) { t = writeFields(m, t, 8, q); q = m.q }
  v = e.smtpId
  if (v !== undefined && v !== null) { t = put(t, 8, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 9) { t = writeFields(m, t, 9, q); q = m.q }
  v = e.status
  if (v !== undefined && v !== null) { t = put(t, 9, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 10) { t = writeFields(m, t, 10, q); q = m.q }
  v = e.timestamp
  if (typeof v === 'number') { t += (t.length === START ? OPEN[10] : q ? CLOSE_NEXT[10] : NEXT[10]) + number(v); q = false } else if (v !== undefined && v !== null) { t = put(t, 10, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 11) { t = writeFields(m, t, 11, q); q = m.q }
  v = e.url
  if (v !== undefined && v !== null) { t = put(t, 11, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 12) { t = writeFields(m, t, 12, q); q = m.q }
  v = e.userAgent
  if (v !== undefined && v !== null) { t = put(t, 12, v, q); q = typeof v === 'string' }
  if (m !== null && m.slot === 13) { t = writeFields(m, t, 13, q); q = m.q }
  return t.length === START ? t + '{}' : t + (q ? '"}' : '}')
}

/**
 * `t` and the entry of typed key `k` with value `v` (not absent), `{` before the first; a
 * string's closing quote left off. `q`: whether `t` ends in a string still to be closed.
 */
function put (t: string, k: number, v: unknown, q: boolean): string {
  if (typeof v === 'string') return t + (t.length === START ? OPEN_Q[k] : q ? CLOSE_NEXT_Q[k] : NEXT_Q[k]) + (NEEDS_ESCAPE.test(v) ? JSON.stringify(v).slice(1, -1) : v)
  return t + (t.length === START ? OPEN[k] : q ? CLOSE_NEXT[k] : NEXT[k]) + value(v)
}

/**
 * A key of `fields`: its slot among the typed keys (how many sort before or equal to it: a field
 * is written before the first typed key it sorts before, so a typed property comes first should
 * a hand-built event hold a key twice) and its pieces, as `OPEN`... give them for typed keys:
 * `{"key":`, `,"key":`, `","key":`, then the same three with a string value's opening quote.
 */
interface FieldKey { readonly slot: number, readonly pieces: readonly string[] }

/** The `FieldKey` of keys seen (a few: `message_id`, or `status` and `reason` on types that do not model them), up to `FIELD_KEYS_MAX`. */
const FIELD_KEYS = new Map<string, FieldKey>()
/** Beyond this many different keys (an attacker's fields), keys are described afresh each time. */
const FIELD_KEYS_MAX = 256

function fieldKey (key: string): FieldKey {
  let f = FIELD_KEYS.get(key)
  if (f === undefined) {
    let slot = 0
    while (slot < TYPED_KEYS.length && TYPED_KEYS[slot]! <= key) slot++
    const q = str(key)
    f = { slot, pieces: ['{' + q + ':', ',' + q + ':', '",' + q + ':', '{' + q + ':"', ',' + q + ':"', '",' + q + ':"'] }
    if (FIELD_KEYS.size < FIELD_KEYS_MAX) FIELD_KEYS.set(key, f)
  }
  return f
}

/**
 * A merge of `fields` into the typed keys in progress: the fields' own keys sorted, how many are
 * written, the next one's `FieldKey` and slot (`NO_SLOT` when all are written), and whether the
 * text ends in a string still to be closed.
 */
interface Merge { readonly fields: Record<string, unknown>, readonly keys: string[], k: number, next: FieldKey | undefined, slot: number, q: boolean }

function fieldsMerge (fields: Record<string, unknown>): Merge | null {
  const keys = Object.keys(fields)
  if (keys.length === 0) return null
  if (keys.length > 1) sortKeys(keys)
  const next = fieldKey(keys[0]!)
  return { fields, keys, k: 0, next, slot: next.slot, q: false }
}

/** Sorted by UTF-16 code units, as `keys.sort()` does: insertion sort for the usual one to a few keys. */
function sortKeys (keys: string[]): void {
  if (keys.length > 8) { keys.sort(); return }
  for (let i = 1; i < keys.length; i++) {
    const x = keys[i]!
    let j = i - 1
    while (j >= 0 && keys[j]! > x) { keys[j + 1] = keys[j]!; j-- }
    keys[j + 1] = x
  }
}

/**
 * Writes the fields of slot `s` (every typed key before slot `s`'s typed key was written), after
 * a string still to be closed when `q`; `m.q` tells the same after them.
 */
function writeFields (m: Merge, t: string, s: number, q: boolean): string {
  const { keys, fields } = m
  let k = m.k
  let f = m.next!
  for (;;) {
    const key = keys[k++]!
    const v = jsonValue(fields[key], key)
    if (v !== undefined) {
      const at = t.length === START ? 0 : q ? 2 : 1
      if (typeof v === 'string') {
        t += f.pieces[at + 3]! + (NEEDS_ESCAPE.test(v) ? JSON.stringify(v).slice(1, -1) : v)
        q = true
      } else {
        t += f.pieces[at]! + (key === 'recipients' ? recipientsText(v) : value(v))
        q = false
      }
    }
    if (k === keys.length) { m.next = undefined; m.slot = NO_SLOT; break }
    f = fieldKey(keys[k]!)
    if (f.slot !== s) { m.next = f; m.slot = f.slot; break }
  }
  m.k = k
  m.q = q
  return t
}

/** The recipients, each item encoded, in sorted order of their encodings (an array; anything else as it is). */
function recipientsText (v: unknown): string {
  if (!Array.isArray(v)) return value(v)
  if (v.length === 1 && typeof v[0] === 'string') return NEEDS_ESCAPE.test(v[0]) ? '[' + JSON.stringify(v[0]) + ']' : '["' + v[0] + '"]'
  const items = new Array<string>(v.length)
  for (let i = 0; i < v.length; i++) items[i] = value(jsonValue(v[i], String(i)) ?? null)
  return '[' + items.sort().join(',') + ']'
}

/** One value's canonical text: scalars directly, objects and arrays without recursion (any depth). */
function value (v: unknown): string {
  if (typeof v === 'string') return str(v)
  if (typeof v === 'number') return number(v)
  if (typeof v !== 'object' || v === null) return scalar(v)
  return nested(v)
}

/** JSON's text for a finite number (`-0` as `0`); `NaN`, `Infinity`, `-Infinity` as those words, which no JSON value reads as. */
const number = (n: number): string => String(n)

function scalar (v: unknown): string {
  if (v === null) return 'null'
  if (typeof v === 'boolean') return v ? 'true' : 'false'
  if (typeof v === 'bigint') throw new TypeError('eventFingerprint: the event holds a BigInt, which has no JSON form.')
  return 'null' // undefined, a function, a symbol inside an array: JSON.stringify writes null
}

/**
 * What JSON.stringify would take for this value under this key: `toJSON`'s result, and
 * `undefined` for what it leaves out of an object (undefined, functions, symbols).
 */
function jsonValue (v: unknown, key: string): unknown {
  if (typeof v === 'object' && v !== null && typeof (v as { toJSON?: unknown }).toJSON === 'function') v = (v as { toJSON: (k: string) => unknown }).toJSON(key)
  return v === undefined || typeof v === 'function' || typeof v === 'symbol' ? undefined : v
}

const byKey = (a: readonly [string, unknown], b: readonly [string, unknown]): number => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0

/** Marks a closing bracket on the work stack, with the object it closes. */
class Close { constructor (readonly node: object, readonly text: string) {} }

/**
 * Canonical JSON of an object or array, with an explicit stack (a deeply nested value cannot
 * overflow the call stack) and a check for cycles, which JSON cannot hold.
 */
function nested (root: object): string {
  let out = ''
  const open = new Set<object>()
  // Work items: a string is emitted as it is, a Close ends a node, a one-element array wraps a value.
  const stack: Array<string | Close | [unknown]> = [[root]]
  while (stack.length > 0) {
    const item = stack.pop()!
    if (typeof item === 'string') { out += item; continue }
    if (item instanceof Close) { open.delete(item.node); out += item.text; continue }
    const v = item[0]
    if (typeof v === 'string') { out += str(v); continue }
    if (typeof v === 'number') { out += number(v); continue }
    if (typeof v !== 'object' || v === null) { out += scalar(v); continue }
    if (open.has(v)) throw new TypeError('eventFingerprint: the event holds a cycle, which has no JSON form.')
    open.add(v)
    if (Array.isArray(v)) {
      stack.push(new Close(v, ']'))
      for (let i = v.length - 1; i >= 0; i--) {
        stack.push([jsonValue(v[i], String(i)) ?? null])
        if (i > 0) stack.push(',')
      }
      out += '['
    } else {
      const o = v as Record<string, unknown>
      const entries: Array<[string, unknown]> = []
      for (const key of Object.keys(o)) {
        const x = jsonValue(o[key], key)
        if (x !== undefined) entries.push([key, x])
      }
      entries.sort(byKey)
      stack.push(new Close(v, '}'))
      for (let i = entries.length - 1; i >= 0; i--) {
        stack.push([entries[i]![1]])
        stack.push((i > 0 ? ',' : '') + str(entries[i]![0]) + ':')
      }
      out += '{'
    }
  }
  return out
}
