import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { BatchesAuthorize, BatchesClient, ProxyReply } from '../client/batches-proxy.js'
import { checkProxyOptions, parseProxyQuery, proxyBatches, queryOf, runAuthorize } from '../client/batches-proxy.js'

/** Options of the `batchesRoute` plugin. */
export interface BatchesRouteOptions {
  /** The API client whose key lists the batches: `new MailChannels(apiKey)`. Required. */
  client: BatchesClient
  /** Route path (under the plugin's prefix). Default `'/webhooks/batches'`. */
  url?: string
  /**
   * Required: who may list batches. Return `true` to allow; `false` answers 401
   * `unauthorized`; `{ statusCode: 403 }` answers 403 `forbidden`; a throw denies with 401
   * (403 if the error has `statusCode: 403`). May be async. Registration fails without it.
   */
  authorize: BatchesAuthorize<FastifyRequest>
}

/**
 * `GET <url>`: lists webhook delivery batches through `client` behind `authorize`.
 * Query: `createdAfter`, `createdBefore`, `statuses` (comma-separated), `webhook`, `limit`,
 * `offset` (strict allowlist). Replies `{ data, pagination: { limit, offset, nextOffset } }`
 * with a `Link: <...>; rel="next"` header when there is a next page; upstream failures
 * become 502/503/504 with a generic message. Every reply has `Cache-Control: no-store`.
 */
export const batchesRoute: FastifyPluginAsync<BatchesRouteOptions> = async function batchesRoute (fastify: FastifyInstance, options: BatchesRouteOptions) {
  const { client, path, authorize } = checkProxyOptions(options, 'url')
  fastify.route({
    method: 'GET',
    url: path,
    handler: async function listWebhookBatches (request: FastifyRequest, reply: FastifyReply) {
      const denied = await runAuthorize(authorize, request, request.log)
      if (denied !== null) return send(reply, denied)
      const parsed = parseProxyQuery(queryOf(request.raw.url ?? ''))
      if (parsed.reply !== null) return send(reply, parsed.reply)
      const routePath = request.routeOptions.url ?? path
      return send(reply, await proxyBatches(client, parsed.options, routePath, request.log))
    },
  })
}

function send (reply: FastifyReply, r: ProxyReply): FastifyReply {
  reply.code(r.statusCode).header('cache-control', 'no-store')
  for (const [k, v] of Object.entries(r.headers)) reply.header(k, v)
  return reply.type('application/json; charset=utf-8').send(r.body)
}
