// The sandbox's HTTP API: MailChannels' routes in its wire format, plus /sandbox/* controls.
// One table of routes; each handler only parses the request and calls the sandbox core.
import type http from 'node:http'
import { checkBatchId, checkEndpoint, MAX_REQUEST_ID_CHARS } from '../../client/webhooks.js'
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../events/types.js'
import type { Logger } from '../../logger.js'
import type { EndpointAnswer } from './answer.js'
import { isInspectorPath, sendInspectorJson, sendPageFile, serveInspectorApi, type InspectorSite } from '../inspector/http.js'
import { filterBatches, parseBatchQuery, type SandboxBatch } from './batch-query.js'
import { hasApiKey, isLoopbackHostHeader, isRelayed, isSameOrigin } from './guards.js'

export { isLoopbackHostHeader } from './guards.js'

/** How `deliver` can spoil a delivery on purpose, to show a receiver rejecting it. */
export type TamperKind =
  /** The body is changed after signing: `digest_mismatch`. */
  | 'body'
  /** Signed with a key the sandbox does not serve, under the current keyid: `signature_invalid`. */
  | 'signature'
  /** Signed an hour ago: `signature_expired`. */
  | 'expired'
  /**
   * The exact bytes and headers of the last accepted delivery sent again (same signature):
   * what an attacker holding a captured delivery does. A receiver with replay protection answers
   * it as a duplicate. MailChannels itself never does this: it signs every retry afresh.
   */
  | 'replay'

/** Every `TamperKind`, as the sandbox option, the page and `POST /sandbox/deliver?tamper=` accept them. */
export const TAMPER_KINDS: readonly TamperKind[] = ['body', 'signature', 'expired', 'replay']

/** What `POST /tx/v1/webhook/validate` answers (snake_case, as the service does). */
export interface SandboxValidation {
  all_passed: boolean
  results: Array<{ result: 'passed' | 'failed', webhook: string, response: { status: number, body: string } | null }>
}

/** What `POST /tx/v1/webhook-batch/{id}/resend` answers (snake_case, as the service does). */
export interface SandboxResend {
  batch_id: number
  customer_handle: string
  webhook: string
  created_at: string
  event_count: number
  duration_in_ms: number | null
  status_code: number | null
}

/** The part of the sandbox the routes drive. */
export interface SandboxCore {
  readonly apiKey: string
  readonly customerHandle: string
  readonly batches: readonly SandboxBatch[]
  readonly endpoints: readonly string[]
  publicKey (id: string): string | null
  countRequest (kind: 'publicKey' | 'batchList'): void
  enroll (endpoint: string): boolean
  removeEndpoints (): void
  validate (requestId?: string): Promise<SandboxValidation>
  /** `null` when the batch is unknown (or no longer kept). */
  resend (batchId: number): Promise<SandboxResend | null>
  rotateKey (): { keyId: string, publicKey: string }
  /**
   * One delivery to the first endpoint (one event of each of `types`, in order, when given), in
   * at most `attempts` attempts (default: the sandbox's); its last attempt and what the endpoint
   * said in it (or why there was no response), or `null` when none is enrolled. Throws a TypeError for a replay with nothing to copy.
   */
  deliverOne (tamper: TamperKind | undefined, types: WebhookEventType[] | undefined, attempts?: number): Promise<{ batch: SandboxBatch, answer: EndpointAnswer | null, error: string | null } | null>
  /** The inspector page's data: the journal of attempts and the sandbox's description. */
  readonly inspector: InspectorSite
}

/** Events one `POST /sandbox/deliver?types=` may ask for (the sandbox's largest batch). */
const MAX_TYPES = 1000
/** Request bodies the API reads (validate's) are tiny. */
const MAX_BODY_BYTES = 16 * 1024

interface Exchange {
  req: http.IncomingMessage
  res: http.ServerResponse
  url: URL
  /** The path parameter of a pattern route (`{id}`). */
  param: string
  /** The inspector's live streams open on this server. */
  streams: Set<http.ServerResponse>
}

interface Route {
  method: 'GET' | 'POST' | 'DELETE'
  /** An exact path, or a pattern whose one group is the parameter. */
  path: string | RegExp
  /** Public like the real endpoint (no API key)? */
  public?: boolean
  handle (x: Exchange, core: SandboxCore): Promise<void> | void
}

export function sendJson (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const json = JSON.stringify(body)
  res.writeHead(status, { ...headers, 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(json) })
  res.end(json)
}

const errors = (res: http.ServerResponse, status: number, ...messages: string[]): void => sendJson(res, status, { errors: messages })

