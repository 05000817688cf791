import { VerificationError } from '../../errors.js'

const BODY_CONSUMED = 'The request body was already read, so the exact bytes needed to verify the signature are gone. Verify the request before anything reads its body (or pass a clone).'

/**
 * Reads a fetch body as the exact bytes received: stops reading (and cancels the stream) at the
 * first chunk past `limit`, whatever `Content-Length` said, and returns the bytes read so far,
 * more than `limit`, for the caller to refuse with 413 (the pipeline, or `verifyWebhookRequest`).
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
      chunks.push(bytes)
      if (length > limit) {
        reader.cancel().catch(() => {})
        break
      }
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
