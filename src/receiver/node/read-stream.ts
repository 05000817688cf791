import type { Readable } from 'node:stream'
import { VerificationError } from '../../errors.js'

/**
 * Reads a Node request stream as the exact bytes received, with a limit: never decoded, never
 * decompressed (the `readBody` port of the Node adapters). Stops reading at the first chunk past
 * `limit` and resolves the bytes read so far: more than `limit`, which the pipeline refuses with
 * 413 `payload_too_large` (the limit is enforced in one place, src/receiver/pipeline.ts). A client
 * that goes away mid-body leaves the promise pending: nobody is left to answer, and nothing was
 * verified or claimed.
 */
export function readStream (stream: Readable, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => { readInto(stream, limit, (err, body) => { if (err === null) resolve(body!); else reject(err) }) })
}

/**
 * The `readBody` port of a Node adapter whose framework hands over the body stream itself (the
 * Fastify plugin's `preParsing` payload): `readStream` of `source.payload`.
 */
export function readPayload (source: { readonly payload: Readable }, limit: number): Promise<Buffer> {
  return readStream(source.payload, limit)
}

function readInto (stream: Readable, limit: number, cb: (err: VerificationError | null, body?: Buffer) => void): void {
  const chunks: Buffer[] = []
  let length = 0
  const cleanup = (): void => {
    stream.removeListener('data', onData)
    stream.removeListener('end', onEnd)
    stream.removeListener('error', onError)
    stream.removeListener('close', onClose)
  }
  function onData (chunk: Buffer | string): void {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    length += buf.length
    chunks.push(buf)
    if (length > limit) {
      stream.pause()
      onEnd()
    }
  }
  function onEnd (): void {
    cleanup()
    cb(null, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length))
  }
  function onError (): void {
    cleanup()
    cb(new VerificationError('invalid_payload', 'The request body could not be read.'))
  }
  function onClose (): void {
    if (!stream.readableEnded) cleanup()
  }
  stream.on('data', onData)
  stream.on('end', onEnd)
  stream.on('error', onError)
  stream.on('close', onClose)
  stream.resume()
}
