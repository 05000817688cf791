import type { ErrorResponse, Result } from '../errors.js'
import type { Logger } from '../logger.js'
import { buildBatchesQuery, MAX_LIMIT, type BatchesOptions, type WebhooksBatch, type WebhooksBatchStatus } from './batches.js'
import { isTimeoutError } from './http.js'

// The framework-free core of the Fastify and Express batches routes (threat-model T17, T18, H1-H14).

/**
 * Decides whether a request may list batches. Return `true` to allow; `false` answers 401
 * `unauthorized`; `{ statusCode: 403 }` answers 403 `forbidden`. Anything else, or a throw,
 * denies with 401 (a thrown error with `statusCode: 403` gives 403). May be async.
 */
export type BatchesAuthorize<Req> = (request: Req) => boolean | { statusCode: 403 } | Promise<boolean | { statusCode: 403 }>

/** What the routes need of a client: `new MailChannels(apiKey)` fits. */
export interface BatchesClient {
  webhooks: { batches (options?: BatchesOptions): Promise<Result<WebhooksBatch[]>> }
}

/** The body of a successful route reply. */
export interface BatchesPage {
  data: WebhooksBatch[]
  pagination: { limit: number, offset: number, nextOffset: number | null }
}

/** The body of a failed route reply (Fastify's error shape). */
export interface BatchesErrorBody {
  statusCode: number
  code: string
  error: string
  message: string
}

export interface ProxyReply {
  statusCode: number
  headers: Record<string, string>
  body: BatchesPage | BatchesErrorBody
}

const ALLOWED = ['createdAfter', 'createdBefore', 'statuses', 'webhook', 'limit', 'offset'] as const
const ALLOWED_SET: ReadonlySet<string> = new Set(ALLOWED)
const MAX_QUERY_CHARS = 4096
const REASON: Readonly<Record<number, string>> = {
  400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout', 500: 'Internal Server Error',
}

/** Validates route options once, at registration. */
export function checkProxyOptions (options: unknown, pathOption: 'url' | 'path'): { client: BatchesClient, path: string, authorize: BatchesAuthorize<any> } {
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
  return { client, path, authorize: o.authorize as BatchesAuthorize<any> }
}

/** Runs `authorize`; `null` when allowed, else the denial reply. */
export async function runAuthorize<Req> (authorize: BatchesAuthorize<Req>, request: Req, log: Logger): Promise<ProxyReply | null> {
  let verdict: unknown
  try {
    verdict = await authorize(request)
  } catch (err) {
    const status = (err as { statusCode?: unknown } | null)?.statusCode === 403 ? 403 : 401
    log.warn({ err: { name: (err as Error | null)?.name } }, 'batches route: authorize threw; request denied')
    return errorReply(status, status === 403 ? 'forbidden' : 'unauthorized', status === 403 ? 'Access to webhook batches is forbidden.' : 'Authentication is required to list webhook batches.')
  }
  if (verdict === true) return null
  if ((verdict as { statusCode?: unknown } | null)?.statusCode === 403) return errorReply(403, 'forbidden', 'Access to webhook batches is forbidden.')
  return errorReply(401, 'unauthorized', 'Authentication is required to list webhook batches.')
}

/**
 * Parses the raw query string with a strict allowlist: unknown keys, repeated keys and
 * bracket arrays are refused. Returns the client options or a 400 reply.
 */
export function parseProxyQuery (rawQuery: string): { options: BatchesOptions, reply: null } | { options: null, reply: ProxyReply } {
  const bad = (message: string): { options: null, reply: ProxyReply } => ({ options: null, reply: errorReply(400, 'validation_error', message) })
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
    if (!/^\d{1,15}$/.test(offset)) return bad('The offset value must be an integer greater than or equal to 0.')
    options.offset = Number(offset)
  }
  // The client's own validation (ranges, dates, statuses) gives the same messages as `batches`.
  const built = buildBatchesQuery(options)
  if (built.error !== null) return bad(built.error.message)
  return { options, reply: null }
}

/** Lists one page through the client and shapes the reply (page + `Link`, or a generic error). */
export async function proxyBatches (client: BatchesClient, options: BatchesOptions, path: string, log: Logger): Promise<ProxyReply> {
  let result: Result<WebhooksBatch[]>
  try {
    result = await client.webhooks.batches(options)
  } catch {
    // A custom client that throws: treat as an upstream failure, without its message.
    log.error({ type: 'application_error' }, 'batches route: the client threw')
    return errorReply(502, 'application_error', 'Listing webhook batches failed upstream.')
  }
  if (result === null || typeof result !== 'object' || (result.error === null && !Array.isArray(result.data))) {
    log.error({ type: 'application_error' }, 'batches route: the client returned no { data, error } result')
    return errorReply(502, 'application_error', 'Listing webhook batches failed upstream.')
  }
  if (result.error !== null) return upstreamFailure(result.error, log)
  const limit = options.limit ?? MAX_LIMIT
  const offset = options.offset ?? 0
  const nextOffset = result.data.length < limit ? null : offset + result.data.length
  const headers: Record<string, string> = {}
  if (nextOffset !== null) headers.link = `<${nextLink(path, options, nextOffset)}>; rel="next"`
  return { statusCode: 200, headers, body: { data: result.data, pagination: { limit, offset, nextOffset } } }
}

function upstreamFailure (error: ErrorResponse, log: Logger): ProxyReply {
  // Only the type and status are logged: the message may quote upstream text.
  log.warn({ type: error.type, upstreamStatusCode: error.statusCode }, 'batches route: MailChannels API call failed')
  if (error.type === 'validation_error') return errorReply(400, 'validation_error', error.message)
  if (isTimeoutError(error)) return errorReply(504, error.type, 'The MailChannels API did not answer in time.')
  if (error.type === 'rate_limit_error' || (error.statusCode !== null && error.statusCode >= 500)) {
    return errorReply(503, error.type, 'The MailChannels API is unavailable; try again later.')
  }
  return errorReply(502, error.type, 'Listing webhook batches failed upstream.')
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

export function errorReply (statusCode: number, code: string, message: string): ProxyReply {
  return { statusCode, headers: {}, body: { statusCode, code, error: REASON[statusCode] ?? 'Error', message } }
}

function printable (s: string): string {
  return s.slice(0, 40).replace(/[^\x20-\x7e]/g, '?')
}

/** The path part of a raw request URL. */
export function pathOf (rawUrl: string): string {
  const i = rawUrl.indexOf('?')
  return i === -1 ? rawUrl : rawUrl.slice(0, i)
}

/** The query part of a raw request URL, without `?`. */
export function queryOf (rawUrl: string): string {
  const i = rawUrl.indexOf('?')
  return i === -1 ? '' : rawUrl.slice(i + 1)
}
