// The receiving side (`mailchannels-webhooks inspect`): an endpoint that verifies each delivery
// with the library's fetch handler, answers as a receiver built on it would, and shows every
// delivery with its verdict on the inspector page. Deliveries are taken from any Host (a tunnel
// forwards the real service's under its own name); the page and its API only from this machine.
import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import { DEFAULT_BASE_URL, parseBaseUrl } from '../../base-url.js'
import type { Logger } from '../../logger.js'
import { resolveBodyLimit } from '../../receiver/options.js'
import { errorReply, type Reply } from '../../receiver/reply.js'
import { tooLargeMessage } from '../../receiver/transport.js'
import { createWebhookHandler, type WebhookHandler } from '../../web/index.js'
import { hasApiKey, isLoopbackHostHeader, isRelayed } from '../sandbox/guards.js'
import { WEBHOOK_EVENT_TYPES } from '../../events/types.js'
import { bodyText, classify, curlCommand, describeDigest, describeSignature, eventsAtAGlance, reasonOf, type HeaderLine, type InspectedDetail, type InspectedSummary } from './describe.js'
import { isInspectorPath, isPageFile, sendInspectorJson, sendPageFile, serveInspectorApi, type InspectorSite } from './http.js'
import { Journal } from './journal.js'
import type { WebhookEventRouter } from '../../dispatch/router.js'

/** Options of `createInspector`. Validated once; a bad value throws a TypeError naming the option. */
export interface InspectorOptions {
  /**
   * Port on 127.0.0.1.
   * @default 0 (any free port)
   */
  port?: number
  /**
   * The signing key deliveries are verified with (base64 SPKI DER, as the public-key endpoint
   * serves it, or PEM). When set, no key is fetched.
   * @default none (each delivery's key is fetched by its keyid from `baseUrl`)
   */
  publicKey?: string
  /**
   * Where signing keys are fetched: MailChannels, or a sandbox's URL.
   * @default 'https://api.mailchannels.net'
   */
  baseUrl?: string
  /**
   * The `customer_handle`s accepted; a delivery for another customer is rejected (`customer_not_allowed`).
   * @default 'any'
   */
  customerHandles?: readonly string[] | 'any'
  /**
   * Largest body accepted, in bytes (larger ones are answered 413 and shown cut short).
   * @default 1048576 (1 MiB)
   */
  bodyLimit?: number
  /**
   * Called with each delivery once it has been answered and recorded.
   * @default none
   */
  onDelivery?: (delivery: InspectedSummary) => void
  /**
   * Where the library logs key fetch failures and rejections.
   * @default silent
   */
  logger?: Logger
  /**
   * A `WebhookEventRouter` with `deadLetters`: the page then lists its parked events with their
   * last error, each with a button that runs `router.retryDeadLetter` (your handlers, in this process).
   * @default none (no dead-letter panel)
   */
  deadLetters?: Pick<WebhookEventRouter<any, any>, 'retryDeadLetter' | 'deadLetters'>
}

/** A running inspector: a verifying endpoint and its page. */
export interface Inspector {
  /** Origin of the server, e.g. `http://127.0.0.1:8788`: deliveries go to any path under it. */
  readonly url: string
  /**
   * The page, with the run's key in the fragment (`http://127.0.0.1:8788/#key=…`). Not enumerable,
   * so it stays out of `util.inspect` output and JSON.
   */
  readonly pageUrl: string
  /** The key the page's API requires (`X-Api-Key`), random for each run. Not enumerable. */
  readonly apiKey: string
  /** The deliveries kept (the most recent 500 at most), oldest first. */
  readonly deliveries: readonly InspectedSummary[]
  /** Closes the server and its connections (open pages included). */
  close (): Promise<void>
}

const MAX_PATH_CHARS = 2000

const pairs = (raw: readonly string[]): HeaderLine[] => {
  const out: HeaderLine[] = []
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i]!, raw[i + 1]!])
  return out
}

