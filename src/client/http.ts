import { localError, type ApiErrorType, type ErrorResponse } from '../errors.js'
import { readCapped } from '../keys/fetch-public-key.js'
import { CLIENT_VERSION } from './version.js'
import { terminalLine } from '../terminal-text.js'

/** Replies of the API are small; anything larger is garbage or an attack. */
export const MAX_RESPONSE_BYTES = 10 * 1024 * 1024
/** Error bodies are only read for a message; no need for more. */
const MAX_ERROR_BODY_BYTES = 64 * 1024
/** Details taken from an upstream body are cut to this length. */
const MAX_DETAIL_CHARS = 300
const BACKOFF_BASE_MS = 250

export const USER_AGENT = `mailchannels-webhooks/${CLIENT_VERSION}`

/** Resolved transport settings of a client. */
export interface Transport {
  baseUrl: string
  fetch: typeof globalThis.fetch
  timeout: number
  maxRetries: number
  maxRetryDelay: number
  /** The API key, or `null` for the public endpoints. */
  apiKey: string | null
  /** The key to scrub from any text that leaves the client (set even when not sent). */
  secret: string
}

/** The outcome of one logical API call (after retries). */
export type JsonOutcome = { ok: true, body: unknown } | { ok: false, error: ErrorResponse }

// Errors produced by a timeout: the batches route answers 504 for these and 502 for the other transport errors.
const timeoutErrors = new WeakSet<ErrorResponse>()

/** True when `error` came from the client's `timeout`. */
export function isTimeoutError (error: ErrorResponse): boolean {
  return timeoutErrors.has(error)
}

const TYPE_BY_STATUS: Readonly<Record<number, ApiErrorType>> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found',
  409: 'conflict_error',
  413: 'payload_too_large_error',
  422: 'unprocessable_entity_error',
  429: 'rate_limit_error',
  500: 'internal_server_error',
}

const TEXT_BY_STATUS: Readonly<Record<number, string>> = {
  400: 'Bad request.',
  401: 'Authorization required.',
  403: 'Forbidden.',
  404: 'Not found.',
  409: 'Conflict.',
  413: 'Payload too large.',
  422: 'Unprocessable entity.',
  429: 'Too many requests.',
  500: 'Internal server error.',
}

/** The `type` of an upstream HTTP error (the official SDK's names). */
export function errorTypeForStatus (status: number): ApiErrorType {
  return TYPE_BY_STATUS[status] ?? 'api_error'
}

/** One API call as `requestJson` makes it. */
export interface ApiRequest {
  method: 'GET' | 'POST' | 'DELETE'
  url: URL
  /** A JSON body (sent with `content-type: application/json`); none when undefined. */
  body?: unknown
  /** Extra request headers (lower-case names). */
  headers?: Readonly<Record<string, string>>
  /** The statuses that mean success. Default `[200]`. */
  ok?: readonly number[]
  /** Whether a successful reply must be JSON (otherwise its body is read and dropped). Default true. */
  json?: boolean
  /**
   * Whether the call may be repeated after a 5xx: true for GET and DELETE, and for a POST only
   * when the caller opted in. A 429 is retried either way (the API refused the call without
   * acting on it). Default true.
   */
  idempotent?: boolean
  /** The message start for some statuses, replacing the generic one (e.g. 404 of validate). */
  statusText?: Readonly<Record<number, string>>
}

/**
 * GETs `url` and parses a JSON reply. Retries 429 and 5xx up to `maxRetries` times with
 * exponential backoff and jitter, honouring `Retry-After` up to `maxRetryDelay`; never
 * follows a redirect; enforces `timeout` per attempt (headers and body) and a size cap.
 * `signal` cancels the call: the attempt in flight is aborted (its socket closed), no retry
 * follows, and the outcome is an "aborted" `application_error`. Never throws.
 */
export async function getJson (transport: Transport, url: URL, what: string, signal?: AbortSignal): Promise<JsonOutcome> {
  return requestJson(transport, { method: 'GET', url }, what, signal)
}

/**
 * Makes one API call as `getJson` does, with any method: 429 is always retried, 5xx only when
 * `request.idempotent` (a POST that may have taken effect is not repeated unless the caller
 * opted in). A successful reply without a body (201, 204) gives `body: undefined`. Never throws.
 */
export async function requestJson (transport: Transport, request: ApiRequest, what: string, signal?: AbortSignal): Promise<JsonOutcome> {
  // A function, so that TypeScript does not narrow `aborted` across the awaits.
  const aborted = (): boolean => signal?.aborted === true
  const idempotent = request.idempotent ?? true
  for (let attempt = 0; ; attempt++) {
    if (aborted()) return { ok: false, error: abortedError(what) }
    const outcome = await attemptOnce(transport, request, what, signal)
    if (outcome.ok) return outcome
    if (aborted()) return { ok: false, error: abortedError(what) }
    const retryable = outcome.retryable !== null && (idempotent || outcome.error.statusCode === 429)
    if (!retryable || attempt >= transport.maxRetries) return stripRetry(outcome)
    const wait = outcome.retryable!.retryAfterMs ?? backoff(attempt, transport.maxRetryDelay)
    if (wait > transport.maxRetryDelay) return stripRetry(outcome)
    await sleep(wait, signal)
  }
}

