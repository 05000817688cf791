// What the inspector says about one delivery: its outcome, the receiver's reason, its signature
// base and whether its Content-Digest matches its body. Derived with the library's own parsers,
// so the page shows what a receiver built on this library computes.
import crypto from 'node:crypto'
import { VerificationError } from '../../errors.js'
import { checkContentDigest, parseContentDigest } from '../../verify/content-digest.js'
import { readSignatureFields } from '../../verify/headers.js'
import { parseSignature } from '../../verify/signature-input.js'

/** A header as it went on the wire: its name as written, its value. */
export type HeaderLine = [name: string, value: string]

/** How a delivery ended, as the list shows it. */
export type InspectedOutcome = 'accepted' | 'duplicate' | 'rejected' | 'failed' | 'redirected' | 'no_response'

/** The reason the receiver gave, when it answered with this library's error body. */
export interface InspectedReason {
  /** The reason code (`code` of the body), e.g. `digest_mismatch`. */
  type: string
  message: string
}

/** One row of the inspector's list. Every string in it may come from a stranger: the page shows it as text. */
export interface InspectedSummary {
  /** Position in the inspector's journal, from 1. */
  seq: number
  /** When the delivery was sent (sandbox) or received (inspect), ISO 8601. */
  at: string
  /** Where it went: the endpoint URL (sandbox) or the path it arrived at (inspect). */
  endpoint: string
  /** The sandbox's batch number; `null` on the receiving side. */
  batchId: number | null
  /** 1 for the first POST of a batch; `null` on the receiving side. */
  attempt: number | null
  /** Events in the body; `null` when the body is not a JSON array. */
  eventCount: number | null
  /** The `event` of each event, in order, at most 1000. */
  eventTypes: string[]
  /** The distinct `request_id`s of the first 1000 events, at most 1000 (what the page's search matches). */
  requestIds: string[]
  /** The distinct addresses of the first 1000 events, at most 1000: each `email` and `recipients` entry. */
  addresses: string[]
  statusCode: number | null
  durationMs: number
  outcome: InspectedOutcome
  reason: InspectedReason | null
  /** How the sandbox spoiled the delivery on purpose, if it did. */
  tamper: string | null
  resend: boolean
  retryInMs: number | null
  /** Why there was no response, when there was none. */
  error: string | null
  /** Something the developer should look at (a tampered delivery that was accepted). */
  warning: string | null
}

export interface InspectedSignature {
  /** The signature base as the library builds it from the headers; `null` when they cannot be parsed. */
  base: string | null
  keyId: string | null
  created: number | null
  label: string | null
  /** Why the headers could not be parsed. */
  problem: string | null
}

/** Everything the detail view shows. */
export interface InspectedDetail extends InspectedSummary {
  request: {
    method: string
    url: string
    headers: HeaderLine[]
    /** The body as UTF-8 text (lossy), at most `bodyLimit` bytes of it. */
    body: string
    bodyBytes: number
    bodyTruncated: boolean
  }
  signature: InspectedSignature
  /** Whether the body matches its `Content-Digest`: `null` when the header cannot be parsed. */
  digest: { computed: string, matches: boolean | null }
  /**
   * A POSIX shell command that sends the same headers and body bytes again with curl (`null` when
   * the body was cut short, so no exact copy exists).
   */
  curl: string | null
  /** What the receiver answered (sandbox), or what the inspector answered (inspect). */
  response: { headers: HeaderLine[], body: string, truncated: boolean } | null
  /** The peer's address (inspect only). */
  remoteAddress: string | null
}

const MAX_REASON_TYPE = 100
const MAX_REASON_MESSAGE = 2000
const MAX_EVENT_TYPES = 1000
const MAX_TYPE_CHARS = 100
const MAX_KEY_CHARS = 320

/** The verdict of an answer: by its status, and `duplicate` for a 2xx `{ "duplicate": true }`. */
export function classify (statusCode: number | null, body: string | null): InspectedOutcome {
  if (statusCode === null) return 'no_response'
  if (statusCode >= 200 && statusCode < 300) {
    const parsed = parseJson(body)
    return parsed !== null && typeof parsed === 'object' && (parsed as { duplicate?: unknown }).duplicate === true ? 'duplicate' : 'accepted'
  }
  if (statusCode >= 300 && statusCode < 400) return 'redirected'
  if (statusCode >= 500) return 'failed'
  return 'rejected'
}