/** Reads at most `limit` bytes; `tooLarge` when more arrived (the rest is drained, not kept). */
function readAtMost (req: http.IncomingMessage, limit: number): Promise<{ body: Buffer, received: number, tooLarge: boolean }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let received = 0
    let kept = 0
    req.on('data', (chunk: Buffer) => {
      received += chunk.length
      if (kept + chunk.length <= limit) {
        chunks.push(chunk)
        kept += chunk.length
      }
    })
    const done = (): void => resolve({ body: Buffer.concat(chunks), received, tooLarge: received > limit })
    req.on('end', done)
    req.on('error', done)
    req.on('close', done)
  })
}

function writeAnswer (res: http.ServerResponse, status: number, headers: HeaderLine[], body: string): void {
  if (res.headersSent) return
  const out: Record<string, string> = {}
  for (const [name, value] of headers) out[name] = value
  out['content-length'] = String(Buffer.byteLength(body))
  res.writeHead(status, out)
  res.end(body)
}

const replyLines = (reply: Reply): { status: number, headers: HeaderLine[], body: string } => ({
  status: reply.status,
  headers: [['content-type', 'application/json; charset=utf-8'], ...Object.entries(reply.headers)],
  body: JSON.stringify(reply.body),
})

/**
 * Starts an inspector on 127.0.0.1: every POST to a path outside `/inspector/` is a delivery,
 * verified with `createWebhookHandler` (signature, digest, freshness, customers, replay) and
 * answered as that handler answers (204 when accepted). The page at `/` lists the deliveries
 * with their verdicts; it and its API answer only requests addressed to a loopback host, not
 * relayed, and the API only with the run's key.
 */
