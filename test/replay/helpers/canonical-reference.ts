// The canonical text of src/replay/fingerprint.ts as it was defined at 7478ead (before its fast
// path), kept verbatim as the reference the property tests hold the library's text to: the
// fingerprint's values must never change (docs/replay.md, "The fingerprint").
import type { WebhookEvent } from '../../../src/events/types.js'

const VERSION = 'mcwh-event-v2'

/** Characters JSON.stringify may escape in a string (surrogates: only when lone; any sends it the slow way). */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/

/** `JSON.stringify(s)`, quoting plain strings directly (most of the text is such strings). */
const str = (s: string): string => NEEDS_ESCAPE.test(s) ? JSON.stringify(s) : '"' + s + '"'

const HEAD = VERSION + ':'

/** HEAD's length: the text is still at its start (the next entry opens the object) when it has this length. */
const START = HEAD.length

/**
 * The text `eventFingerprint` hashes (exported for the property tests). Typed properties are
 * read by name, already in the wire keys' sorted order: campaign_id, customer_handle, email,
 * event, ip, reason, recipients, request_id, smtp_id, status, timestamp, url, user_agent; the
 * keys of `fields`, when there are some, are merged into that order. Built by concatenation: a
 * shared array of pieces joined once measured slower (bench/events-bench.mjs).
 */
export function referenceCanonicalText (event: WebhookEvent): string {
  const e = event as unknown as Record<string, unknown>
  const fields = e.fields
  if (fields !== undefined && fields !== null && hasKeys(fields)) return merged(e, fields as Record<string, unknown>)
  let t = HEAD
  t = put(t, '"campaign_id":', e.campaignId)
  t = put(t, '"customer_handle":', e.customerHandle)
  t = put(t, '"email":', e.email)
  t = put(t, '"event":', e.event === 'unknown' ? e.eventName : e.event)
  t = put(t, '"ip":', e.ip)
  t = put(t, '"reason":', e.reason)
  const recipients = e.recipients
  if (recipients != null) t += (t.length === START ? '{' : ',') + '"recipients":' + recipientsText(recipients)
  t = put(t, '"request_id":', e.requestId)
  t = put(t, '"smtp_id":', e.smtpId)
  t = put(t, '"status":', e.status)
  t = put(t, '"timestamp":', e.timestamp)
  t = put(t, '"url":', e.url)
  t = put(t, '"user_agent":', e.userAgent)
  return t + (t.length === START ? '{}' : '}')
}

/** `t` and `,"key":value` (`{` before the first); absent (undefined, null) values are left out. */
function put (t: string, key: string, v: unknown): string {
  if (v === undefined || v === null) return t
  return t + (t.length === START ? '{' : ',') + key + (typeof v === 'string' && !NEEDS_ESCAPE.test(v) ? '"' + v + '"' : value(v))
}

/**
 * The wire object of an event with `fields`: typed properties and fields, keys sorted (a typed
 * property first should a hand-built event hold a key twice). The fields' keys, usually one or
 * two, are sorted and merged into the typed properties' fixed order.
 */
function merged (e: Record<string, unknown>, fields: Record<string, unknown>): string {
  const keys = Object.keys(fields)
  if (keys.length > 1) keys.sort()
  const m: Merge = { t: HEAD, keys, k: 0, fields }
  putAfter(m, 'campaign_id', '"campaign_id":', e.campaignId)
  putAfter(m, 'customer_handle', '"customer_handle":', e.customerHandle)
  putAfter(m, 'email', '"email":', e.email)
  putAfter(m, 'event', '"event":', e.event === 'unknown' ? e.eventName : e.event)
  putAfter(m, 'ip', '"ip":', e.ip)
  putAfter(m, 'reason', '"reason":', e.reason)
  putAfter(m, 'recipients', '"recipients":', e.recipients)
  putAfter(m, 'request_id', '"request_id":', e.requestId)
  putAfter(m, 'smtp_id', '"smtp_id":', e.smtpId)
  putAfter(m, 'status', '"status":', e.status)
  putAfter(m, 'timestamp', '"timestamp":', e.timestamp)
  putAfter(m, 'url', '"url":', e.url)
  putAfter(m, 'user_agent', '"user_agent":', e.userAgent)
  while (m.k < keys.length) putField(m, keys[m.k++]!)
  return m.t + (m.t.length === START ? '{}' : '}')
}

/** A merge in progress: the text so far, the fields' sorted keys and how many are written. */
interface Merge { t: string, readonly keys: string[], k: number, readonly fields: Record<string, unknown> }

/** The fields' keys sorted before `key` not yet written, then the typed property. */
function putAfter (m: Merge, key: string, keyText: string, v: unknown): void {
  if (v === undefined || v === null) return
  while (m.k < m.keys.length && m.keys[m.k]! < key) putField(m, m.keys[m.k++]!)
  m.t = key === 'recipients' ? m.t + (m.t.length === START ? '{' : ',') + keyText + recipientsText(v) : put(m.t, keyText, v)
}

function putField (m: Merge, key: string): void {
  const v = jsonValue(m.fields[key], key)
  if (v !== undefined) m.t += (m.t.length === START ? '{' : ',') + str(key) + ':' + (key === 'recipients' ? recipientsText(v) : value(v))
}

/** The recipients, each item encoded, in sorted order of their encodings (an array; anything else as it is). */
function recipientsText (v: unknown): string {
  if (!Array.isArray(v)) return value(v)
  if (v.length === 1 && typeof v[0] === 'string') return '[' + str(v[0]) + ']'
  const items = new Array<string>(v.length)
  for (let i = 0; i < v.length; i++) items[i] = value(jsonValue(v[i], String(i)) ?? null)
  return '[' + items.sort().join(',') + ']'
}

function hasKeys (o: unknown): boolean {
  if (typeof o !== 'object') return false
  for (const _ in o) return true
  return false
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