/** Reads a small request body; `null` when it is larger than the API accepts. */
async function readBody (req: http.IncomingMessage): Promise<string | null> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req) {
    size += (chunk as Buffer).length
    if (size > MAX_BODY_BYTES) return null
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks).toString('utf8')
}

const ROUTES: readonly Route[] = [
  {
    method: 'GET',
    path: '/tx/v1/webhook/public-key',
    public: true,
    handle ({ res, url }, core) {
      core.countRequest('publicKey')
      const id = url.searchParams.get('id')
      if (id === null || id === '') return errors(res, 400, 'id is required.')
      const key = core.publicKey(id)
      if (key === null) return errors(res, 404, 'Key not found.')
      sendJson(res, 200, { id, key })
    },
  },
  {
    method: 'GET',
    path: '/tx/v1/webhook-batch',
    handle ({ res, url }, core) {
      core.countRequest('batchList')
      const parsed = parseBatchQuery(url.searchParams, Date.now())
      if (parsed.errors !== null) return errors(res, 400, ...parsed.errors)
      sendJson(res, 200, { webhook_batches: filterBatches(core.batches, parsed.query) })
    },
  },
  {
    method: 'POST',
    path: '/tx/v1/webhook',
    handle ({ res, url }, core) {
      const endpoint = url.searchParams.get('endpoint')
      if (endpoint === null || url.searchParams.getAll('endpoint').length !== 1) return errors(res, 400, 'endpoint is required, once: POST /tx/v1/webhook?endpoint=<url>.')
      const checked = checkEndpoint(endpoint)
      if (checked.error !== null) return errors(res, 400, checked.error.message)
      if (!core.enroll(checked.value)) return errors(res, 409, 'This endpoint is already enrolled.')
      res.writeHead(201, { 'content-length': '0' }).end()
    },
  },
  {
    method: 'GET',
    path: '/tx/v1/webhook',
    handle ({ res }, core) {
      sendJson(res, 200, core.endpoints.map((webhook) => ({ webhook })))
    },
  },
  {
    method: 'DELETE',
    path: '/tx/v1/webhook',
    handle ({ res }, core) {
      core.removeEndpoints()
      res.writeHead(204).end()
    },
  },
  {
    method: 'POST',
    path: '/tx/v1/webhook/validate',
    async handle ({ req, res }, core) {
      const text = await readBody(req)
      if (text === null) return errors(res, 413, 'The request body is too large.')
      let body: unknown = {}
      try {
        if (text.trim() !== '') body = JSON.parse(text)
      } catch {
        return errors(res, 400, 'The request body must be JSON: {"request_id": "..."} or {}.')
      }
      if (body === null || typeof body !== 'object' || Array.isArray(body)) return errors(res, 400, 'The request body must be a JSON object.')
      const requestId = (body as { request_id?: unknown }).request_id
      if (requestId !== undefined && requestId !== null && (typeof requestId !== 'string' || requestId === '' || requestId.length > MAX_REQUEST_ID_CHARS)) {
        return errors(res, 400, `request_id must be a string of 1 to ${MAX_REQUEST_ID_CHARS} characters.`)
      }
      if (core.endpoints.length === 0) return errors(res, 404, 'No webhooks found for the account.')
      sendJson(res, 200, await core.validate(typeof requestId === 'string' ? requestId : undefined))
    },
  },
  {
    method: 'POST',
    path: /^\/tx\/v1\/webhook-batch\/([^/]+)\/resend$/,
    async handle ({ req, res, param }, core) {
      const id = checkBatchId(param)
      if (id.error !== null) return errors(res, 400, 'The batch id must be a positive integer.')
      // A handle that is not the sandbox's names a customer that has no such batch.
      const handle = req.headers['x-customer-handle']
      if (handle !== undefined && handle !== core.customerHandle) return errors(res, 404, 'Batch not found for this customer.')
      const resent = await core.resend(id.value)
      if (resent === null) return errors(res, 404, 'Batch not found for this customer.')
      sendJson(res, 200, resent)
    },
  },
  {
    method: 'POST',
    path: '/sandbox/rotate-key',
    handle ({ res }, core) {
      const { keyId, publicKey } = core.rotateKey()
      sendJson(res, 200, { id: keyId, key: publicKey })
    },
  },
  {
    method: 'POST',
    path: '/sandbox/deliver',
    async handle ({ res, url }, core) {
      const tamper = url.searchParams.get('tamper')
      if (tamper !== null && !TAMPER_KINDS.includes(tamper as TamperKind)) return errors(res, 400, `tamper must be one of ${TAMPER_KINDS.join(', ')}.`)
      const typesParam = url.searchParams.get('types')
      let types: WebhookEventType[] | undefined
      if (typesParam !== null && typesParam !== '') {
        const list = typesParam.split(',')
        if (list.length > MAX_TYPES || list.some((type) => !(WEBHOOK_EVENT_TYPES as readonly string[]).includes(type))) {
          return errors(res, 400, `types must be a comma-separated list of at most ${MAX_TYPES} event types among ${WEBHOOK_EVENT_TYPES.join(', ')}.`)
        }
        types = list as WebhookEventType[]
      }
      const attemptsParam = url.searchParams.get('attempts')
      if (attemptsParam !== null && !/^(?:[1-9]|10)$/.test(attemptsParam)) return errors(res, 400, 'attempts must be an integer from 1 to 10.')
      let delivered: { batch: SandboxBatch, answer: EndpointAnswer | null, error: string | null } | null
      try {
        delivered = await core.deliverOne(tamper === null ? undefined : tamper as TamperKind, types, attemptsParam === null ? undefined : Number(attemptsParam))
      } catch (err) {
        // A replay with nothing to copy yet.
        if (err instanceof TypeError) return errors(res, 409, `${err.message}.`)
        throw err
      }
      if (delivered === null) return errors(res, 409, 'The sandbox has no endpoint enrolled to deliver to.')
      // The batch as the listing shows it, and what the endpoint said (its JSON code and message).
      sendJson(res, 200, { ...delivered.batch, answer: delivered.answer, error: delivered.error })
    },
  },
  {
    // The inspector page and its files: no secret in them, so no key.
    method: 'GET',
    path: /^(\/|\/inspector\/(?:app\.js|app\.css|icon\.svg))$/,
    public: true,
    handle ({ res, param }, core) {
      sendPageFile(res, param, core.inspector.mode)
    },
  },
  {
    method: 'GET',
    path: /^(\/inspector\/api\/.+)$/,
    handle ({ req, res, url, streams }, core) {
      if (!serveInspectorApi(req, res, url, core.inspector, streams)) sendInspectorJson(res, 404, { errors: ['Not found.'] })
    },
  },
]

