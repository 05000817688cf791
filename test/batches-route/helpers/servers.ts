import express from 'express'
import express4 from 'express4'
import Fastify from 'fastify'
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { batchesRoute as expressBatchesRoute } from '../../../src/express/index.js'
import { batchesRoute } from '../../../src/fastify/index.js'
import type { BatchesClient } from '../../../src/express/index.js'

// Both route helpers on real servers on 127.0.0.1, mounted the same way, for the tests that
// need real sockets (clients that leave, raw request targets, other middleware answering first).

export type Authorize = (req: { headers: http.IncomingHttpHeaders, params?: unknown }) => unknown

export interface ServeOptions {
  client: BatchesClient
  authorize: Authorize
  /** Express mount path / Fastify prefix, e.g. `/t/:tenant`. */
  mount?: string
  maxConcurrent?: number
}

export interface Served {
  base: string
  port: number
  /** Answers 503 now, as the timeout middleware would, every request sent with `ANSWER_ON_DEMAND`. */
  answerPending (): number
  logs (): string
  close (): Promise<void>
}

export interface Framework {
  name: string
  start (options: ServeOptions): Promise<Served>
}

function capture (): { stream: Writable, text: () => string } {
  const chunks: string[] = []
  return { stream: new Writable({ write (c, _e, cb) { chunks.push(String(c)); cb() } }), text: () => chunks.join('') }
}

