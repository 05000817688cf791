import type { IncomingMessage, ServerResponse } from 'node:http'
import type { BatchesAuthorize, BatchesClient, ProxyReply } from '../client/batches-proxy.js'
import { checkProxyOptions, parseProxyQuery, pathOf, proxyBatches, queryOf, runAuthorize } from '../client/batches-proxy.js'
import { noopLogger, type Logger } from '../logger.js'

/** The request as Express (4 or 5) hands it over; only node:http fields are relied on. */
export type BatchesRouterRequest = IncomingMessage & { originalUrl?: string, baseUrl?: string }

/** Options of `batchesRouter`. */
export interface BatchesRouterOptions {
  /** The API client whose key lists the batches: `new MailChannels(apiKey)`. Required. */
  client: BatchesClient
  /** Path matched (relative to where the middleware is mounted). Default `'/webhooks/batches'`. */
  path?: string
  /**
   * Required: who may list batches. Return `true` to allow; `false` answers 401
   * `unauthorized`; `{ statusCode: 403 }` answers 403 `forbidden`; a throw denies with 401
   * (403 if the error has `statusCode: 403`). May be async. Creating the router fails without it.
   */
  authorize: BatchesAuthorize<BatchesRouterRequest>
  /** Where upstream failures are logged (never the API key). Default: nowhere. */
  logger?: Logger
}

/** A plain `(req, res, next)` middleware: no runtime dependency on Express. */
export type BatchesMiddleware = (req: BatchesRouterRequest, res: ServerResponse, next: (err?: unknown) => void) => void

/**
 * Middleware serving `GET <path>`: lists webhook delivery batches through `client` behind
 * `authorize` (same contract and replies as the Fastify `batchesRoute`). Other methods and
 * paths go to `next()`.
 */
export function batchesRouter (options: BatchesRouterOptions): BatchesMiddleware {
  const { client, path, authorize } = checkProxyOptions(options, 'path')
  const logger = options.logger ?? noopLogger
  if (typeof logger?.warn !== 'function' || typeof logger.error !== 'function') throw new TypeError('logger must have debug, info, warn and error methods')
  return function batchesRouterMiddleware (req, res, next) {
    const rawUrl = req.url ?? ''
    const reqPath = pathOf(rawUrl)
    if (req.method !== 'GET' || (reqPath !== path && reqPath !== `${path}/`)) {
      next()
      return
    }
    handle(req, rawUrl).then((r) => send(res, r), next)
  }

  async function handle (req: BatchesRouterRequest, rawUrl: string): Promise<ProxyReply> {
    const denied = await runAuthorize(authorize, req, logger)
    if (denied !== null) return denied
    const parsed = parseProxyQuery(queryOf(rawUrl))
    if (parsed.reply !== null) return parsed.reply
    // The Link header points at the path the client used, including the mount prefix.
    const fullPath = `${typeof req.baseUrl === 'string' ? req.baseUrl : ''}${path}`
    return proxyBatches(client, parsed.options, fullPath, logger)
  }
}

function send (res: ServerResponse, r: ProxyReply): void {
  const body = JSON.stringify(r.body)
  res.statusCode = r.statusCode
  res.setHeader('cache-control', 'no-store')
  res.setHeader('content-type', 'application/json; charset=utf-8')
  res.setHeader('content-length', Buffer.byteLength(body))
  for (const [k, v] of Object.entries(r.headers)) res.setHeader(k, v)
  res.end(body)
}
