import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { BatchesAuthorize, BatchesClient, ProxyReply } from '../batches-route/core.js'
import { checkProxyOptions, createBatchesProxy } from '../batches-route/core.js'
import { JSON_CONTENT_TYPE } from '../receiver/reply.js'

/** Options of the `batchesRoute` plugin. */
export interface BatchesRouteOptions {
  /** The API client whose key lists the batches: `new MailChannels(apiKey)`. Required. */
  client: BatchesClient
  /**
   * Route path (under the plugin's prefix).
   * @default '/webhooks/batches'
   */
  url?: string
  /**
   * Required: who may list batches. Return `true` to allow; `false` answers 401
   * `unauthorized`; `{ statusCode: 403 }` answers 403 `forbidden`; a throw denies with 401
   * (403 if the error has `statusCode: 403`). May be async. Registration fails without it.
   */
  authorize: BatchesAuthorize<FastifyRequest>
  /**
   * Upstream calls this route keeps in flight at once; an authorized request beyond it gets
   * 503 `overloaded` with `Retry-After: 1` and no upstream call. `Infinity` turns the cap off.
   * @default 10
   */
  maxConcurrent?: number
  /**
   * Also serve `POST <url>/:batchId/resend` (optional query `customerHandle`): resends one batch
   * through `client.webhooks.resendBatch`, behind the same `authorize` (which can tell the two
   * routes apart by `request.method`). Answers `{ data }` with the new attempt (`data.statusCode`
   * is what your endpoint answered), 404 for an unknown batch. Use header-based auth, not
   * cookies: a cross-site form could otherwise trigger resends.
   * @default false
   */
  resend?: boolean
}

/**
 * `GET <url>`: lists webhook delivery batches through `client` behind `authorize`.
 * Query: `createdAfter`, `createdBefore`, `statuses` (comma-separated), `webhook`, `limit`,
 * `offset` (strict allowlist). Replies `{ data, pagination: { limit, offset, nextOffset } }`
 * with a `Link: <...>; rel="next"` header (the path the client used) when there is a next
 * page; upstream failures become 502/503/504 with a generic message. Every reply has
 * `Cache-Control: no-store`. When the client leaves or a hook answers first, the upstream
 * call is cancelled and nothing more is sent. With `resend: true`, also `POST <url>/:batchId/resend`.
 */
export const batchesRoute: FastifyPluginAsync<BatchesRouteOptions> = async function batchesRoute (fastify: FastifyInstance, options: BatchesRouteOptions) {
  const config = checkProxyOptions(options, 'url')
  const proxy = createBatchesProxy(config)
  fastify.route({
    method: 'GET',
    url: config.path,
    handler: async function listWebhookBatches (request: FastifyRequest, reply: FastifyReply) {
      const r = await proxy.serve({ request, target: request.raw.url ?? '', originalTarget: request.originalUrl, response: reply.raw, log: request.log })
      // null: answered elsewhere or closed; returning undefined then makes Fastify send nothing.
      if (r === null || reply.sent || reply.raw.headersSent) return
      return send(reply, r)
    },
  })
  if (!config.resend) return
  fastify.route({
    method: 'POST',
    url: `${config.path.replace(/\/+$/, '')}/:batchId/resend`,
    handler: async function resendWebhookBatch (request: FastifyRequest<{ Params: { batchId: string } }>, reply: FastifyReply) {
      const r = await proxy.serveResend({ request, batchId: request.params.batchId, target: request.raw.url ?? '', response: reply.raw, log: request.log })
      if (r === null || reply.sent || reply.raw.headersSent) return
      return send(reply, r)
    },
  })
}

function send (reply: FastifyReply, r: ProxyReply): FastifyReply {
  return reply.code(r.status).headers(r.headers).type(JSON_CONTENT_TYPE).send(r.body)
}
