import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface RecordedRequest {
  method: string
  url: string
  headers: http.IncomingHttpHeaders
}

/** What the fake key API answers for one request: status, body, extra headers; or `'hang'` / `'destroy'`. */
export type KeyReply = { status: number, body?: string | Buffer, headers?: Record<string, string> } | 'hang' | 'destroy'

export type KeyBehaviour = (id: string | null, req: http.IncomingMessage) => KeyReply | Promise<KeyReply>

export interface KeyServer {
  baseUrl: string
  port: number
  requests: RecordedRequest[]
  /** Requests to the public-key path only. */
  keyFetches: () => number
  behave: (b: KeyBehaviour) => void
  close: () => Promise<void>
}

/** Serves `{"id","key"}` for every id in `keys`, 404 otherwise, like the service. */
export function serveKeys (keys: Record<string, string>): KeyBehaviour {
  return (id) => {
    if (id !== null && Object.hasOwn(keys, id)) return { status: 200, body: JSON.stringify({ id, key: keys[id] }), headers: { 'content-type': 'application/json' } }
    return { status: 404, body: JSON.stringify({ errors: ['not found'] }), headers: { 'content-type': 'application/json' } }
  }
}

/** A real node:http key API on 127.0.0.1:0 with switchable behaviour and a request log. */
export async function startKeyServer (behaviour: KeyBehaviour): Promise<KeyServer> {
  let current = behaviour
  const requests: RecordedRequest[] = []
  const hung = new Set<http.ServerResponse>()
  const server = http.createServer((req, res) => {
    requests.push({ method: req.method ?? '', url: req.url ?? '', headers: { ...req.headers } })
    const url = new URL(req.url ?? '/', 'http://127.0.0.1')
    void Promise.resolve(url.pathname === '/tx/v1/webhook/public-key'
      ? current(url.searchParams.get('id'), req)
      : { status: 404, body: 'no route' }).then((reply) => respond(req, res, reply))
  })
  function respond (req: http.IncomingMessage, res: http.ServerResponse, reply: KeyReply): void {
    if (reply === 'hang') {
      hung.add(res)
      res.on('close', () => hung.delete(res))
      return
    }
    if (reply === 'destroy') {
      req.socket.destroy()
      return
    }
    if (res.destroyed) return
    res.writeHead(reply.status, reply.headers ?? {})
    res.end(reply.body ?? '')
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    port,
    requests,
    keyFetches: () => requests.filter((r) => r.url.startsWith('/tx/v1/webhook/public-key')).length,
    behave: (b) => { current = b },
    close: async () => {
      for (const res of hung) res.destroy()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

export { closedPort } from './closed-port.js'

export const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