/** The error of a call cancelled through its `signal`. */
export function abortedError (what: string): ErrorResponse {
  return localError('application_error', `Failed to ${what}: the request was aborted (its signal fired).`)
}

/** True for anything usable as an AbortSignal (a real one, or one from another realm or polyfill). */
export function isAbortSignal (value: unknown): value is AbortSignal {
  const v = value as Partial<AbortSignal> | null
  return typeof v === 'object' && v !== null && typeof v.aborted === 'boolean' &&
    typeof v.addEventListener === 'function' && typeof v.removeEventListener === 'function'
}

interface AttemptSignal {
  signal: AbortSignal
  timedOut (): boolean
  /** Clears the timer and the listener on the caller's signal. */
  done (): void
}

// One controller per attempt, aborted by the timeout or by the caller's signal. Not
// AbortSignal.any: Node 20-22 keep every composite alive on a long-lived input signal (an app
// passing one shutdown signal to every call would leak), and AbortSignal.timeout keeps its
// timer for the full timeout after the call ended. Here both are undone when the attempt ends.
function attemptSignal (timeout: number, outer: AbortSignal | undefined): AttemptSignal {
  const controller = new AbortController()
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    controller.abort(new DOMException('The operation timed out.', 'TimeoutError'))
  }, timeout)
  timer.unref?.() // like AbortSignal.timeout: the request itself keeps the process alive, not its timer
  const onAbort = (): void => controller.abort(outer?.reason)
  if (outer !== undefined) {
    if (outer.aborted) onAbort()
    else outer.addEventListener('abort', onAbort, { once: true })
  }
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    done: () => {
      clearTimeout(timer)
      outer?.removeEventListener('abort', onAbort)
    },
  }
}

type AttemptOutcome = { ok: true, body: unknown } | { ok: false, error: ErrorResponse, retryable: { retryAfterMs: number | null } | null }

function stripRetry (o: AttemptOutcome): JsonOutcome {
  return o.ok ? o : { ok: false, error: o.error }
}

async function attemptOnce (t: Transport, request: ApiRequest, what: string, outer: AbortSignal | undefined): Promise<AttemptOutcome> {
  const attempt = attemptSignal(t.timeout, outer)
  try {
    return await exchange(t, request, what, attempt, outer)
  } finally {
    attempt.done()
  }
}

async function exchange (t: Transport, request: ApiRequest, what: string, attempt: AttemptSignal, outer: AbortSignal | undefined): Promise<AttemptOutcome> {
  const headers: Record<string, string> = { ...request.headers, accept: 'application/json', 'user-agent': USER_AGENT }
  if (t.apiKey !== null) headers['x-api-key'] = t.apiKey
  let body: string | undefined
  if (request.body !== undefined) {
    body = JSON.stringify(request.body)
    headers['content-type'] = 'application/json'
  }
  let res: Response
  try {
    // 'manual', not 'error': Cloudflare workerd refuses 'error'. Any 3xx (or an opaque redirect,
    // status 0) is refused below, so a redirect never carries the API key elsewhere.
    res = await t.fetch(request.url, { method: request.method, headers, ...(body !== undefined ? { body } : {}), redirect: 'manual', signal: attempt.signal })
  } catch (err) {
    return { ok: false, error: transportError(err, attempt, outer, t, what), retryable: null }
  }
  if ((res.status >= 300 && res.status < 400) || res.type === 'opaqueredirect' || res.status === 0 || res.redirected) {
    await cancel(res)
    const status = res.status === 0 ? '' : ` (HTTP ${res.status})`
    return { ok: false, error: localError('application_error', `Failed to ${what}: the MailChannels API answered with a redirect${status}, which the client refuses to follow.`), retryable: null }
  }
  if (!(request.ok ?? [200]).includes(res.status)) {
    const retryable = res.status === 429 || res.status >= 500 ? { retryAfterMs: parseRetryAfter(res.headers.get('retry-after')) } : null
    let text = ''
    try {
      text = await readCapped(res, MAX_ERROR_BODY_BYTES)
    } catch {
      // The status alone still describes the failure.
    }
    return { ok: false, error: httpError(res.status, text, t.secret, request.statusText), retryable }
  }
  if (request.json === false || res.status === 204) {
    // Read and dropped (bounded), so the connection can be reused; the status says it all.
    await readCapped(res, MAX_ERROR_BODY_BYTES).catch(() => {})
    return { ok: true, body: undefined }
  }
  let text: string
  try {
    text = await readCapped(res, MAX_RESPONSE_BYTES)
  } catch (err) {
    if (err instanceof RangeError) {
      return { ok: false, error: localError('api_error', `Failed to ${what}: the response is larger than ${MAX_RESPONSE_BYTES} bytes.`), retryable: null }
    }
    return { ok: false, error: transportError(err, attempt, outer, t, what), retryable: null }
  }
  try {
    return { ok: true, body: JSON.parse(text) }
  } catch {
    return { ok: false, error: localError('api_error', `Failed to ${what}: the response is not valid JSON.`), retryable: null }
  }
}

