// The port of the fetch-style adapters (the web handler, the Hono middleware):
// a fetch `Request` in, the pipeline's replies as `Response`s, and a key store suited to isolates.
// Runtime-neutral.
import { KeyStore } from '../../keys/key-store.js'
import type { Logger } from '../../logger.js'
import type { PipelineSetup, WebhookPort } from '../pipeline.js'
import { readBodyAtMost } from './read-body.js'
import { replyResponse } from './reply.js'

/**
 * The adapter's own key store, whose advance fetch of `keyIds` happens at the first delivery
 * instead of at creation: Cloudflare Workers refuse I/O outside a request, so a fetch started
 * while the module loads fails, and the remembered failure would answer every delivery of a
 * fresh isolate 503 until it expired. The first delivery waits for the fetch (it would need the
 * key anyway), so the runtime cannot cancel it when a response goes out.
 */
class FirstRequestPrefetchKeyStore extends KeyStore {
  #deferred: Array<{ keyIds: string[], logger: Logger | undefined }> | null = []
  #warming: Promise<void> | undefined

  override prefetch (keyIds: Iterable<string>, logger?: Logger): Promise<void> {
    if (this.#deferred === null) return super.prefetch(keyIds, logger)
    this.#deferred.push({ keyIds: [...keyIds], logger })
    return Promise.resolve()
  }

  /** Starts the deferred advance fetches once; a promise while they run, undefined once done (or when there are none). */
  warm (): Promise<void> | undefined {
    const deferred = this.#deferred
    if (deferred !== null) {
      this.#deferred = null
      if (deferred.length > 0) {
        this.#warming = Promise.all(deferred.map((d) => super.prefetch(d.keyIds, d.logger))).then(() => { this.#warming = undefined })
      }
    }
    return this.#warming
  }
}

/**
 * A fetch-style adapter's port and setup for `createWebhookPipeline`: the body read with its
 * limit once the transport checks passed (after the deferred key fetch, if any), the replies as
 * `Response`s, and the adapter's own key store (one per pipeline: its cache lives as long as the
 * handler, the isolate). `extra`: the adapter's own option names.
 */
export function fetchPort<C, T> (request: (ctx: C) => Request, run: WebhookPort<C, T | Response>['run'], extra: readonly string[] = []): { port: WebhookPort<C, T | Response>, setup: PipelineSetup } {
  let store: FirstRequestPrefetchKeyStore | undefined
  const port: WebhookPort<C, T | Response> = {
    headers: (ctx) => request(ctx).headers,
    readBody (ctx, limit) {
      const warming = store?.warm()
      return warming === undefined ? readBodyAtMost(request(ctx), limit) : warming.then(() => readBodyAtMost(request(ctx), limit))
    },
    reply: (_ctx, reply) => replyResponse(reply),
    run,
  }
  return { port, setup: { extra, keyStores: (logger) => (baseUrl) => (store ??= new FirstRequestPrefetchKeyStore({ baseUrl, logger })) } }
}
