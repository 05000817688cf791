// Shared fixtures of the adapter tests (Fastify and Express): keys, signed deliveries,
// a loopback key server, log capture and raw-socket requests.
import type { KeyObject } from 'node:crypto'
import http from 'node:http'
import net from 'node:net'
import { Writable } from 'node:stream'
import { generateSigningKeyPair, signWebhook, type SignedWebhook, type WireEvent } from '../../../src/testing/index.js'
import type { ClaimState, ReplayStore } from '../../../src/replay/types.js'

export const KEYS = generateSigningKeyPair()
export const OTHER_KEYS = generateSigningKeyPair()
export const HANDLE = 'acct_1'

export function event (overrides: Partial<WireEvent> = {}): WireEvent {
  return { event: 'delivered', customer_handle: HANDLE, timestamp: 1700000000, email: 's@example.com', request_id: 'r1', ...overrides }
}

/** A delivery signed now (or at `created`) with the test key. */
export function delivery (opts: { events?: WireEvent[], payload?: string | Buffer, created?: number, keyId?: string, privateKey?: KeyObject } = {}): SignedWebhook {
  const base = { privateKey: opts.privateKey ?? KEYS.privateKey, keyId: opts.keyId, created: opts.created }
  return opts.payload !== undefined
    ? signWebhook({ ...base, payload: opts.payload })
    : signWebhook({ ...base, events: opts.events ?? [event()] })
}

/** A loopback key API: GET /tx/v1/webhook/public-key?id=<id> → {id,key}; counts requests. */
export async function startKeyServer (keys: Record<string, string>): Promise<{ baseUrl: string, requests: () => number, close: () => Promise<void> }> {
  let n = 0
  const server = http.createServer((req, res) => {
    n++
    const id = new URL(req.url ?? '/', 'http://x').searchParams.get('id') ?? ''
    const key = keys[id]
    if (key === undefined) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"errors":["not found"]}')
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id, key }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as net.AddressInfo).port
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    requests: () => n,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

export { closedPort } from '../../helpers/closed-port.js'

/** Collects pino's JSON lines. */
export function logCapture (): { stream: Writable, lines: () => Array<Record<string, unknown>>, text: () => string } {
  const chunks: string[] = []
  const stream = new Writable({
    write (chunk, _enc, cb) { chunks.push(String(chunk)); cb() },
  })
  const text = (): string => chunks.join('')
  return {
    stream,
    text,
    lines: () => text().split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Record<string, unknown>),
  }
}

/** A Logger (the library's interface) that records calls. */
export function recordingLogger (): { logger: { debug: (o: object, m?: string) => void, info: (o: object, m?: string) => void, warn: (o: object, m?: string) => void, error: (o: object, m?: string) => void }, entries: Array<{ level: string, obj: object, msg?: string }> } {
  const entries: Array<{ level: string, obj: object, msg?: string }> = []
  const at = (level: string) => (obj: object, msg?: string): void => { entries.push({ level, obj, msg }) }
  return { logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, entries }
}

/** A replay store whose every call rejects (Redis down). */
export function failingStore (): ReplayStore & { calls: string[] } {
  const calls: string[] = []
  return {
    calls,
    async claim (): Promise<ClaimState> { calls.push('claim'); throw new Error('ECONNREFUSED 127.0.0.1:6379') },
    async complete (): Promise<void> { calls.push('complete'); throw new Error('ECONNREFUSED') },
    async release (): Promise<void> { calls.push('release'); throw new Error('ECONNREFUSED') },
  }
}

/** A replay store that claims fine but fails to record outcomes (logged, never thrown). */
export function flakyOutcomeStore (): ReplayStore & { calls: string[] } {
  const calls: string[] = []
  return {
    calls,
    async claim (): Promise<ClaimState> { calls.push('claim'); return 'claimed' },
    async complete (): Promise<void> { calls.push('complete'); throw new Error('write failed') },
    release (): Promise<void> { calls.push('release'); throw new Error('sync throw') },
  }
}

/** Sends raw bytes on a fresh socket and resolves with everything received until the server closes or `ms` passes. */
export async function rawRequest (port: number, data: string | Buffer, ms = 2000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    const timer = setTimeout(() => { socket.destroy(); resolve(Buffer.concat(chunks).toString('latin1')) }, ms)
    socket.on('data', (c) => {
      chunks.push(c)
      // One response is enough once its body is complete (these replies are small, with Content-Length).
      const text = Buffer.concat(chunks).toString('latin1')
      const m = /content-length: (\d+)/i.exec(text)
      const end = text.indexOf('\r\n\r\n')
      if (m !== null && end !== -1 && Buffer.byteLength(text.slice(end + 4), 'latin1') >= Number(m[1])) {
        clearTimeout(timer)
        socket.destroy()
        resolve(text)
      }
    })
    socket.on('error', (err) => { clearTimeout(timer); chunks.length === 0 ? reject(err) : resolve(Buffer.concat(chunks).toString('latin1')) })
    socket.on('close', () => { clearTimeout(timer); resolve(Buffer.concat(chunks).toString('latin1')) })
    socket.write(data)
  })
}

/** Status and JSON body of a raw HTTP/1.1 response. */
export function parseRaw (text: string): { status: number, body: Record<string, unknown> | null, head: string } {
  const m = /^HTTP\/1\.1 (\d{3})/.exec(text)
  const end = text.indexOf('\r\n\r\n')
  const head = end === -1 ? text : text.slice(0, end)
  let body: Record<string, unknown> | null = null
  try { body = JSON.parse(text.slice(end + 4)) as Record<string, unknown> } catch {}
  return { status: m === null ? 0 : Number(m[1]), body, head }
}

/** A request head with the delivery's headers (plus extra lines), for raw sockets. */
export function requestHead (path: string, d: SignedWebhook, extra: string[] = [], omit: string[] = []): string {
  const lines = [`POST ${path} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close']
  for (const [k, v] of Object.entries(d.headers)) if (!omit.includes(k)) lines.push(`${k}: ${v}`)
  return lines.concat(extra).join('\r\n') + '\r\n'
}
