import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import { createWebhookHandler } from '../../src/web/index.js'

/** One POST the receiver got, exactly: its header lines as sent and its body. */
export interface Got {
  rawHeaders: string[]
  body: Buffer
}

/**
 * A receiver built on the library (the web handler behind node:http) on 127.0.0.1:0. It records
 * what it got; `override` may answer a delivery itself (status and body) instead of the library.
 */
export async function libraryReceiver (t: Test, options: { baseUrl: string, customerHandles: string[], override?: (got: Got) => { status: number, body: string } | null }): Promise<{ url: string, got: Got[] }> {
  const got: Got[] = []
  const handler = createWebhookHandler({ baseUrl: options.baseUrl, customerHandles: options.customerHandles, onEvents: () => undefined })
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const entry = { rawHeaders: req.rawHeaders, body: Buffer.concat(chunks) }
      got.push(entry)
      const custom = options.override?.(entry) ?? null
      if (custom !== null) {
        res.writeHead(custom.status, { 'content-type': 'application/json' }).end(custom.body)
        return
      }
      const headers = new Headers()
      for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!)
      void handler(new Request(`http://receiver.invalid${req.url}`, { method: 'POST', headers, body: entry.body })).then(async (response) => {
        res.writeHead(response.status, Object.fromEntries(response.headers)).end(Buffer.from(await response.arrayBuffer()))
      })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`, got }
}

/** Sends one raw HTTP/1.1 request with exactly the given header lines; returns status, head and body. */
export async function rawRequest (origin: string, method: string, path: string, lines: string[], body = ''): Promise<{ status: number, head: string, body: string }> {
  const { port } = new URL(origin)
  const socket = net.connect(Number(port), '127.0.0.1')
  const length = body === '' && method === 'GET' ? [] : [`Content-Length: ${Buffer.byteLength(body)}`]
  // Written, not ended: a half-closed socket may be dropped before a slow answer.
  socket.write([`${method} ${path} HTTP/1.1`, ...lines, ...length, 'Connection: close', '', body].join('\r\n'))
  const chunks: Buffer[] = []
  for await (const chunk of socket) chunks.push(chunk as Buffer)
  const text = Buffer.concat(chunks).toString('latin1')
  const split = text.indexOf('\r\n\r\n')
  const head = text.slice(0, split)
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]), head, body: text.slice(split + 4) }
}

/** A header value of a raw response head. */
export function headerOf (head: string, name: string): string | null {
  const line = head.split('\r\n').find((l) => l.toLowerCase().startsWith(`${name.toLowerCase()}:`))
  return line === undefined ? null : line.slice(name.length + 1).trim()
}

/** What a loopback recorder received: each request's method, URL, raw header lines and body bytes. */
export interface Recorded { method: string, url: string, rawHeaders: string[], body: Buffer }

/** A loopback HTTP server that records every request and answers 204; closed at teardown. */
export async function recorder (t: Test): Promise<{ origin: string, got: Recorded[] }> {
  const got: Recorded[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      got.push({ method: req.method!, url: req.url!, rawHeaders: req.rawHeaders, body: Buffer.concat(chunks) })
      res.writeHead(204).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  }))
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, got }
}