function transportError (err: unknown, attempt: AttemptSignal, outer: AbortSignal | undefined, t: Transport, what: string): ErrorResponse {
  if (outer?.aborted === true) return abortedError(what)
  const name = (err as Error | null)?.name
  if (attempt.timedOut() || name === 'TimeoutError' || name === 'AbortError') {
    const error = localError('application_error', `Failed to ${what}: the MailChannels API did not answer within ${t.timeout} ms (timed out).`)
    timeoutErrors.add(error)
    return error
  }
  const cause = (err as { cause?: { message?: unknown } } | null)?.cause
  if (typeof cause?.message === 'string' && /redirect/i.test(cause.message)) {
    return localError('application_error', `Failed to ${what}: the MailChannels API answered with a redirect, which the client refuses to follow.`)
  }
  // undici's messages ("fetch failed", "terminated", "other side closed") carry no secret; keep them short.
  const detail = err instanceof Error ? terminalLine(scrub(`${err.message}${typeof cause?.message === 'string' ? ` (${cause.message})` : ''}`, t.secret)) : ''
  return localError('application_error', `Failed to ${what}: the request could not be completed${detail === '' ? '' : `: ${detail}`}.`)
}

/** Builds the ErrorResponse of an upstream HTTP error. */
export function httpError (status: number, text: string, secret: string, statusText?: Readonly<Record<number, string>>): ErrorResponse {
  let body: unknown = null
  try {
    body = text === '' ? null : JSON.parse(text)
  } catch {
    body = null
  }
  let details = ''
  if (isRecord(body)) {
    if (typeof body.message === 'string') details = body.message
    else if (Array.isArray(body.errors)) details = body.errors.filter((e) => typeof e === 'string').join(', ')
    else if (typeof body.error === 'string') details = body.error
  } else if (typeof body === 'string') {
    details = body
  } else if (body === null && text.length <= 200 && !/[<>]/.test(text)) {
    // A short plain-text body ("boom"); HTML and long bodies are not echoed.
    details = text
  }
  // Cut, then made safe for a terminal or a log line: control, bidi and invisible characters
  // become visible escapes (terminal-text.ts), so a hostile body cannot rewrite what is shown.
  details = scrub(details, secret)
  const cut = details.length > MAX_DETAIL_CHARS
  details = terminalLine(cut ? details.slice(0, MAX_DETAIL_CHARS) : details)
  if (cut) details = `${details}...`
  const start = statusText?.[status] ?? TEXT_BY_STATUS[status] ?? `Unknown error (HTTP ${status}).`
  let response = isRecord(body) ? body : null
  if (response !== null && secret !== '') {
    // The key may appear JSON-escaped (a key with '"' or '\\') as well as verbatim.
    const json = JSON.stringify(response)
    if (json.includes(secret) || json.includes(JSON.stringify(secret).slice(1, -1))) response = null
  }
  return { message: details === '' ? start : `${start} ${details}`, statusCode: status, type: errorTypeForStatus(status), response }
}

/** Seconds or an HTTP date; `null` when absent or unreadable. */
export function parseRetryAfter (value: string | null, now = Date.now()): number | null {
  if (value === null) return null
  const v = value.trim()
  if (/^\d{1,10}$/.test(v)) return Number(v) * 1000
  const at = Date.parse(v)
  if (Number.isNaN(at)) return null
  return Math.max(0, at - now)
}

function backoff (attempt: number, cap: number): number {
  const ceiling = Math.min(cap, BACKOFF_BASE_MS * 2 ** attempt)
  return Math.round(ceiling / 2 + Math.random() * ceiling / 2)
}

/** Waits `ms`, or less if `signal` fires; leaves no timer or listener behind. */
export function sleep (ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal?.aborted === true) return resolve()
    const wake = (): void => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', wake)
      resolve()
    }
    const timer = setTimeout(wake, ms)
    signal?.addEventListener('abort', wake, { once: true })
  })
}

async function cancel (res: Response): Promise<void> {
  await res.body?.cancel().catch(() => {})
}

/** Removes the API key from text that may leave the client. */
export function scrub (text: string, secret: string): string {
  return secret === '' ? text : text.split(secret).join('[redacted]')
}

export function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}
