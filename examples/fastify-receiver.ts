// A Fastify app receiving MailChannels webhooks: `npx tsx examples/fastify-receiver.ts`
// Run as is, a local sandbox delivers three batches to it, then everything closes.
import Fastify, { type FastifyInstance } from 'fastify'
import mailchannelsWebhooks from 'mailchannels-webhooks/fastify'
import { createSandbox } from 'mailchannels-webhooks/testing'

export async function buildReceiver (options: { customerHandles: string[], baseUrl?: string }): Promise<FastifyInstance> {
  const app = Fastify({ requestTimeout: 30_000, connectionTimeout: 60_000 })
  await app.register(mailchannelsWebhooks, {
    customerHandles: options.customerHandles, // required: whose deliveries you accept
    baseUrl: options.baseUrl, // where signing keys come from; leave it out in production
  })
  // A route opts in with `config: { mailchannelsWebhooks: true }`: its handler runs only for a
  // verified delivery. The app's other routes are left exactly as they were.
  app.post('/webhooks', { config: { mailchannelsWebhooks: true } }, async (request) => {
    // Addresses and URLs come from outside: JSON.stringify escapes control characters before
    // they reach a terminal.
    for (const event of request.webhookEvents) {
      switch (event.event) {
        case 'hard-bounced':
        case 'complained':
        case 'unsubscribed':
          console.log(`suppress ${JSON.stringify(event.recipients ?? [])} (${event.event})`)
          break
        case 'click':
          console.log(`click on ${JSON.stringify(event.url ?? null)}`)
          break
      }
    }
    return { received: request.webhookEvents.length }
  })
  app.get('/health', async () => ({ ok: true })) // GET routes are never webhook routes
  return app
}

const sandbox = await createSandbox()
const app = await buildReceiver({ customerHandles: [sandbox.customerHandle], baseUrl: sandbox.baseUrl })
const address = await app.listen({ host: '127.0.0.1', port: 0 })
for (let i = 0; i < 3; i++) {
  const batch = await sandbox.deliver(undefined, { target: `${address}/webhooks` })
  console.log(`batch ${batch.batch_id}: ${batch.status_code} ${batch.status}, ${batch.event_count} events`)
}
await sandbox.close()
await app.close()
