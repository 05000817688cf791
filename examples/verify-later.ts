// Accept fast, verify later: store the raw delivery with the time it arrived, answer 202,
// and verify from a queue worker with `now` = the arrival time. `npx tsx examples/verify-later.ts`
// `now` must be the time your server recorded, never a time taken from the request.
import http from 'node:http'
import { verifyWebhook } from 'mailchannels-webhooks'
import { createSandbox } from 'mailchannels-webhooks/testing'

interface Queued { body: Buffer, headers: http.IncomingHttpHeaders, receivedAt: number }
const queue: Queued[] = []

// The receiver keeps the exact bytes: a signature covers the body as sent, not re-serialised JSON.
const receiver = http.createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (c: Buffer) => chunks.push(c))
  req.on('end', () => {
    queue.push({ body: Buffer.concat(chunks), headers: req.headers, receivedAt: Date.now() })
    res.writeHead(202).end()
  })
})
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
const { port } = receiver.address() as { port: number }

const sandbox = await createSandbox({ target: `http://127.0.0.1:${port}/webhooks` })
await sandbox.deliver()
await sandbox.deliver()
sandbox.rotateKey() // MailChannels may rotate meanwhile; old keys stay published, so queued deliveries still verify

// The worker, pretending it runs 10 minutes later (past the 5-minute signature window).
const workerTime = Date.now() + 10 * 60_000
for (const item of queue) {
  const options = { payload: item.body, headers: item.headers, customerHandles: [sandbox.customerHandle], baseUrl: sandbox.baseUrl }
  const late = await verifyWebhook({ ...options, now: workerTime })
  console.log(`verified at worker time: ${late.error?.type}`) // signature_expired
  const { data, error } = await verifyWebhook({ ...options, now: item.receivedAt })
  if (error !== null) throw new Error(error.message)
  console.log(`verified at arrival time: ${data.length} events (${data.map((e) => e.event).slice(0, 3).join(', ')}, ...)`)
}

await sandbox.close()
receiver.closeAllConnections()
await new Promise((resolve) => receiver.close(resolve))