/** The reason of this library's error body `{ statusCode, code, error, message }`; `null` for any other answer. */
export function reasonOf (body: string | null): InspectedReason | null {
  const parsed = parseJson(body) as Record<string, unknown> | null
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return null
  const { statusCode, code, error, message } = parsed
  if (typeof statusCode !== 'number' || typeof code !== 'string' || typeof error !== 'string' || typeof message !== 'string') return null
  return { type: code.slice(0, MAX_REASON_TYPE), message: message.slice(0, MAX_REASON_MESSAGE) }
}

/** What the list shows and searches of a body's events, best effort (the body may be anything). */
export interface EventsAtAGlance {
  /** Events in the body; `null` when it is not a JSON array. */
  count: number | null
  types: string[]
  requestIds: string[]
  addresses: string[]
}

/** The `event` names, request ids and addresses of a body's first 1000 events. */
export function eventsAtAGlance (body: Uint8Array): EventsAtAGlance {
  const parsed = parseJson(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'))
  if (!Array.isArray(parsed)) return { count: null, types: [], requestIds: [], addresses: [] }
  const types: string[] = []
  const requestIds = new Set<string>()
  const addresses = new Set<string>()
  // At most 1000 of each, so a row stays small whatever the body holds.
  const keep = (set: Set<string>, value: unknown): void => {
    if (typeof value === 'string' && value !== '' && set.size < MAX_EVENT_TYPES) set.add(value.slice(0, MAX_KEY_CHARS))
  }
  for (const e of parsed.slice(0, MAX_EVENT_TYPES) as unknown[]) {
    const event = e !== null && typeof e === 'object' && !Array.isArray(e) ? e as Record<string, unknown> : {}
    types.push(typeof event.event === 'string' ? event.event.slice(0, MAX_TYPE_CHARS) : '?')
    keep(requestIds, event.request_id)
    keep(addresses, event.email)
    if (Array.isArray(event.recipients)) for (const r of event.recipients.slice(0, MAX_EVENT_TYPES)) keep(addresses, r)
  }
  return { count: parsed.length, types, requestIds: [...requestIds], addresses: [...addresses] }
}

function parseJson (text: string | null): unknown {
  if (text === null || text === '') return null
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}

/** Header lookup by name, any case; `null` when absent. Several lines are joined as Node joins them. */
function header (headers: readonly HeaderLine[], name: string): string | null {
  const values = headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v)
  return values.length === 0 ? null : values.join(', ')
}

/** The signature base and parameters of a delivery's headers, as the library parses them. */
export function describeSignature (headers: readonly HeaderLine[]): InspectedSignature {
  const input: Record<string, string> = {}
  for (const name of ['content-digest', 'signature-input', 'signature']) {
    const value = header(headers, name)
    if (value !== null) input[name] = value
  }
  try {
    const fields = readSignatureFields(input)
    const parsed = parseSignature(fields.signatureInput, fields.signature)
    return {
      base: `"content-digest": ${fields.contentDigest}\n"@signature-params": ${parsed.params}`,
      keyId: parsed.keyId,
      created: parsed.created,
      label: parsed.label,
      problem: null,
    }
  } catch (err) {
    const problem = err instanceof VerificationError ? err.message : 'The signature headers could not be parsed.'
    return { base: null, keyId: null, created: null, label: null, problem }
  }
}

/** The body's sha-256 Content-Digest, and whether the header sent matches it. */
export function describeDigest (headers: readonly HeaderLine[], body: Uint8Array): { computed: string, matches: boolean | null } {
  const computed = `sha-256=:${crypto.createHash('sha256').update(body).digest('base64')}:`
  const sent = header(headers, 'content-digest')
  if (sent === null) return { computed, matches: null }
  let digests
  try {
    digests = parseContentDigest(sent.trim())
  } catch {
    return { computed, matches: null }
  }
  try {
    checkContentDigest(digests, body)
    return { computed, matches: true }
  } catch {
    return { computed, matches: false }
  }
}

