// A fetch handler served over node:http in a child process the test drives: it listens on
// 127.0.0.1 (any free port) and prints `listening <port>` on stdout once it does.
import http from 'node:http'

export function serveFetchInChild (handler: (request: Request) => Promise<Response>): http.Server {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const headers = new Headers()
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers.set(k, v)
      handler(new Request(`http://127.0.0.1${req.url ?? '/'}`, { method: req.method, headers, body: Buffer.concat(chunks) })).then(async (response) => {
        res.writeHead(response.status, Object.fromEntries(response.headers))
        res.end(Buffer.from(await response.arrayBuffer()))
      }, (err: unknown) => { res.writeHead(500); res.end(String(err)) })
    })
  })
  server.listen(0, '127.0.0.1', () => {
    const address = server.address()
    process.stdout.write(`listening ${typeof address === 'object' && address !== null ? address.port : 0}\n`)
  })
  return server
}
