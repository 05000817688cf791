// Shared by the fetch-style adapters (the web handler and the Hono middleware): reading a fetch
// body with a limit, replies as `Response`s, options validated once. Runtime-neutral.
import { VerificationError } from '../errors.js'
import { KeyStore } from '../keys/key-store.js'
import type { Logger } from '../logger.js'
import {
  createStandaloneReceiver,
  errorReply,
  handlerErrorReply,
  JSON_CONTENT_TYPE,
  tooLarge,
  type Receiver,
  type Reply,
  type WebhookReceiverOptions,
} from '../receiver/index.js'

const BODY_CONSUMED = 'The request body was already read, so the exact bytes needed to verify the signature are gone. Verify the request before anything reads its body (or pass a clone).'

/**
 * Reads a fetch body as the exact bytes received, at most `limit` bytes: stops reading (and
 * cancels the stream) as soon as more arrived, whatever `Content-Length` said.
 */
export async function readBodyAtMost (request: Request, limit: number): Promise<Uint8Array> {
  if (request.bodyUsed) throw new VerificationError('configuration_error', BODY_CONSUMED)
  const stream = request.body
  if (stream === null) return new Uint8Array(0)
  let reader: ReadableStreamDefaultReader<Uint8Array>
  try {
    reader = stream.getReader()
  } catch {
    throw new VerificationError('configuration_error', BODY_CONSUMED)
  }
  const chunks: Uint8Array[] = []
  let length = 0
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      // Bytes from another realm (a VM context, an iframe) fail `instanceof`: view them in ours.
      const chunk: unknown = value
      const bytes = chunk instanceof Uint8Array ? chunk : ArrayBuffer.isView(chunk) ? new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength) : undefined
      if (bytes === undefined) throw new VerificationError('invalid_payload', 'The request body could not be read.')
      length += bytes.byteLength
      if (length > limit) {
        reader.cancel().catch(() => {})
        throw tooLarge(limit)
      }
      chunks.push(bytes)
    }
  } catch (err) {
    if (err instanceof VerificationError) throw err
    throw new VerificationError('invalid_payload', 'The request body could not be read.')
  }
  if (chunks.length === 1) return chunks[0]!
  const body = new Uint8Array(length)
  let offset = 0
  for (const c of chunks) {
    body.set(c, offset)
    offset += c.byteLength
  }
  return body
}

/** A reply as a fetch `Response` (JSON body). `Connection` is the runtime's business, not ours. */
export function replyResponse (reply: Reply): Response {
  const headers = new Headers({ 'content-type': JSON_CONTENT_TYPE })
  for (const name in reply.headers) if (name !== 'connection') headers.set(name, reply.headers[name]!)
  return new Response(JSON.stringify(reply.body), { status: reply.status, headers })
}

/** The 405 answered to anything but POST (MailChannels delivers with POST only). */
export function methodNotAllowed (): Response {
  const response = replyResponse(errorReply(405, 'method_not_allowed', 'Webhook deliveries are POST requests.'))
  response.headers.set('allow', 'POST')
  return response
}

/** The 500 answered when the application's handler throws: no internals in the body. */
export function handlerFailed (): Response {
  return replyResponse(handlerErrorReply())
}

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

/** A fetch-style adapter's receiver, its logger, and what to await before a delivery's first use of a key. */
export interface FetchReceiver {
  receiver: Receiver
  log: Logger
  /** A promise to await before handling a POST while the advance key fetch of `keyIds` runs; otherwise undefined. */
  warm: () => Promise<void> | undefined
}

/** The receiver of a fetch-style adapter (the web handler, the Hono middleware): options validated once. */
export function createFetchReceiver (options: WebhookReceiverOptions & { logger?: Logger }, extra: readonly string[]): FetchReceiver {
  // One key store per handler (one baseUrl): its cache lives as long as the handler (the isolate).
  let store: FirstRequestPrefetchKeyStore | undefined
  const { receiver, log } = createStandaloneReceiver(options, extra, (logger) => (baseUrl) => (store ??= new FirstRequestPrefetchKeyStore({ baseUrl, logger })))
  return { receiver, log, warm: () => store?.warm() }
}
