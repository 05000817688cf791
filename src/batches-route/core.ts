import { buildBatchesQuery, MAX_LIMIT, type BatchesOptions, type WebhooksBatch, type WebhooksBatchStatus } from '../client/batches.js'
import { isTimeoutError } from '../client/http.js'
import type { RequestOptions } from '../client/request-options.js'
import type { ResendBatchOptions, ResentBatch } from '../client/webhooks.js'
import type { ErrorResponse, Result } from '../errors.js'
import type { Logger } from '../logger.js'
import { errorReply, NO_STORE, type ErrorBody, type Reply } from '../receiver/reply.js'

// The framework-free core of the Fastify and Express batches routes: server side, so it lives
// beside the receivers and not in client/ (the API client it calls depends on nothing above it).
// The adapters only translate: they hand over the request, its target and the node:http
// response, and send the reply `serve` returns (or nothing, when it returns null). Replies use
// the webhook receivers' vocabulary (../receiver/reply.ts), with `Cache-Control: no-store`.

/**
 * Decides whether a request may list batches. Return `true` to allow; `false` answers 401
 * `unauthorized`; `{ statusCode: 403 }` answers 403 `forbidden`. Anything else, or a throw,
 * denies with 401 (a thrown error with `statusCode: 403` gives 403). May be async.
 */
export type BatchesAuthorize<Req> = (request: Req) => boolean | { statusCode: 403 } | Promise<boolean | { statusCode: 403 }>

/**
 * What the routes need of a client: `new MailChannels(apiKey)` fits. The route passes a
 * `signal` that fires when the response closes before it was sent (the client left, or
 * something else answered); a custom client should stop its call then. `resendBatch` is
 * needed only with the `resend` option.
 */
export interface BatchesClient {
  webhooks: {
    batches (options?: BatchesOptions, request?: RequestOptions): Promise<Result<WebhooksBatch[]>>
    resendBatch? (batchId: number | string, options?: ResendBatchOptions, request?: RequestOptions): Promise<Result<ResentBatch>>
  }
}

/** Default of the routes' `maxConcurrent`: upstream calls one route keeps in flight at once. */
export const DEFAULT_MAX_CONCURRENT = 10

/** The body of a successful route reply. */
export interface BatchesPage {
  data: WebhooksBatch[]
  pagination: { limit: number, offset: number, nextOffset: number | null }
}

/** The body of a successful resend reply: the new delivery attempt, `data.statusCode` being what the endpoint answered. */
export interface BatchResendReply {
  data: ResentBatch
}

/** The body of a failed route reply: the error shape of every route of the library. */
export type BatchesErrorBody = ErrorBody

/** What a batches route answers. */
export type ProxyReply = Reply<BatchesPage | BatchResendReply | BatchesErrorBody>

/** The route settings, validated. */
export interface ProxyConfig {
  client: BatchesClient
  path: string
  authorize: BatchesAuthorize<any>
  maxConcurrent: number
  /** Whether `POST <path>/:batchId/resend` is served. */
  resend: boolean
}

const ALLOWED = ['createdAfter', 'createdBefore', 'statuses', 'webhook', 'limit', 'offset'] as const
const ALLOWED_SET: ReadonlySet<string> = new Set(ALLOWED)
const MAX_QUERY_CHARS = 4096