/** UTF-8 text of at most `limit` bytes of a body (lossy: the body may not be text). */
export function bodyText (body: Uint8Array, limit: number): { text: string, truncated: boolean } {
  const cut = body.byteLength > limit
  return { text: new TextDecoder('utf-8', { fatal: false }).decode(cut ? body.subarray(0, limit) : body), truncated: cut }
}

// Header lines curl writes itself from the URL and the body (or that describe one connection):
// copying them would send a stale Host or a second length.
const CURL_OWN = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive'])
// Headers curl adds when the command names none; an empty `-H 'Name:'` stops it, so the copy sends
// only what the delivery had.
const CURL_DEFAULTS = ['User-Agent', 'Accept', 'Content-Type', 'Expect']

/**
 * A POSIX shell command that POSTs `body` to `url` with `headers`, byte for byte: the body is
 * written by the shell's `printf` (a builtin, so no argument-length limit) and read by
 * `curl --data-binary @-`. Text that is printable stays readable in single quotes; anything a
 * terminal would act on when pasted (control characters, tabs, carriage returns) and bytes that
 * are not UTF-8 are written as `printf` octal escapes.
 */
export function curlCommand (url: string, headers: readonly HeaderLine[], body: Uint8Array): string {
  const lines = headers.filter(([name]) => !CURL_OWN.has(name.toLowerCase()))
  const present = new Set(lines.map(([name]) => name.toLowerCase()))
  // -g: brackets in the URL (an IPv6 host) are not curl's globbing.
  const args = [`curl -g ${singleQuoted(url)}`]
  for (const [name, value] of lines) args.push(`-H ${headerWord(name, value)}`)
  for (const name of CURL_DEFAULTS) if (!present.has(name.toLowerCase())) args.push(`-H ${singleQuoted(`${name}:`)}`)
  args.push('--data-binary @-')
  return `${printfOf(body)} |\n  ${args.join(' \\\n    ')}`
}

/** `s` in POSIX single quotes: every character literal, a quote written as '\''. */
function singleQuoted (s: string): string {
  return `'${s.replaceAll("'", "'\\''")}'`
}

/** `bytes` as text when they are UTF-8 with no character a terminal acts on when pasted (control characters but \n, DEL, C1); else `null`. */
function plainText (bytes: Uint8Array): string | null {
  let text: string
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes)
  } catch {
    return null
  }
  // eslint-disable-next-line no-control-regex
  return /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/.test(text) ? null : text
}

/** A `printf` that writes exactly `bytes`. */
function printfOf (bytes: Uint8Array): string {
  const text = plainText(bytes)
  return text !== null ? `printf '%s' ${singleQuoted(text)}` : `printf ${singleQuoted(printfFormat(bytes))}`
}

/**
 * One `-H` word that makes curl send exactly this header line. Printable ASCII stays readable;
 * other bytes come from a `printf` (a header line never holds a newline, which `$(…)` would drop).
 * An empty value is written `Name;`, curl's spelling for it (`Name:` would remove the header).
 */
function headerWord (name: string, value: string): string {
  const line = value.trim() === '' ? `${name};` : `${name}: ${value}`
  const bytes = Buffer.from(line, 'latin1')
  return bytes.every((b) => b >= 0x20 && b < 0x7f) ? singleQuoted(line) : `"$(printf ${singleQuoted(printfFormat(bytes))})"`
}

/** A `printf` format that prints `bytes`: printable ASCII as itself, `%` and `\\` doubled, every other byte as `\\ooo`. */
function printfFormat (bytes: Uint8Array): string {
  let out = ''
  for (const [i, b] of bytes.entries()) {
    // A format starting with '-' would be read as an option.
    if (i === 0 && b === 0x2d) out += '\\055'
    else if (b === 0x25) out += '%%'
    else if (b === 0x5c) out += '\\\\'
    else if (b >= 0x20 && b < 0x7f) out += String.fromCharCode(b)
    else out += `\\${b.toString(8).padStart(3, '0')}`
  }
  return out
}