async function listen (server: http.Server): Promise<{ base: string, port: number, close: () => Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    base: `http://127.0.0.1:${port}`,
    port,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

/** Requests with this header are answered 503 by a timeout middleware/hook after that many ms. */
export const ANSWER_AFTER = 'x-answer-after-ms'
/** Requests with this header are answered 503 by the same middleware/hook when the test calls `answerPending()`. */
export const ANSWER_ON_DEMAND = 'x-answer-on-demand'

type Pending = Set<() => void>

function answerAll (pending: Pending): number {
  const n = pending.size
  for (const answer of [...pending]) answer()
  pending.clear()
  return n
}

function timedOutBody (res: http.ServerResponse): void {
  if (res.headersSent || res.destroyed) return
  res.statusCode = 503
  res.setHeader('content-type', 'application/json')
  res.end('{"timedOut":true}')
}

/** What connect-timeout does, reduced: answer 503 after `ms` unless something answered first. */
function timeoutMiddleware (pending: Pending) {
  return (req: http.IncomingMessage, res: http.ServerResponse, next: () => void): void => {
    if (req.headers[ANSWER_ON_DEMAND] !== undefined) {
      const answer = (): void => timedOutBody(res)
      pending.add(answer)
      res.once('close', () => pending.delete(answer))
    }
    const ms = req.headers[ANSWER_AFTER]
    if (typeof ms === 'string') {
      const timer = setTimeout(() => timedOutBody(res), Number(ms))
      res.once('close', () => clearTimeout(timer))
    }
    next()
  }
}

function expressFramework (name: string, factory: typeof express): Framework {
  return {
    name,
    async start (o) {
      const logs = capture()
      const logger = pino({ level: 'trace' }, logs.stream)
      const app = factory()
      const pending: Pending = new Set()
      app.use(timeoutMiddleware(pending))
      const router = expressBatchesRoute({ client: o.client, authorize: o.authorize as never, logger, ...(o.maxConcurrent === undefined ? {} : { maxConcurrent: o.maxConcurrent }) })
      if (o.mount === undefined) app.use(router)
      else app.use(o.mount, router)
      app.use((_req: http.IncomingMessage, res: http.ServerResponse) => { res.statusCode = 404; res.end('{"notFound":true}') })
      // The app's error handler: anything the route hands to next(err) is visible in the logs.
      app.use((err: Error, _req: http.IncomingMessage, res: http.ServerResponse, _next: unknown) => {
        logger.error({ appErrorHandler: err.message }, 'app error handler')
        if (!res.headersSent) { res.statusCode = 500; res.end('{"appError":true}') }
      })
      const s = await listen(http.createServer(app))
      return { ...s, logs: logs.text, answerPending: () => answerAll(pending) }
    },
  }
}

const fastifyFramework: Framework = {
  name: 'fastify',
  async start (o) {
    const logs = capture()
    const app = Fastify({ logger: { level: 'trace', stream: logs.stream } })
    const pending: Pending = new Set()
    app.addHook('onRequest', async (request, reply) => {
      const answer = (): void => { if (!reply.sent) void reply.code(503).send({ timedOut: true }) }
      if (request.headers[ANSWER_ON_DEMAND] !== undefined) {
        pending.add(answer)
        reply.raw.once('close', () => pending.delete(answer))
      }
      const ms = request.headers[ANSWER_AFTER]
      if (typeof ms === 'string') {
        const timer = setTimeout(answer, Number(ms))
        reply.raw.once('close', () => clearTimeout(timer))
      }
    })
    await app.register(batchesRoute, {
      client: o.client,
      authorize: o.authorize as never,
      ...(o.mount === undefined ? {} : { prefix: o.mount }),
      ...(o.maxConcurrent === undefined ? {} : { maxConcurrent: o.maxConcurrent }),
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const port = (app.server.address() as AddressInfo).port
    return { base: `http://127.0.0.1:${port}`, port, logs: logs.text, answerPending: () => answerAll(pending), close: () => app.close() }
  },
}

export const frameworks: Framework[] = [
  expressFramework('express 5', express),
  expressFramework('express 4', express4 as unknown as typeof express),
  fastifyFramework,
]

export interface RawResponse {
  status: number
  headers: Record<string, string>
  body: string
}

/**
 * Sends `GET <target>` byte for byte over a raw socket (no client-side URL parsing or
 * escaping), with `Connection: close`, and reads the whole answer.
 */
export function rawGet (port: number, target: string, headers: Record<string, string> = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    socket.on('data', (c) => chunks.push(c))
    socket.on('error', reject)
    socket.setTimeout(10_000, () => socket.destroy(new Error('rawGet: no answer')))
    socket.on('end', () => {
      const text = Buffer.concat(chunks).toString('latin1')
      const split = text.indexOf('\r\n\r\n')
      const head = text.slice(0, split).split('\r\n')
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head[0] ?? '')?.[1])
      const h: Record<string, string> = {}
      for (const line of head.slice(1)) {
        const i = line.indexOf(':')
        h[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim()
      }
      resolve({ status, headers: h, body: text.slice(split + 4) })
    })
    const lines = [`GET ${target} HTTP/1.1`, `Host: 127.0.0.1:${port}`, 'Connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)]
    socket.write(`${lines.join('\r\n')}\r\n\r\n`, 'latin1')
  })
}

/**
 * Opens a GET and leaves once the request is written and `leaveWhen` settles, without reading
 * the answer: a client that disconnects.
 */
export async function getAndLeave (port: number, target: string, headers: Record<string, string>, leaveWhen: Promise<unknown>): Promise<void> {
  const socket = net.connect(port, '127.0.0.1')
  socket.on('error', () => {})
  const lines = [`GET ${target} HTTP/1.1`, `Host: 127.0.0.1:${port}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)]
  socket.write(`${lines.join('\r\n')}\r\n\r\n`)
  await leaveWhen
  socket.destroy()
}

/**
 * A link-value list as RFC 8288 defines it (`<target>; param=value, ...`): each target is
 * everything between `<` and the first `>`, as standard parsers read it.
 */
export function parseLinkHeader (header: string): Array<{ target: string, rel: string[] }> {
  const out: Array<{ target: string, rel: string[] }> = []
  let i = 0
  const ws = (): void => { while (i < header.length && /[ \t,]/.test(header[i]!)) i++ }
  for (;;) {
    ws()
    if (i >= header.length) return out
    if (header[i] !== '<') throw new Error(`bad Link header at ${i}: ${header}`)
    const end = header.indexOf('>', i)
    if (end === -1) throw new Error(`unterminated Link target: ${header}`)
    const link = { target: header.slice(i + 1, end), rel: [] as string[] }
    i = end + 1
    // Parameters: ; name[=value] with value a token or a quoted string, up to the next ','.
    for (;;) {
      while (i < header.length && /[ \t]/.test(header[i]!)) i++
      if (header[i] !== ';') break
      i++
      while (i < header.length && /[ \t]/.test(header[i]!)) i++
      const name = /^[^=;,\s]*/.exec(header.slice(i))![0]
      i += name.length
      let value = ''
      if (header[i] === '=') {
        i++
        if (header[i] === '"') {
          const close = header.indexOf('"', i + 1)
          value = header.slice(i + 1, close === -1 ? header.length : close)
          i = close === -1 ? header.length : close + 1
        } else {
          value = /^[^;,\s]*/.exec(header.slice(i))![0]
          i += value.length
        }
      }
      if (name.toLowerCase() === 'rel') link.rel.push(...value.toLowerCase().split(/\s+/))
    }
    out.push(link)
  }
}
