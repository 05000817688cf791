import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import { closedPort } from '../../helpers/closed-port.js'

/** One POST a receiver got. */
export interface Received {
  url: string
  headers: http.IncomingHttpHeaders
  body: Buffer
}

/**
 * A plain node:http receiver on 127.0.0.1:0 that records what it gets and answers with
 * `respond` (a status code; default 200). Closed at teardown.
 */
export async function startReceiver (t: Test, respond: (r: Received, n: number) => number | Promise<number> = () => 200): Promise<{ url: string, received: Received[] }> {
  const received: Received[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const r = { url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) }
      received.push(r)
      Promise.resolve(respond(r, received.length)).then((status) => {
        if (status > 0) res.writeHead(status, { 'content-type': 'application/json' }).end('{}')
        // status 0: never answer (a hung receiver)
      }, () => res.destroy())
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`, received }
}

/** A loopback URL nobody listens on, and nobody will during the test. */
export async function closedPortUrl (): Promise<string> {
  return `http://127.0.0.1:${await closedPort()}/webhooks`
}
