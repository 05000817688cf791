// An Express app receiving MailChannels webhooks: `npx tsx examples/express-receiver.ts`
// Run as is, a local sandbox delivers three batches to it, then everything closes.
import express from 'express'
import type { Server } from 'node:http'
import { captureRawBody, mailchannelsWebhooks } from 'mailchannels-webhooks/express'
import { createSandbox } from 'mailchannels-webhooks/testing'

export function buildReceiver (options: { customerHandles: string[], baseUrl?: string }): express.Express {
  const app = express()
  // The app's global parsers stay where they are: verify: captureRawBody keeps the exact bytes
  // the signature covers for the webhook middleware (the same option for urlencoded() and text()).
  app.use(express.json({ verify: captureRawBody }))
  app.post('/api/notes', (req, res) => { res.status(201).json({ saved: req.body }) }) // parsed as before

  // It verifies POST requests only, so app.use('/webhooks', mailchannelsWebhooks(...)) would work
  // too and leave GET routes alone.
  app.post('/webhooks', mailchannelsWebhooks({
    customerHandles: options.customerHandles, // required: whose deliveries you accept
    baseUrl: options.baseUrl, // where signing keys come from; leave it out in production
  }), (req, res) => {
    const events = req.webhookEvents ?? []
    const bounces = events.filter((e) => e.event === 'hard-bounced' || e.event === 'soft-bounced')
    console.log(`${events.length} events, ${bounces.length} bounces`)
    res.json({ received: events.length })
  })
  return app
}

const sandbox = await createSandbox()
const app = buildReceiver({ customerHandles: [sandbox.customerHandle], baseUrl: sandbox.baseUrl })
const server = await new Promise<Server>((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
const { port } = server.address() as { port: number }
for (let i = 0; i < 3; i++) {
  const batch = await sandbox.deliver(undefined, { target: `http://127.0.0.1:${port}/webhooks` })
  console.log(`batch ${batch.batch_id}: ${batch.status_code} ${batch.status}`)
}
await sandbox.close()
server.closeAllConnections()
await new Promise((resolve) => server.close(resolve))
