import type { IncomingMessage } from 'node:http'
import { VerificationError } from '../../errors.js'
import type { Logger } from '../../logger.js'
import { readStream } from './read-stream.js'

/** A Node request as the body port reads it: what body parsers may have left on it. */
export type NodeBodyRequest = IncomingMessage & { body?: unknown, rawBody?: unknown, _body?: boolean }

/**
 * The bytes `captureRawBody` kept, by request. A WeakMap rather than a property: nothing is added
 * to the request, so no logger or serializer can print the body from it, and the entry goes with
 * the request.
 */
const captured = new WeakMap<object, Uint8Array>()

/**
 * A body-parser `verify` function that keeps the exact bytes of a request body for
 * `mailchannelsWebhooks()`, so that an app's global body parsers can stay where they are:
 * `app.use(express.json({ verify: captureRawBody }))`, and the same for `express.urlencoded()`,
 * `express.text()` and `express.raw()` (Express 4 and 5; any body-parser based parser). Every
 * other route keeps its parsed `req.body`.
 *
 * It keeps a reference to the Buffer body-parser already holds (no copy), on POST requests only
 * (MailChannels delivers with POST), out of sight (not a property of the request); the middleware
 * lets go of it once it has read it. body-parser inflates a gzip or deflate body before calling
 * `verify`: the middleware refuses any `Content-Encoding` from the request header all the same.
 * The app's parser runs first, so its own refusals answer first (a body that is not valid JSON:
 * its 400; one over its `limit`, 100 kB by default: its 413), and the webhook handler never runs.
 */
export function captureRawBody (req: IncomingMessage, _res: unknown, buf: Buffer): void {
  if (req.method === 'POST' && buf instanceof Uint8Array) captured.set(req, buf)
}

/** The line to paste, named when the body is gone. */
export const CAPTURE_PATTERN = 'app.use(express.json({ verify: captureRawBody }))'

const CONSUMED_MESSAGE = 'The request body was already read by a body parser (such as a global express.json()), so the exact bytes needed to verify the signature are gone. ' +
  `Keep them for mailchannelsWebhooks() with the parser's verify option: ${CAPTURE_PATTERN}, with captureRawBody imported from 'mailchannels-webhooks/express' ` +
  '(the same for express.urlencoded() and express.text()); or declare the webhook route before the body parsers. On NestJS, create the app with { rawBody: true }.'

/**
 * Where the exact raw bytes of a delivery come from on Node (the `readBody` port of the Express
 * middleware), first found wins:
 * 1. the bytes `captureRawBody` kept while an app's body parser read the body;
 * 2. a Buffer `req.rawBody`, as NestJS sets it with `rawBody: true` (body-parser's `verify` with
 *    the same Buffer: https://github.com/nestjs/nest/blob/master/packages/platform-express/adapters/utils/get-body-parser-options.util.ts);
 *    a string is not the bytes and is not used;
 * 3. a Buffer `req.body` (a route-level `express.raw()`);
 * 4. the request stream itself, read here (at most `limit` bytes, never decompressed).
 * Any `Content-Encoding` was refused from the header before this runs, so none of these was
 * inflated. A body a parser consumed without keeping its bytes fails closed: 500
 * `configuration_error`, naming the line that fixes it.
 */
export function readNodeBody (req: NodeBodyRequest, limit: number): Uint8Array | Promise<Uint8Array> {
  const kept = captured.get(req)
  if (kept !== undefined) {
    captured.delete(req)
    return kept
  }
  if (Buffer.isBuffer(req.rawBody)) return req.rawBody
  if (Buffer.isBuffer(req.body)) return req.body
  if (req._body === true || req.readableEnded) throw new VerificationError('configuration_error', CONSUMED_MESSAGE)
  return readStream(req, limit)
}

/**
 * The `readBody` port of a Node adapter (the Express middleware): `readNodeBody` of the context's
 * `req`. A body a parser consumed is refused on every delivery; the line that fixes it is logged
 * once, to `log()`.
 */
export function nodeBodyReader (log: () => Logger): (ctx: { req: NodeBodyRequest }, limit: number) => Uint8Array | Promise<Uint8Array> {
  let told = false
  return function readBody ({ req }, limit) {
    try {
      return readNodeBody(req, limit)
    } catch (err) {
      if (!told && err instanceof VerificationError && err.type === 'configuration_error') {
        told = true
        log().error({}, `mailchannels webhook: ${err.message}`)
      }
      throw err
    }
  }
}