function match (route: Route, pathname: string): string | null {
  if (typeof route.path === 'string') return route.path === pathname ? '' : null
  return route.path.exec(pathname)?.[1] ?? null
}

/** The request listener of the sandbox's API server. Never throws; failures answer 500. */
export function createApiHandler (core: SandboxCore, logger: Logger): (req: http.IncomingMessage, res: http.ServerResponse) => void {
  const streams = new Set<http.ServerResponse>()
  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    if (!isLoopbackHostHeader(req.rawHeaders)) {
      req.resume()
      return errors(res, 421, 'This sandbox answers only to requests addressed to a loopback host (127.0.0.1, localhost or [::1]).')
    }
    const url = new URL(req.url ?? '/', 'http://sandbox.invalid')
    if (req.method !== 'GET' && req.method !== 'HEAD' && !isSameOrigin(req)) {
      req.resume()
      return errors(res, 403, 'Cross-origin requests are refused: only pages served by this sandbox may act on it.')
    }
    if (isInspectorPath(url.pathname) && isRelayed(req)) {
      req.resume()
      return sendInspectorJson(res, 403, { errors: ['The inspector answers only direct requests from this machine, not requests relayed by a proxy or a tunnel.'] })
    }
    const onPath = ROUTES.map((route) => ({ route, param: match(route, url.pathname) })).filter((m) => m.param !== null)
    const found = onPath.find((m) => m.route.method === req.method)
    if (found === undefined) {
      req.resume()
      if (onPath.length === 0) return errors(res, 404, 'Not found.')
      return sendJson(res, 405, { errors: ['Method not allowed.'] }, { allow: onPath.map((m) => m.route.method).join(', ') })
    }
    if (found.route.public !== true && !hasApiKey(req, core.apiKey)) {
      req.resume()
      return errors(res, 401, 'Missing or invalid X-Api-Key header.')
    }
    if (found.route.method !== 'POST' || found.route.path !== '/tx/v1/webhook/validate') req.resume()
    await found.route.handle({ req, res, url, param: found.param!, streams }, core)
  }
  return (req, res) => {
    handle(req, res).catch((err: Error) => {
      logger.error({ err: err.message }, 'sandbox request failed')
      if (!res.headersSent) errors(res, 500, 'Internal sandbox error.')
      else res.destroy()
    })
  }
}
