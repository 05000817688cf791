import { base64url } from '#crypto'
import type { WebhookEvent } from '../events/types.js'
import { eventFingerprint } from './fingerprint.js'

// The dead-letter stores' contract: what the router, the memory and Redis stores of
// this folder, and the PostgreSQL and SQLite stores share. A dead letter is an event whose
// handlers failed `after` times in a row: it is parked (kept, with its last error) and no longer
// fails its delivery. Runtime-neutral: web-standard APIs only.

/** The error kept with a failed event: its name and message, bounded and with credentials cut out. */
export interface DeadLetterError {
  /** The error's `name` (`TypeError`, your own class name...), at most 100 characters. */
  readonly name: string
  /** The error's `message`, at most 1,000 characters, URL credentials and bearer tokens replaced by `[redacted]`. */
  readonly message: string
}

/** A parked event. */
export interface DeadLetter {
  /** The event's `eventFingerprint`: how the commands and `retryDeadLetter` name it. */
  readonly fingerprint: string
  /** The event's type (`event.event`: `'unknown'` for a type this version does not know). */
  readonly type: string
  /** The event as the router received it. */
  readonly event: WebhookEvent
  /** Failed attempts so far (those before parking, and failed retries). */
  readonly attempts: number
  readonly firstFailedAt: Date
  readonly lastFailedAt: Date
  /** When it was parked (again, after a failed retry). */
  readonly parkedAt: Date
  /** The last failure's error. */
  readonly error: DeadLetterError
  /** Set by `requestRetry` (the CLI's `dead-letters retry`): the application's next `retryDeadLetters({ requested: true })` runs it. */
  readonly retryRequestedAt?: Date
  /** Where it failed: `'router'` (a delivery's dispatch) or `'bullmq'` (a job that used up its attempts). */
  readonly source: 'router' | 'bullmq'
}

/** One failed attempt of an event, for `recordFailure`. */
export interface DeadLetterFailure {
  readonly event: WebhookEvent
  /** The event's `eventFingerprint`. */
  readonly fingerprint: string
  readonly error: DeadLetterError
  /** Park the event once this many attempts have failed (1: at once). */
  readonly parkAfter: number
  /** @default 'router' */
  readonly source?: 'router' | 'bullmq'
}

/** What `recordFailure` did: the attempts counted so far, and whether the event is now parked. */
export interface RecordedFailure {
  readonly attempts: number
  readonly parked: boolean
}

export interface DeadLetterQuery {
  /** Only dead letters of this event type (`'hard-bounced'`, `'unknown'`...). */
  readonly type?: string
  /** Only those parked before this time (older). */
  readonly parkedBefore?: Date
  /** Only those parked at or after this time (newer). */
  readonly parkedAfter?: Date
  /** Only those whose retry was requested (`requestRetry`) and not yet run. */
  readonly retryRequested?: boolean
  /**
   * Dead letters per page (1 to 1,000).
   * @default 50
   */
  readonly limit?: number
  /** The `next` of the previous page. */
  readonly cursor?: string
}

/** One page of dead letters, newest parked first; `next` is the cursor of the following page, absent on the last. */
export interface DeadLetterPage {
  readonly items: readonly DeadLetter[]
  readonly next?: string
}

/** A retry's hold on a dead letter: at most one caller holds one at a time, until it resolves, fails or expires. */
export interface DeadLetterRetry {
  readonly fingerprint: string
  readonly token: string
  readonly letter: DeadLetter
}

/**
 * Where failed events are counted and parked. `WebhookEventRouter` (option `deadLetters`) and
 * the BullMQ worker write it; the operator CLI (`dead-letters`), the inspector and your own code
 * read and act on it. Every method rejects with `ReplayStoreError` when the store cannot answer.
 * `MemoryDeadLetterStore`, `RedisDeadLetterStore`, `postgresDeadLetters` (`mailchannels-webhooks/postgres`),
 * `sqliteDeadLetters` (`mailchannels-webhooks/sqlite`).
 */
