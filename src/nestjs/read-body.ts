// Where the module's routes find the exact bytes of a delivery: the `readBody` port of the
// module's pipeline (src/receiver/pipeline.ts).
import type { IncomingMessage } from 'node:http'
import { VerificationError } from '../errors.js'
import { readNodeBody } from '../receiver/node/raw-body.js'

/** The platform under the app, as Nest's adapters name it. */
export type Platform = 'express' | 'fastify' | string

/** One request as the body port reads it: the platform's request, the Node request under it, the platform. */
export interface NestBodySource {
  req: { rawBody?: unknown, body?: unknown }
  raw: IncomingMessage
  platform: Platform | undefined
}

/** The line that makes Nest keep the exact bytes, named where they are gone. */
export const RAW_BODY_FIX = 'create the app with { rawBody: true }: NestFactory.create(AppModule, { rawBody: true }) ' +
  '(with @nestjs/testing: moduleRef.createNestApplication(adapter, { rawBody: true }))'

/**
 * The exact bytes of the delivery: `req.rawBody`, as Nest keeps it with `rawBody: true` (Express
 * and Fastify alike); on Express, also a body no parser read (read from the stream, past `limit`
 * no further: the pipeline answers 413).
 */
export function readNestBody (source: NestBodySource, limit: number): Uint8Array | Promise<Uint8Array> {
  const { rawBody, body } = source.req
  if (Buffer.isBuffer(rawBody)) return rawBody
  if (source.platform !== 'fastify') return readNodeBody(source.raw as IncomingMessage & { body?: unknown }, limit)
  // Fastify parsed nothing for an empty body; anything else it parsed without keeping the bytes.
  if (body === undefined || body === null) return new Uint8Array(0)
  throw new VerificationError('configuration_error', `The request body was parsed without keeping its exact bytes, which the signature is verified over: ${RAW_BODY_FIX}.`)
}
