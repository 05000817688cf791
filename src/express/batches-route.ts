import type { IncomingMessage, ServerResponse } from 'node:http'
import type { BatchesAuthorize, BatchesClient, ProxyReply } from '../batches-route/core.js'
import { checkProxyOptions, createBatchesProxy, pathOf } from '../batches-route/core.js'
import type { Logger } from '../logger.js'
import { resolveLogger } from '../receiver/options.js'
import { writeReply } from '../receiver/node/reply.js'

/** The request as Express (4 or 5) hands it over; only node:http fields are relied on. */
export type BatchesRouteRequest = IncomingMessage & { originalUrl?: string, baseUrl?: string }

/** Options of `batchesRoute`. */
export interface BatchesRouteOptions {
  /** The API client whose key lists the batches: `new MailChannels(apiKey)`. Required. */
  client: BatchesClient
  /**
   * Path matched (relative to where the middleware is mounted).
   * @default '/webhooks/batches'
   */
  path?: string
  /**
   * Required: who may list batches. Return `true` to allow; `false` answers 401
   * `unauthorized`; `{ statusCode: 403 }` answers 403 `forbidden`; a throw denies with 401
   * (403 if the error has `statusCode: 403`). May be async. Creating the router fails without it.
   */
  authorize: BatchesAuthorize<BatchesRouteRequest>
  /**
   * Upstream calls this router keeps in flight at once; an authorized request beyond it gets
   * 503 `overloaded` with `Retry-After: 1` and no upstream call. `Infinity` turns the cap off.
   * @default 10
   */
  maxConcurrent?: number
  /**
   * Where upstream failures are logged (never the API key).
   * @default nowhere
   */
  logger?: Logger
  /**
   * Also serve `POST <path>/:batchId/resend` (optional query `customerHandle`): resends one
   * batch through `client.webhooks.resendBatch`, behind the same `authorize` (which can tell the
   * two routes apart by `req.method`). Answers `{ data }` with the new attempt (`data.statusCode`
   * is what your endpoint answered), 404 for an unknown batch. Use header-based auth, not
   * cookies: a cross-site form could otherwise trigger resends.
   * @default false
   */
  resend?: boolean
}

/** A plain `(req, res, next)` middleware: no runtime dependency on Express. */
export type BatchesMiddleware = (req: BatchesRouteRequest, res: ServerResponse, next: (err?: unknown) => void) => void

/**
 * Middleware serving `GET <path>`: lists webhook delivery batches through `client` behind
 * `authorize` (same contract and replies as the Fastify `batchesRoute`); with `resend: true`,
 * also `POST <path>/:batchId/resend`. Other methods and paths go to `next()`. It never writes
 * to a response that something else answered or that closed, and cancels the upstream listing
 * when that happens.
 */
export function batchesRoute (options: BatchesRouteOptions): BatchesMiddleware {
  const config = checkProxyOptions(options, 'path')
  const logger = resolveLogger(options.logger)
  const proxy = createBatchesProxy(config)
  const { path } = config
  const resendPrefix = `${path.replace(/\/+$/, '')}/`
  return function batchesRouteMiddleware (req, res, next) {
    const target = req.url ?? ''
    const reqPath = pathOf(target)
    if (config.resend && req.method === 'POST' && reqPath.startsWith(resendPrefix)) {
      const m = /^([^/]+)\/resend\/?$/.exec(reqPath.slice(resendPrefix.length))
      if (m !== null) {
        // Decoded as Fastify decodes its params, so both answer a path the same way.
        let batchId = m[1]!
        try {
          batchId = decodeURIComponent(batchId)
        } catch {
          // Left as is: not a valid id either way.
        }
        proxy.serveResend({ request: req, batchId, target, response: res, log: logger })
          .then((reply) => { if (reply !== null) send(res, reply, logger) })
          .catch((err: unknown) => fail(err, res, next, logger))
        return
      }
    }
    if (req.method !== 'GET' || (reqPath !== path && reqPath !== `${path}/`)) {
      next()
      return
    }
    const originalTarget = typeof req.originalUrl === 'string' ? req.originalUrl : target
    proxy.serve({ request: req, target, originalTarget, response: res, log: logger })
      .then((reply) => { if (reply !== null) send(res, reply, logger) })
      .catch((err: unknown) => fail(err, res, next, logger))
  }
}

function send (res: ServerResponse, r: ProxyReply, logger: Logger): void {
  if (res.headersSent || res.writableEnded || res.destroyed) {
    logger.debug({}, 'batches route: the response was already answered or closed; nothing sent')
    return
  }
  writeReply(res, r)
}

/** An unexpected failure: the app's error handler while the response is open, else the logger. */
function fail (err: unknown, res: ServerResponse, next: (err?: unknown) => void, logger: Logger): void {
  if (!res.headersSent && !res.destroyed) {
    try {
      next(err)
      return
    } catch (thrown) {
      err = thrown
    }
  }
  try {
    logger.error({ err: { name: (err as Error | null)?.name, code: (err as { code?: unknown } | null)?.code } }, 'batches route: failed after the response was answered or closed')
  } catch {
    // A logger that throws has nowhere left to report to; the process must not crash for it.
  }
}