export interface DeadLetterStore {
  /**
   * Counts one failed attempt of an event (atomically: concurrent callers each count) and keeps its
   * error; parks it once `parkAfter` attempts have failed. Resolves only once the count (and the
   * dead letter) is written as durably as the store writes anything.
   */
  recordFailure (failure: DeadLetterFailure): Promise<RecordedFailure>
  /** Forgets the failed attempts of events that have now been handled (not parked ones). */
  clearFailures (fingerprints: readonly string[]): Promise<void>
  /** A page of dead letters, newest parked first. */
  list (query?: DeadLetterQuery): Promise<DeadLetterPage>
  /** One dead letter, or undefined. */
  get (fingerprint: string): Promise<DeadLetter | undefined>
  /** Deletes a dead letter; whether there was one. */
  discard (fingerprint: string): Promise<boolean>
  /** Marks a dead letter for the application's next `retryDeadLetters({ retryRequested: true })`; whether there was one. */
  requestRetry (fingerprint: string): Promise<boolean>
  /**
   * Takes a dead letter for a retry, for `lifetimeSeconds`: `'missing'` when there is none,
   * `'busy'` when another retry holds it. Atomic: of concurrent callers at most one gets it.
   */
  claimRetry (fingerprint: string, lifetimeSeconds: number): Promise<DeadLetterRetry | 'missing' | 'busy'>
  /** The retry succeeded: deletes the dead letter (only while `retry` still holds it). */
  resolveRetry (retry: DeadLetterRetry): Promise<void>
  /** The retry failed: counts the attempt, keeps the new error, parks it again and drops the hold. */
  failRetry (retry: DeadLetterRetry, error: DeadLetterError): Promise<void>
}

/** Whether `value` has a dead-letter store's methods. */
export function isDeadLetterStore (value: unknown): value is DeadLetterStore {
  const v = value as Partial<Record<keyof DeadLetterStore, unknown>> | null
  return v !== null && typeof v === 'object' &&
    (['recordFailure', 'clearFailures', 'list', 'get', 'discard', 'requestRetry', 'claimRetry', 'resolveRetry', 'failRetry'] as const).every((m) => typeof v[m] === 'function')
}

const NAME_MAX = 100
const MESSAGE_MAX = 1000
// Credentials an error message may carry: a URL's user:password@ and an Authorization-style token.
const URL_CREDENTIALS = /([a-z][a-z0-9+.-]*:\/\/)[^\s/@:]*:[^\s/@]*@/gi
const SCHEME_TOKEN = /\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]+/gi
const NAMED_SECRET = /\b(token|api[-_]?key|password|passwd|secret|authorization)(["']?\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;&]+)/gi

function bounded (text: string, max: number): string {
  return text.length > max ? text.slice(0, max - 1) + '…' : text
}

/**
 * What a dead letter keeps of `err`: its name and message only (never its stack, cause or own
 * properties, which may hold a request or its headers), each bounded, with URL credentials and
 * bearer tokens replaced by `[redacted]`. The message is your handler's own: keep secrets out of it.
 */
export function deadLetterError (err: unknown): DeadLetterError {
  let name = 'Error'
  let message: string
  if (err instanceof Error) {
    name = typeof err.name === 'string' && err.name !== '' ? err.name : 'Error'
    message = typeof err.message === 'string' ? err.message : ''
  } else {
    name = typeof err
    message = typeof err === 'string' ? err : ''
  }
  // Redacted before it is cut, so no partial secret survives at the end.
  message = message.replace(URL_CREDENTIALS, '$1[redacted]@').replace(SCHEME_TOKEN, '$1$2[redacted]').replace(NAMED_SECRET, '$1$2[redacted]')
  return { name: bounded(name, NAME_MAX), message: bounded(message, MESSAGE_MAX) }
}

/** `after` (parking after this many failed attempts): a whole number from 1 to 1,000. */
export function checkParkAfter (after: unknown, name = 'after'): number {
  if (typeof after !== 'number' || !Number.isSafeInteger(after) || after < 1 || after > 1000) {
    throw new TypeError(`${name} must be a whole number of failed attempts from 1 to 1000, got ${String(after)}`)
  }
  return after
}

export const DEFAULT_LIST_LIMIT = 50

/** A query, checked: throws TypeError naming the field. */
export interface CheckedQuery {
  type: string | undefined
  before: number | undefined
  after: number | undefined
  requested: boolean
  limit: number
  /** The position after which the page starts: [parkedAt ms, fingerprint], newest first. */
  cursor: [number, string] | undefined
}

export function checkQuery (query: DeadLetterQuery = {}): CheckedQuery {
  if (query === null || typeof query !== 'object') throw new TypeError('list() takes an object ({ type, parkedBefore, parkedAfter, limit, cursor })')
  const { type, parkedBefore, parkedAfter, retryRequested = false, limit = DEFAULT_LIST_LIMIT, cursor } = query
  if (type !== undefined && (typeof type !== 'string' || type === '' || type.length > 100)) throw new TypeError('type must be an event type name (a non-empty string)')
  const time = (d: unknown, n: string): number | undefined => {
    if (d === undefined) return undefined
    if (!(d instanceof Date) || Number.isNaN(d.getTime())) throw new TypeError(`${n} must be a valid Date`)
    return d.getTime()
  }
  if (typeof retryRequested !== 'boolean') throw new TypeError('retryRequested must be a boolean')
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1000) throw new TypeError('limit must be a whole number from 1 to 1000')
  return { type, before: time(parkedBefore, 'parkedBefore'), after: time(parkedAfter, 'parkedAfter'), requested: retryRequested, limit, cursor: cursor === undefined ? undefined : decodeCursor(cursor) }
}

/** A page cursor: the position of the last item, base64url JSON. */
export function encodeCursor (parkedAt: number, fingerprint: string): string {
  return base64url(new TextEncoder().encode(JSON.stringify([parkedAt, fingerprint])))
}

function decodeCursor (cursor: unknown): [number, string] {
  const invalid = (): TypeError => new TypeError('cursor must be the `next` of a previous page')
  if (typeof cursor !== 'string' || !/^[A-Za-z0-9_-]{1,400}$/.test(cursor)) throw invalid()
  let value: unknown
  try {
    const b64 = cursor.replace(/-/g, '+').replace(/_/g, '/')
    value = JSON.parse(atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4)))
  } catch {
    throw invalid()
  }
  if (!Array.isArray(value) || value.length !== 2 || !Number.isSafeInteger(value[0]) || typeof value[1] !== 'string' || !FINGERPRINT.test(value[1])) throw invalid()
  return [value[0], value[1]]
}

