// The flow of the fetch-style adapters (the web handler, the Hono middleware): a fetch `Request`
// in, a `Response` out, and a key store suited to isolates. Runtime-neutral.
import { KeyStore } from '../../keys/key-store.js'
import type { Logger } from '../../logger.js'
import { createWebhookFlow, type WebhookFlow, type WebhookIO } from '../flow.js'
import type { WebhookReceiverOptions } from '../options.js'
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

/** What a fetch-style adapter gives its flow: where its `Request` is, and how it runs the application's handler. */
export interface WebIO<C, T> extends Pick<WebhookIO<C, T | Response>, 'run'> {
  /** The fetch `Request` of a request context. */
  request (ctx: C): Request
}

/**
 * The flow of a fetch-style adapter: the receiver's replies as `Response`s, the body read with
 * its limit, and the adapter's own key store, whose advance fetch of `keyIds` the first body
 * read waits for. Options validated once, here (`extra`: the adapter's own option names).
 */
export function createWebFlow<C, T> (options: WebhookReceiverOptions & { logger?: Logger }, io: WebIO<C, T>, extra: readonly string[] = []): WebhookFlow<C, T | Response> {
  // One key store per handler (one baseUrl): its cache lives as long as the handler (the isolate).
  let store: FirstRequestPrefetchKeyStore | undefined
  return createWebhookFlow<C, T | Response>(options, {
    headers: (ctx) => io.request(ctx).headers,
    // The body is read only once the transport checks passed, before any key is used.
    readBody (ctx, limit) {
      const warming = store?.warm()
      return warming === undefined ? readBodyAtMost(io.request(ctx), limit) : warming.then(() => readBodyAtMost(io.request(ctx), limit))
    },
    reply: (_ctx, reply) => replyResponse(reply),
    run: io.run,
  }, { extra, keyStores: (logger) => (baseUrl) => (store ??= new FirstRequestPrefetchKeyStore({ baseUrl, logger })) })
}