/** Validates route options once, at registration. */
export function checkProxyOptions (options: unknown, pathOption: 'url' | 'path'): ProxyConfig {
  if (options === null || typeof options !== 'object') throw new TypeError('batches route options must be an object with client and authorize')
  const o = options as Record<string, unknown>
  if (typeof o.authorize !== 'function') {
    throw new TypeError('authorize must be a function (request) => boolean: the batches route exposes delivery metadata and spends the API quota, so it is never public')
  }
  const client = o.client as BatchesClient | undefined
  if (client === null || typeof client !== 'object' || typeof client.webhooks?.batches !== 'function') {
    throw new TypeError('client must be a MailChannels client (new MailChannels(apiKey))')
  }
  const path = o[pathOption] ?? '/webhooks/batches'
  if (typeof path !== 'string' || !path.startsWith('/') || /[?#\s]/.test(path)) throw new TypeError(`${pathOption} must be a path starting with "/"`)
  const maxConcurrent = o.maxConcurrent ?? DEFAULT_MAX_CONCURRENT
  if (maxConcurrent !== Infinity && !(Number.isInteger(maxConcurrent) && (maxConcurrent as number) >= 1)) {
    throw new TypeError('maxConcurrent must be a positive integer or Infinity (no limit)')
  }
  const resend = o.resend ?? false
  if (typeof resend !== 'boolean') throw new TypeError('resend must be true or false (true serves POST <path>/:batchId/resend)')
  if (resend && typeof client.webhooks.resendBatch !== 'function') {
    throw new TypeError('resend: true needs a client with webhooks.resendBatch (new MailChannels(apiKey))')
  }
  return { client, path, authorize: o.authorize as BatchesAuthorize<any>, maxConcurrent: maxConcurrent as number, resend }
}

/** The part of a node:http `ServerResponse` the route watches (Fastify's `reply.raw`, Express's `res`). */
export interface WatchedResponse {
  readonly headersSent: boolean
  readonly writableEnded: boolean
  readonly destroyed?: boolean
  once (event: 'close', listener: () => void): unknown
  removeListener (event: 'close', listener: () => void): unknown
}

/** One request as an adapter hands it to `serve`. */
export interface ProxyExchange<Req> {
  request: Req
  /** The request target the route matched (path and query); the query is read from it. */
  target: string
  /** The target as the client sent it, before any mount stripping or rewrite: the `Link` path. */
  originalTarget: string
  response: WatchedResponse
  log: Logger
}

/** One resend request as an adapter hands it to `serveResend`. */
export interface ResendExchange<Req> {
  request: Req
  /** The `:batchId` path segment, as received (still percent-encoded). */
  batchId: string
  /** The request target (path and query); the query is read from it. */
  target: string
  response: WatchedResponse
  log: Logger
}

/** A route's proxy: one per registration, holding the count of upstream calls in flight. */
export interface BatchesProxy {
  /**
   * Authorizes, validates and proxies one request. Resolves the reply to send, or `null` when
   * the response was closed or answered by something else meanwhile: then nothing may be
   * written, and the upstream call has been cancelled (or never made).
   */
  serve<Req> (exchange: ProxyExchange<Req>): Promise<ProxyReply | null>
  /**
   * Authorizes, validates and makes one resend. Resolves the reply to send, or `null` when the
   * response was closed or answered meanwhile (a resend already under way is left to finish:
   * cancelling it would not undo it, only hide its outcome, which is logged).
   */
  serveResend<Req> (exchange: ResendExchange<Req>): Promise<ProxyReply | null>
}

export function createBatchesProxy (config: ProxyConfig): BatchesProxy {
  const { client, authorize, maxConcurrent } = config
  let inFlight = 0
  return {
    async serve ({ request, target, originalTarget, response, log }) {
      const watch = watchResponse(response)
      try {
        const denied = await runAuthorize(authorize, request, log)
        if (watch.gone()) {
          log.debug({}, 'batches route: the response was closed or answered during authorize; nothing sent')
          return null
        }
        if (denied !== null) return denied
        const parsed = parseProxyQuery(queryOf(target))
        if (parsed.reply !== null) return parsed.reply
        if (inFlight >= maxConcurrent) {
          log.warn({ maxConcurrent }, 'batches route: maxConcurrent upstream calls in flight; request refused with 503')
          return proxyError(503, 'overloaded', 'Too many webhook batch listings are in progress; try again shortly.', 1)
        }
        inFlight++
        let reply: ProxyReply | null
        try {
          reply = await proxyBatches(client, parsed.options, linkPath(originalTarget), log, watch.signal)
        } finally {
          inFlight--
        }
        if (reply === null || watch.gone()) {
          log.debug({}, 'batches route: the response was closed or answered before the listing arrived; upstream call cancelled, nothing sent')
          return null
        }
        return reply
      } finally {
        watch.dispose()
      }
    },

    async serveResend ({ request, batchId, target, response, log }) {
      const watch = watchResponse(response)
      try {
        const denied = await runAuthorize(authorize, request, log)
        if (watch.gone()) return null
        if (denied !== null) return denied
        const parsed = parseResendRequest(batchId, queryOf(target))
        if (parsed.reply !== null) return parsed.reply
        if (inFlight >= maxConcurrent) {
          log.warn({ maxConcurrent }, 'batches route: maxConcurrent upstream calls in flight; resend refused with 503')
          return proxyError(503, 'overloaded', 'Too many webhook batch requests are in progress; try again shortly.', 1)
        }
        inFlight++
        let reply: ProxyReply
        try {
          reply = await proxyResend(client, parsed.batchId, parsed.options, log)
        } finally {
          inFlight--
        }
        if (watch.gone()) {
          log.debug({}, 'batches route: the response was closed or answered before the resend finished; nothing sent')
          return null
        }
        return reply
      } finally {
        watch.dispose()
      }
    },
  }
}

const RESEND_QUERY = ['customerHandle']

/** The batch id of a resend route (a positive safe integer) and its one optional query parameter. */
function parseResendRequest (rawId: string, rawQuery: string): { batchId: number, options: ResendBatchOptions, reply: null } | { batchId: null, options: null, reply: ProxyReply } {
  const bad = (message: string): { batchId: null, options: null, reply: ProxyReply } => ({ batchId: null, options: null, reply: proxyError(400, 'validation_error', message) })
  if (!/^[1-9]\d{0,15}$/.test(rawId) || !Number.isSafeInteger(Number(rawId))) return bad('The batch id must be a positive integer, e.g. /1234/resend.')
  if (rawQuery.length > MAX_QUERY_CHARS) return bad('The query string is too long.')
  const options: ResendBatchOptions = {}
  const seen = new Set<string>()
  for (const [key, value] of new URLSearchParams(rawQuery)) {
    if (!RESEND_QUERY.includes(key)) return bad(`Unknown query parameter '${printable(key)}'. Allowed: ${RESEND_QUERY.join(', ')}.`)
    if (seen.has(key)) return bad(`The query parameter '${key}' is repeated; give it once.`)
    seen.add(key)
    if (!/^[\x21-\x7e]{1,255}$/.test(value)) return bad('The customerHandle value must be 1 to 255 printable ASCII characters without spaces.')
    options.customerHandle = value
  }
  return { batchId: Number(rawId), options, reply: null }
}

/** Makes the resend through the client and shapes the reply. */
async function proxyResend (client: BatchesClient, batchId: number, options: ResendBatchOptions, log: Logger): Promise<ProxyReply> {
  let result: Result<ResentBatch>
  try {
    // No signal: once under way, a resend is left to finish so its outcome is known (and logged).
    result = await client.webhooks.resendBatch!(batchId, options)
  } catch {
    log.error({ type: 'application_error' }, 'batches route: the client threw')
    return proxyError(502, 'application_error', 'Resending the webhook batch failed upstream.')
  }
  if (result === null || typeof result !== 'object' || (result.error === null && (result.data === null || typeof result.data !== 'object'))) {
    log.error({ type: 'application_error' }, 'batches route: the client returned no { data, error } result')
    return proxyError(502, 'application_error', 'Resending the webhook batch failed upstream.')
  }
  if (result.error !== null) {
    if (result.error.statusCode === 404) {
      log.info({ batchId }, 'batches route: resend of an unknown batch')
      return proxyError(404, 'not_found', 'No batch with this id exists for this account.')
    }
    return upstreamFailure(result.error, log, 'Resending the webhook batch failed upstream.')
  }
  log.info({ batchId, statusCode: result.data.statusCode }, 'batches route: webhook batch resent')
  return { status: 200, headers: { ...NO_STORE }, body: { data: result.data } }
}

/**
 * Watches a response for the route: `signal` fires on its 'close' (which comes when the client
 * leaves, and also after anything else finished answering it), `gone()` says nothing may be
 * written any more.
 */
function watchResponse (response: WatchedResponse): { signal: AbortSignal, gone (): boolean, dispose (): void } {
  const controller = new AbortController()
  const onClose = (): void => controller.abort()
  response.once('close', onClose)
  const gone = (): boolean => controller.signal.aborted || response.headersSent || response.writableEnded || response.destroyed === true
  if (gone()) controller.abort()
  return { signal: controller.signal, gone, dispose: () => { response.removeListener('close', onClose) } }
}

/** Runs `authorize`; `null` when allowed, else the denial reply. */
async function runAuthorize<Req> (authorize: BatchesAuthorize<Req>, request: Req, log: Logger): Promise<ProxyReply | null> {
  let status: 401 | 403
  try {
    const verdict: unknown = await authorize(request)
    if (verdict === true) return null
    // Read inside the guard: `statusCode` may be a getter that throws.
    status = (verdict as { statusCode?: unknown } | null)?.statusCode === 403 ? 403 : 401
  } catch (err) {
    status = readSafely(() => (err as { statusCode?: unknown } | null)?.statusCode) === 403 ? 403 : 401
    const name = readSafely(() => (err as Error | null)?.name)
    log.warn({ err: { name: typeof name === 'string' ? name.slice(0, 60) : undefined } }, 'batches route: authorize threw; request denied')
  }
  return status === 403
    ? proxyError(403, 'forbidden', 'Access to webhook batches is forbidden.')
    : proxyError(401, 'unauthorized', 'Authentication is required to list webhook batches.')
}

function readSafely (read: () => unknown): unknown {
  try {
    return read()
  } catch {
    return undefined
  }
}

/**
 * Parses the raw query string with a strict allowlist: unknown keys, repeated keys and
 * bracket arrays are refused. Returns the client options or a 400 reply.
 */
function parseProxyQuery (rawQuery: string): { options: BatchesOptions, reply: null } | { options: null, reply: ProxyReply } {
  const bad = (message: string): { options: null, reply: ProxyReply } => ({ options: null, reply: proxyError(400, 'validation_error', message) })
  if (rawQuery.length > MAX_QUERY_CHARS) return bad('The query string is too long.')
  const params = new URLSearchParams(rawQuery)
  const seen = new Map<string, string>()
  for (const [key, value] of params) {
    if (!ALLOWED_SET.has(key)) return bad(`Unknown query parameter '${printable(key)}'. Allowed: ${ALLOWED.join(', ')}.`)
    if (seen.has(key)) return bad(`The query parameter '${key}' is repeated; give it once (statuses as a comma-separated list).`)
    seen.set(key, value)
  }
  const options: BatchesOptions = {}
  const createdAfter = seen.get('createdAfter')
  const createdBefore = seen.get('createdBefore')
  const statuses = seen.get('statuses')
  const webhook = seen.get('webhook')
  const limit = seen.get('limit')
  const offset = seen.get('offset')
  if (createdAfter !== undefined) options.createdAfter = createdAfter
  if (createdBefore !== undefined) options.createdBefore = createdBefore
  if (statuses !== undefined) options.statuses = (statuses === '' ? [] : statuses.split(',')) as WebhooksBatchStatus[]
  if (webhook !== undefined) options.webhook = webhook
  if (limit !== undefined) {
    if (!/^\d{1,3}$/.test(limit)) return bad('The limit value must be an integer between 1 and 500.')
    options.limit = Number(limit)
  }
  if (offset !== undefined) {
    // Up to 16 digits: every safe integer (the client refuses larger ones with the same message).
    if (!/^\d{1,16}$/.test(offset)) return bad('The offset value must be an integer greater than or equal to 0.')
    options.offset = Number(offset)
  }
  // The client's own validation (ranges, dates, statuses) gives the same messages as `batches`.
  const built = buildBatchesQuery(options)
  if (built.error !== null) return bad(built.error.message)
  return { options, reply: null }
}

/**
 * Lists one page through the client and shapes the reply (page + `Link`, or a generic error).
 * `path` is the `Link` path (from `linkPath`). `null` when `signal` fired (nobody to answer).
 */
async function proxyBatches (client: BatchesClient, options: BatchesOptions, path: string, log: Logger, signal: AbortSignal): Promise<ProxyReply | null> {
  let result: Result<WebhooksBatch[]>
  try {
    result = await client.webhooks.batches(options, { signal })
  } catch {
    if (signal.aborted) return null
    // A custom client that throws: treat as an upstream failure, without its message.
    log.error({ type: 'application_error' }, 'batches route: the client threw')
    return proxyError(502, 'application_error', 'Listing webhook batches failed upstream.')
  }
  if (result === null || typeof result !== 'object' || (result.error === null && !Array.isArray(result.data))) {
    log.error({ type: 'application_error' }, 'batches route: the client returned no { data, error } result')
    return proxyError(502, 'application_error', 'Listing webhook batches failed upstream.')
  }
  if (signal.aborted) return null
  if (result.error !== null) return upstreamFailure(result.error, log)
  const limit = options.limit ?? MAX_LIMIT
  const offset = options.offset ?? 0
  // No next page past the safe-integer range: the route would refuse that offset.
  const after = offset + result.data.length
  const nextOffset = result.data.length < limit || !Number.isSafeInteger(after) ? null : after
  const headers: Record<string, string> = {}
  if (nextOffset !== null) headers.link = `<${nextLink(path, options, nextOffset)}>; rel="next"`
  return { status: 200, headers: { ...NO_STORE, ...headers }, body: { data: result.data, pagination: { limit, offset, nextOffset } } }
}

function upstreamFailure (error: ErrorResponse, log: Logger, generic = 'Listing webhook batches failed upstream.'): ProxyReply {
  // Only the type and status are logged: the message may quote upstream text.
  log.warn({ type: error.type, upstreamStatusCode: error.statusCode }, 'batches route: MailChannels API call failed')
  if (error.type === 'validation_error') return proxyError(400, 'validation_error', error.message)
  if (isTimeoutError(error)) return proxyError(504, error.type, 'The MailChannels API did not answer in time.')
  if (error.type === 'rate_limit_error' || (error.statusCode !== null && error.statusCode >= 500)) {
    return proxyError(503, error.type, 'The MailChannels API is unavailable; try again later.')
  }
  return proxyError(502, error.type, generic)
}

function nextLink (path: string, options: BatchesOptions, nextOffset: number): string {
  const q = new URLSearchParams()
  const { createdAfter, createdBefore, statuses, webhook, limit } = options
  if (typeof createdAfter === 'string') q.set('createdAfter', createdAfter)
  if (typeof createdBefore === 'string') q.set('createdBefore', createdBefore)
  if (statuses !== undefined && statuses.length > 0) q.set('statuses', statuses.join(','))
  if (webhook !== undefined) q.set('webhook', webhook)
  if (limit !== undefined) q.set('limit', String(limit))
  q.set('offset', String(nextOffset))
  return `${path}?${q.toString()}`
}

/** A failed reply of the batches routes. */
function proxyError (status: number, code: string, message: string, retryAfter?: number): ProxyReply {
  const reply = errorReply(status, code, message, retryAfter)
  return { status, headers: { ...NO_STORE, ...reply.headers }, body: reply.body }
}

function printable (s: string): string {
  return s.slice(0, 40).replace(/[^\x20-\x7e]/g, '?')
}

// scheme "://" authority of an absolute-form request target (RFC 9112 §3.2.2), which Node accepts.
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/

/** The path part of a raw request target (origin-form or absolute-form). */
export function pathOf (rawUrl: string): string {
  const i = rawUrl.search(/[?#]/)
  const path = i === -1 ? rawUrl : rawUrl.slice(0, i)
  const abs = ABSOLUTE_FORM.exec(path)
  return abs === null ? path : path.slice(abs[0].length) || '/'
}

// Kept as is in a Link path: unreserved characters, '/', ':' and '@'. Everything else, including
// the characters of the Link syntax (< > ; , ") and '\', is percent-encoded.
const LINK_SAFE = /[A-Za-z0-9\-._~/:@]/
const HEX2 = /^[0-9A-Fa-f]{2}$/
const UTF8 = new TextEncoder()

/**
 * The path of a `Link` target for the request target `rawUrl`: the path the client used,
 * percent-encoded outside a strict allowlist (valid `%XX` escapes kept), always starting with
 * exactly one `/` (never `//`, which would name another host). Resolved against the request
 * URL it stays on the same origin.
 */
export function linkPath (rawUrl: string): string {
  const path = pathOf(rawUrl)
  let out = ''
  for (let i = 0; i < path.length; i++) {
    const ch = path[i]!
    if (LINK_SAFE.test(ch)) {
      out += ch
    } else if (ch === '%' && HEX2.test(path.slice(i + 1, i + 3))) {
      out += path.slice(i, i + 3)
      i += 2
    } else {
      const code = path.charCodeAt(i)
      // Node hands request bytes over as latin1 characters: one byte each.
      if (code <= 0xff) {
        out += `%${code.toString(16).toUpperCase().padStart(2, '0')}`
      } else {
        const cp = path.codePointAt(i)!
        if (cp > 0xffff) i++
        // A lone surrogate becomes U+FFFD in UTF-8.
        for (const b of UTF8.encode(String.fromCodePoint(cp))) out += `%${b.toString(16).toUpperCase().padStart(2, '0')}`
      }
    }
  }
  return `/${out.replace(/^\/+/, '')}`
}

/** The query part of a raw request URL, without `?`. */
function queryOf (rawUrl: string): string {
  const i = rawUrl.indexOf('?')
  return i === -1 ? '' : rawUrl.slice(i + 1)
}