/** Fingerprints are base64url SHA-256 (43 characters); a little room for custom ones. */
export const FINGERPRINT = /^[A-Za-z0-9_-]{1,200}$/

export function checkFingerprint (fingerprint: unknown): string {
  if (typeof fingerprint !== 'string' || !FINGERPRINT.test(fingerprint)) throw new TypeError('fingerprint must be an event fingerprint (base64url, as eventFingerprint returns)')
  return fingerprint
}

/** Whether the item at (parkedAt, fingerprint) comes after `cursor` in newest-first order. */
export function afterCursor (parkedAt: number, fingerprint: string, cursor: [number, string] | undefined): boolean {
  if (cursor === undefined) return true
  return parkedAt < cursor[0] || (parkedAt === cursor[0] && fingerprint < cursor[1])
}

/** The newest-first order of dead letters (parkedAt, then fingerprint, both descending). */
export function newestFirst (a: { parkedAt: number, fingerprint: string }, b: { parkedAt: number, fingerprint: string }): number {
  return b.parkedAt - a.parkedAt || (a.fingerprint < b.fingerprint ? 1 : a.fingerprint > b.fingerprint ? -1 : 0)
}

/** A stored record (JSON or SQL row), as the stores keep it: times in ms. */
export interface StoredLetter {
  fingerprint: string
  type: string
  event: string
  attempts: number
  firstFailedAt: number
  lastFailedAt: number
  parkedAt: number
  errorName: string
  errorMessage: string
  retryRequestedAt: number | null
  source: string
}

/** A stored record as a `DeadLetter`; its event is checked against its fingerprint. */
export function toDeadLetter (r: StoredLetter): DeadLetter {
  const event = JSON.parse(r.event) as WebhookEvent
  return {
    fingerprint: r.fingerprint,
    type: r.type,
    event,
    attempts: Number(r.attempts),
    firstFailedAt: new Date(Number(r.firstFailedAt)),
    lastFailedAt: new Date(Number(r.lastFailedAt)),
    parkedAt: new Date(Number(r.parkedAt)),
    error: { name: r.errorName, message: r.errorMessage },
    ...(r.retryRequestedAt !== null && r.retryRequestedAt !== undefined ? { retryRequestedAt: new Date(Number(r.retryRequestedAt)) } : {}),
    source: r.source === 'bullmq' ? 'bullmq' : 'router',
  }
}

/** The JSON an event is kept as; throws TypeError when it is not the event `fingerprint` names. */
export function eventJson (event: WebhookEvent, fingerprint: string): string {
  const text = JSON.stringify(event)
  if (eventFingerprint(JSON.parse(text) as WebhookEvent) !== fingerprint) throw new TypeError('the event does not match its fingerprint once stored as JSON')
  return text
}

/** Claim tokens of retries: 96 random bits. */
export function retryToken (): string {
  return base64url(crypto.getRandomValues(new Uint8Array(12)))
}