export async function createInspector (options: InspectorOptions = {}): Promise<Inspector> {
  if (options === null || typeof options !== 'object') throw new TypeError('createInspector options must be an object')
  const { port = 0, publicKey, customerHandles = 'any', onDelivery, logger, deadLetters } = options
  if (deadLetters !== undefined && (deadLetters === null || typeof deadLetters !== 'object' || typeof deadLetters.retryDeadLetter !== 'function' || deadLetters.deadLetters === undefined)) {
    throw new TypeError('deadLetters must be a WebhookEventRouter made with the deadLetters option ({ store, after })')
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new TypeError('port must be an integer from 0 to 65535')
  const bodyLimit = resolveBodyLimit(options.bodyLimit)
  if (onDelivery !== undefined && typeof onDelivery !== 'function') throw new TypeError('onDelivery must be a function')
  if (publicKey !== undefined && options.baseUrl !== undefined) throw new TypeError('publicKey and baseUrl cannot be given together: with publicKey no key is fetched')
  const baseUrl = parseBaseUrl(options.baseUrl ?? DEFAULT_BASE_URL)
  if (customerHandles !== 'any' && (!Array.isArray(customerHandles) || customerHandles.length === 0 || customerHandles.some((h) => typeof h !== 'string' || h === ''))) {
    throw new TypeError("customerHandles must be a non-empty array of customer handles, or 'any'")
  }
  const apiKey = crypto.randomBytes(24).toString('base64url')
  const journal = new Journal()
  // The events of each accepted request, picked up once the handler has answered.
  const accepted = new WeakMap<Request, number>()
  const handler: WebhookHandler = createWebhookHandler({
    customerHandles,
    bodyLimit,
    ...(publicKey !== undefined ? { publicKey } : { baseUrl }),
    ...(logger !== undefined ? { logger } : {}),
    onEvents: (events, request) => { accepted.set(request, events.length) },
  })

  let origin = ''
  const site: InspectorSite = {
    mode: 'receiver',
    journal,
    info: () => ({
      receiveUrl: `POST ${origin}/<any path>`,
      verifyWith: publicKey !== undefined ? 'the public key given (no key is fetched)' : `keys fetched from ${baseUrl}`,
      customers: customerHandles === 'any' ? 'any' : customerHandles.join(', '),
      eventTypes: WEBHOOK_EVENT_TYPES,
      deadLetters: deadLetters !== undefined,
    }),
  }
  const streams = new Set<http.ServerResponse>()

  const servePage = (req: http.IncomingMessage, res: http.ServerResponse, url: URL): void => {
    req.resume()
    if (!isLoopbackHostHeader(req.rawHeaders)) {
      return sendInspectorJson(res, 421, { errors: ['The inspector page answers only to requests addressed to a loopback host (127.0.0.1, localhost or [::1]).'] })
    }
    if (isRelayed(req)) {
      return sendInspectorJson(res, 403, { errors: ['The inspector answers only direct requests from this machine, not requests relayed by a proxy or a tunnel.'] })
    }
    const retry = deadLetters !== undefined ? API_DEAD_LETTER_RETRY.exec(url.pathname) : null
    if (retry !== null) {
      if (req.method !== 'POST') return sendInspectorJson(res, 405, { errors: ['Method not allowed.'] }, { allow: 'POST' })
      if (!hasApiKey(req, apiKey)) return sendInspectorJson(res, 401, { errors: ['Missing or invalid X-Api-Key header.'] })
      return void retryDeadLetter(res, deadLetters!, retry[1]!)
    }
    if (req.method !== 'GET') return sendInspectorJson(res, 405, { errors: ['Method not allowed.'] }, { allow: 'GET' })
    if (isPageFile(url.pathname)) return sendPageFile(res, url.pathname, 'receiver')
    if (!hasApiKey(req, apiKey)) return sendInspectorJson(res, 401, { errors: ['Missing or invalid X-Api-Key header.'] })
    if (url.pathname === API_DEAD_LETTERS) {
      if (deadLetters === undefined) return sendInspectorJson(res, 404, { errors: ['This inspector was not given a router with dead letters.'] })
      return void listDeadLetters(res, deadLetters)
    }
    if (!serveInspectorApi(req, res, url, site, streams)) sendInspectorJson(res, 404, { errors: ['Not found.'] })
  }

  const receive = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    // MailChannels never sends Origin; a browser always does: a page elsewhere cannot fill the list.
    if (req.headers.origin !== undefined) {
      req.resume()
      const r = replyLines(errorReply(403, 'browser_request', 'Webhook deliveries come from MailChannels, not from a web page: a request with an Origin header is refused.'))
      return writeAnswer(res, r.status, r.headers, r.body)
    }
    const at = new Date().toISOString()
    const started = performance.now()
    const headers = pairs(req.rawHeaders)
    const path = (req.url ?? '/').slice(0, MAX_PATH_CHARS)
    const declared = Number(req.headers['content-length'])
    let read: { body: Buffer, received: number, tooLarge: boolean }
    if (Number.isFinite(declared) && declared > bodyLimit) {
      // Not read at all, as the library's receivers do.
      req.resume()
      read = { body: Buffer.alloc(0), received: declared, tooLarge: true }
    } else {
      read = await readAtMost(req, bodyLimit)
    }
    let answer: { status: number, headers: HeaderLine[], body: string }
    let request: Request | null = null
    if (read.tooLarge) {
      answer = replyLines(errorReply(413, 'payload_too_large', tooLargeMessage(bodyLimit)))
      answer.headers.push(['connection', 'close'])
    } else {
      try {
        const fetchHeaders = new Headers()
        for (const [name, value] of headers) fetchHeaders.append(name, value)
        request = new Request(`http://inspector.invalid${url(path)}`, { method: 'POST', headers: fetchHeaders, body: read.body })
      } catch {
        request = null
      }
      if (request === null) {
        answer = replyLines(errorReply(400, 'malformed_header', 'The request headers cannot be read.'))
      } else {
        const response = await handler(request)
        answer = { status: response.status, headers: [...response.headers], body: await response.text() }
      }
    }
    writeAnswer(res, answer.status, answer.headers, answer.body)
    const durationMs = Math.max(0, Math.round(performance.now() - started))
    const glance = read.tooLarge ? { count: null, types: [], requestIds: [], addresses: [] } : eventsAtAGlance(read.body)
    const summary = journal.add({
      at,
      endpoint: path,
      batchId: null,
      attempt: null,
      eventCount: request !== null && accepted.has(request) ? accepted.get(request)! : glance.count,
      eventTypes: glance.types,
      requestIds: glance.requestIds,
      addresses: glance.addresses,
      statusCode: answer.status,
      durationMs,
      outcome: classify(answer.status, answer.body),
      reason: reasonOf(answer.body),
      tamper: null,
      resend: false,
      retryInMs: null,
      error: null,
      warning: null,
    }, (s): InspectedDetail => ({
      ...s,
      request: { method: 'POST', url: path, headers, body: bodyText(read.body, read.body.length).text, bodyBytes: read.received, bodyTruncated: read.tooLarge },
      signature: describeSignature(headers),
      digest: read.tooLarge ? { computed: '', matches: null } : describeDigest(headers, read.body),
      curl: read.tooLarge ? null : curlCommand(`${origin}${url(path)}`, headers, read.body),
      response: { headers: answer.headers, body: answer.body, truncated: false },
      remoteAddress: req.socket.remoteAddress ?? null,
    }), read.body.length + answer.body.length)
    try {
      onDelivery?.(summary)
    } catch {
      // An observer that throws must not break the endpoint.
    }
  }

  const server = http.createServer((req, res) => {
    const target = new URL(req.url ?? '/', 'http://inspector.invalid')
    const handled = isInspectorPath(target.pathname) && (req.method !== 'POST' || API_DEAD_LETTER_RETRY.test(target.pathname))
      ? Promise.resolve(servePage(req, res, target))
      : target.pathname.startsWith('/inspector/')
        ? Promise.resolve(notAllowed(req, res, 'GET', 'The inspector API is read-only.'))
        : req.method !== 'POST'
          ? Promise.resolve(notAllowed(req, res, 'POST', 'Webhook deliveries are POST requests.'))
          : receive(req, res)
    handled.catch(() => {
      if (!res.headersSent) writeAnswer(res, 500, [], '')
      else res.destroy()
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject)
      resolve()
    })
  })
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  let closed: Promise<void> | null = null
  const inspector: Inspector = {
    url: origin,
    pageUrl: '',
    apiKey: '',
    get deliveries () { return journal.list() },
    close () {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
      return closed
    },
  }
  Object.defineProperty(inspector, 'apiKey', { value: apiKey, enumerable: false, writable: false })
  Object.defineProperty(inspector, 'pageUrl', { value: `${origin}/#key=${apiKey}`, enumerable: false, writable: false })
  return inspector
}

