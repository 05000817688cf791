import { hashBase64url } from '#crypto'
import type { WebhookEvent } from '../events/types.js'

/**
 * The fields hashed by `eventFingerprint`, in this order (camelCase names as on
 * `WebhookEvent`). Absent fields are skipped; `recipients` is sorted.
 */
export const FINGERPRINT_FIELDS = [
  'event', 'customerHandle', 'timestamp', 'requestId', 'smtpId', 'email', 'campaignId', 'recipients',
  'url', 'ip', 'userAgent', 'status', 'reason',
] as const

const VERSION = 'mcwh-event-v1'

/**
 * A stable identifier for one event, for business-level idempotency: MailChannels events
 * carry no id, and a resent delivery is re-signed (new `created`, new signature), so the
 * replay store cannot recognise it while its events are identical.
 *
 * SHA-256 (base64url, 43 characters) over a canonical JSON serialisation of
 * `["mcwh-event-v1", [name, value]...]` for the fields in `FINGERPRINT_FIELDS` that the
 * event carries: the event type (`eventName` as sent for an unknown type), `customerHandle`,
 * `timestamp`, `requestId`, `smtpId`, `email`, `campaignId`, `recipients` (sorted: their
 * order says nothing), `url` (click), `ip` and `userAgent` (open, click), `status` and
 * `reason` (bounces, dropped); for an unknown type, also every extra field (`fields`, keys
 * sorted at every depth). Every field the event carries takes part because a resend carries
 * the very same values, so each extra field can only tell two genuinely different events
 * apart (two opens of one message in the same second from two devices), never split a resend.
 * The result does not depend on key order or on how the body was formatted.
 */
export function eventFingerprint (event: WebhookEvent): string {
  // The canonical text is built directly, byte for byte what `JSON.stringify(parts)` gives for
  // `parts = [VERSION, [name, value]...]` (field names are plain identifiers): no array per
  // field, and each field read by name in FINGERPRINT_FIELDS' order (a loop of keyed reads cost
  // more than the hash; the property test holds this order to FINGERPRINT_FIELDS).
  const e = event as unknown as Record<string, unknown>
  const unknownType = event.event === 'unknown'
  let text = pair(HEAD, 'event', unknownType ? event.eventName : e.event)
  text = pair(text, 'customerHandle', e.customerHandle)
  text = pair(text, 'timestamp', e.timestamp)
  text = pair(text, 'requestId', e.requestId)
  text = pair(text, 'smtpId', e.smtpId)
  text = pair(text, 'email', e.email)
  text = pair(text, 'campaignId', e.campaignId)
  let recipients = e.recipients
  if (Array.isArray(recipients) && recipients.length > 1) recipients = [...(recipients as string[])].sort()
  text = pair(text, 'recipients', recipients)
  text = pair(text, 'url', e.url)
  text = pair(text, 'ip', e.ip)
  text = pair(text, 'userAgent', e.userAgent)
  text = pair(text, 'status', e.status)
  text = pair(text, 'reason', e.reason)
  if (unknownType) text += ',["fields",' + (JSON.stringify(canonical(event.fields)) ?? 'null') + ']'
  return hashBase64url('sha256', text + ']')
}

/** `text` followed by `,["name",value]`; absent (undefined, null) fields are left out. */
function pair (text: string, name: FingerprintField, value: unknown): string {
  // Inside an array, a value JSON cannot represent (a function, a symbol) becomes null.
  return value === undefined || value === null ? text : text + PAIR_OPEN[name] + toJson(value) + ']'
}

/** Characters JSON.stringify may escape in a string (surrogates: only when lone; any sends it the slow way). */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/

/**
 * `JSON.stringify(value) ?? 'null'`, byte for byte (a property test holds it to that), quoting
 * plain strings and writing safe integers directly: the serialisation was most of a
 * fingerprint's cost, which runs once per event.
 */
function toJson (value: unknown): string {
  if (typeof value === 'string') return NEEDS_ESCAPE.test(value) ? JSON.stringify(value) : '"' + value + '"'
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value)
  return JSON.stringify(value) ?? 'null'
}

const HEAD = JSON.stringify([VERSION]).slice(0, -1)
type FingerprintField = typeof FINGERPRINT_FIELDS[number]
/** `,["<name>",` per field of `FINGERPRINT_FIELDS`. */
const PAIR_OPEN = Object.fromEntries(FINGERPRINT_FIELDS.map((name) => [name, ',' + JSON.stringify([name]).slice(0, -1) + ','])) as Record<FingerprintField, string>

/**
 * Objects become `["{}", [key, value]...]` with sorted keys and arrays `["[]", item...]`,
 * at every depth, so JSON.stringify is canonical and the two can never collide
 * (pairs, not objects: keys like "__proto__" stay plain data).
 */
function canonical (value: unknown, depth = 0): unknown {
  // Bounded recursion: a signed body may nest deeply inside the extra
  // fields of an unknown event type; below MAX_DEPTH such subtrees only count as "deep".
  if (depth > MAX_DEPTH) return DEEP
  if (Array.isArray(value)) return ['[]', ...value.map((v) => canonical(v, depth + 1))]
  if (typeof value !== 'object' || value === null) return value
  const out: unknown[] = ['{}']
  for (const key of Object.keys(value).sort()) out.push([key, canonical((value as Record<string, unknown>)[key], depth + 1)])
  return out
}

const MAX_DEPTH = 32
const DEEP = ['...']
