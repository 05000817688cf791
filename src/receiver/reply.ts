// The reply vocabulary of every route the library serves (the webhook receivers and the batches
// routes): one error body shape, one reason-phrase table, one way to say Retry-After. Runtime
// neutral: adapters turn a `Reply` into a Fastify reply, a node:http response or a fetch Response.

/** HTTP reason phrases of the statuses the routes answer with (the same words as Node's `STATUS_CODES`). */
const REASON_PHRASES: Readonly<Record<number, string>> = Object.freeze({
  200: 'OK',
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
})

/** The reason phrase of `status` (`'Error'` for one the routes never answer with). */
export function reasonPhrase (status: number): string {
  return REASON_PHRASES[status] ?? 'Error'
}

/**
 * The body of every failed reply: Fastify's error shape, with the library's reason code as `code`.
 * `error` is the HTTP reason phrase; `message` is the library's own text (never a signature, a key,
 * an API key or body content).
 */
export interface ErrorBody<Code extends string = string> {
  statusCode: number
  code: Code
  error: string
  message: string
}

/** What a route answers: a status, its headers (lower-case names) and a JSON body. */
export interface Reply<Body = unknown> {
  status: number
  headers: Record<string, string>
  body: Body
}

/**
 * A failed reply. `retryAfter` (seconds) becomes `Retry-After`; a 413 also carries
 * `Connection: close`, so a body refused for its size is not read on (an adapter whose runtime
 * manages connections itself, such as a fetch `Response`, may drop that header).
 */
export function errorReply<Code extends string> (status: number, code: Code, message: string, retryAfter?: number): Reply<ErrorBody<Code>> {
  const headers: Record<string, string> = {}
  if (retryAfter !== undefined) headers['retry-after'] = String(retryAfter)
  if (status === 413) headers.connection = 'close'
  return { status, headers, body: { statusCode: status, code, error: reasonPhrase(status), message } }
}

/** Every reply of the batches routes: listings are per caller and change, so nothing may cache them. */
export const NO_STORE: Readonly<Record<string, string>> = Object.freeze({ 'cache-control': 'no-store' })

/** The media type of every reply body. */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8'