const API_DEAD_LETTERS = '/inspector/api/dead-letters'
const API_DEAD_LETTER_RETRY = /^\/inspector\/api\/dead-letters\/([A-Za-z0-9_-]{1,200})\/retry$/

/** The first 100 dead letters, as the page shows them (the event itself stays in the store). */
async function listDeadLetters (res: http.ServerResponse, router: NonNullable<InspectorOptions['deadLetters']>): Promise<void> {
  try {
    const page = await router.deadLetters!.list({ limit: 100 })
    sendInspectorJson(res, 200, {
      items: page.items.map((d) => ({ fingerprint: d.fingerprint, type: d.type, attempts: d.attempts, parkedAt: d.parkedAt.toISOString(), error: d.error, source: d.source })),
    })
  } catch (err) {
    sendInspectorJson(res, 503, { errors: [`The dead-letter store failed: ${err instanceof Error ? err.message : String(err)}`] })
  }
}

async function retryDeadLetter (res: http.ServerResponse, router: NonNullable<InspectorOptions['deadLetters']>, fingerprint: string): Promise<void> {
  try {
    const result = await router.retryDeadLetter(fingerprint)
    sendInspectorJson(res, result.status === 'missing' ? 404 : 200, result.status === 'missing'
      ? { errors: ['No such dead letter (retried or discarded already).'] }
      : { status: result.status })
  } catch (err) {
    sendInspectorJson(res, 503, { errors: [`The retry failed: ${err instanceof Error ? err.message : String(err)}`] })
  }
}

/** A request path as a URL path (a request target may be absolute-form). */
function url (path: string): string {
  return path.startsWith('/') ? path : '/'
}

function notAllowed (req: http.IncomingMessage, res: http.ServerResponse, allow: string, message: string): void {
  req.resume()
  const r = replyLines(errorReply(405, 'method_not_allowed', message))
  writeAnswer(res, r.status, [...r.headers, ['allow', allow]], r.body)
}
