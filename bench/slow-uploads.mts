// Memory under hundreds of concurrent slow 1 MiB uploads to a webhook route.
// Run from the repository root: npm run bench:slow-uploads -- [fastify|express] [connections]
// The receiver runs in a child process (so the clients' buffers do not count); its RSS is sampled
// every 50 ms. Each client sends a signed 1 MiB delivery (Content-Length 1048576) in 64 KiB
// pieces every 100 ms (about 1.6 s per body), all at once; the server verifies and answers.
import { fork } from 'node:child_process'
import { createRequire } from 'node:module'
import net from 'node:net'
import { fileURLToPath, pathToFileURL } from 'node:url'

// Packages and sources are the repository's (the current directory).
const fromRepo = (spec: string): string => pathToFileURL(createRequire(`${process.cwd()}/`).resolve(spec)).href
const src = (path: string): string => new URL(path, `file://${process.cwd()}/`).href

const mode = process.argv[2] ?? 'fastify'
const connections = Number(process.argv[3] ?? '300')

if (process.env.SLOW_UPLOAD_SERVER === '1') {
  const publicKey = process.env.PUBLIC_KEY!
  let port: number
  if (mode === 'fastify') {
    const { default: Fastify } = await import(fromRepo('fastify'))
    const { default: plugin } = await import(src('src/fastify/index.ts'))
    const app = Fastify({ requestTimeout: 30_000 })
    await app.register(plugin, { publicKey, customerHandles: ['acct_1'], replay: false })
    app.post('/wh', async (request: { webhookEvents: unknown[] }) => ({ n: request.webhookEvents.length }))
    await app.listen({ host: '127.0.0.1', port: 0 })
    port = (app.server.address() as net.AddressInfo).port
  } else {
    const { default: express } = await import(fromRepo('express'))
    const http = await import('node:http')
    const { mailchannelsWebhooks } = await import(src('src/express/index.ts'))
    const app = express()
    app.post('/wh', mailchannelsWebhooks({ publicKey, customerHandles: ['acct_1'], replay: false }), (req: { webhookEvents: unknown[] }, res: { json: (b: unknown) => void }) => { res.json({ n: req.webhookEvents.length }) })
    const server = http.createServer(app)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    port = (server.address() as net.AddressInfo).port
  }
  let peak = process.memoryUsage().rss
  setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss) }, 50).unref()
  process.send!({ port, rss: process.memoryUsage().rss })
  process.on('message', () => { process.send!({ peak, rss: process.memoryUsage().rss }) })
} else {
  const { generateSigningKeyPair, signWebhook } = await import(src('src/testing/index.ts'))
  const keys = generateSigningKeyPair()
  const body = Buffer.alloc(1024 * 1024, 0x20)
  const events = JSON.stringify([{ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000 }])
  body.write(events, 0)
  const d = signWebhook({ payload: body, privateKey: keys.privateKey })
  const child = fork(fileURLToPath(import.meta.url), [mode], { env: { ...process.env, SLOW_UPLOAD_SERVER: '1', PUBLIC_KEY: keys.publicKey }, execArgv: ['--import', 'tsx'] })
  const ready = await new Promise<{ port: number, rss: number }>((resolve) => child.once('message', (m) => resolve(m as { port: number, rss: number })))
  const head = `POST /wh HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n` + Object.entries(d.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') + `content-length: ${d.body.length}\r\n\r\n`
  const started = Date.now()
  const statuses = new Map<string, number>()
  await Promise.all(Array.from({ length: connections }, async () => await new Promise<void>((resolve) => {
    const socket = net.connect(ready.port, '127.0.0.1')
    let out = ''
    socket.on('data', (c) => { out += c.toString('latin1') })
    socket.on('error', () => {})
    socket.on('close', () => { const s = out.slice(9, 12) || 'none'; statuses.set(s, (statuses.get(s) ?? 0) + 1); resolve() })
    socket.on('connect', () => {
      socket.write(head)
      let offset = 0
      const timer = setInterval(() => {
        if (offset >= d.body.length || socket.destroyed) { clearInterval(timer); return }
        socket.write(d.body.subarray(offset, offset + 65536))
        offset += 65536
      }, 100)
    })
  })))
  child.send('report')
  const report = await new Promise<{ peak: number, rss: number }>((resolve) => child.once('message', (m) => resolve(m as { peak: number, rss: number })))
  child.kill()
  const mib = (n: number): string => `${(n / 1024 / 1024).toFixed(0)} MiB`
  console.log(JSON.stringify({ mode, connections, seconds: (Date.now() - started) / 1000, statuses: Object.fromEntries(statuses), rssIdle: mib(ready.rss), rssPeak: mib(report.peak), rssAfter: mib(report.rss) }))
}
