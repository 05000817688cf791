// Adapter for the side-by-side HTTP harness (`http-bench.mjs --plugin ./bench/harness/router-adapter.mjs`,
// see bench/README.md): the Fastify plugin answering with `handlers: router`, a memory seen-events
// store and one (empty) handler per event type, as "handle events, not deliveries" recommends.
// Loads the built package (dist/): run `npm run build` first.
import mailchannelsWebhooks from '../../dist/fastify/index.js'
import { MemoryClaimStore, WebhookEventRouter, WEBHOOK_EVENT_TYPES } from '../../dist/index.js'
import { CUSTOMER_HANDLE } from './adapter.mjs'

export async function registerFastify (app, opts) {
  const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() })
  for (const type of [...WEBHOOK_EVENT_TYPES, 'unknown']) router.on(type, () => {})
  await app.register(mailchannelsWebhooks, { publicKey: opts.publicKey, customerHandles: [CUSTOMER_HANDLE], bodyLimit: opts.bodyLimit, path: opts.path, handlers: router })
}
