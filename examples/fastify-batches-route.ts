// Listing webhook delivery batches from your own API, behind an authorization hook:
// `npx tsx examples/fastify-batches-route.ts`
// Run as is, a local sandbox plays the MailChannels API; in production pass your API key:
// new MailChannels(process.env.MAILCHANNELS_API_KEY) and keep the key on the server.
import Fastify from 'fastify'
import { batchesRoute } from 'mailchannels-webhooks/fastify'
import { MailChannels } from 'mailchannels-webhooks'
import { createSandbox } from 'mailchannels-webhooks/testing'

const ADMIN_TOKEN = 'change-me' // stands in for your real auth (session, JWT, ...)

const sandbox = await createSandbox({ maxAttempts: 1 })
const app = Fastify()
await app.register(batchesRoute, {
  client: new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl }),
  url: '/admin/webhook-batches',
  // Required: the listing shows delivery metadata and spends your API quota, so it is never public.
  authorize: (request) => request.headers.authorization === `Bearer ${ADMIN_TOKEN}`,
  // Upstream calls in flight at once (default 10); more get 503 with Retry-After. Add a
  // per-user rate limit too (e.g. @fastify/rate-limit) to bound what one user can spend.
  maxConcurrent: 4,
})
app.post('/webhooks', async (_request, reply) => reply.code(204).send()) // a receiver for the sandbox to hit
const address = await app.listen({ host: '127.0.0.1', port: 0 })

await sandbox.deliver(undefined, { target: `${address}/webhooks` }) // recorded as 2xx_response
await sandbox.deliver(undefined, { target: `${address}/missing` }) // recorded as 4xx_response (404)

const denied = await fetch(`${address}/admin/webhook-batches`)
console.log(`without a token: ${denied.status}`)
const res = await fetch(`${address}/admin/webhook-batches?statuses=4xx,5xx,no_response`, {
  headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
})
const page = await res.json() as { data: Array<{ batchId: number, status: string, statusCode: number | null, webhook: string }> }
console.log(`with the token: ${res.status}`)
// The endpoint URL is outside text: JSON.stringify escapes control characters for the terminal.
for (const b of page.data) console.log(`failed batch ${b.batchId}: ${b.status} (${b.statusCode}) ${JSON.stringify(b.webhook)}`)

await sandbox.close()
await app.close()
