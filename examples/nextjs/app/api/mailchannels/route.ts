// Next.js App Router route handler: POST /api/mailchannels receives MailChannels webhooks.
// Works on the Node.js runtime (the default) and on the Edge runtime (add
// `export const runtime = 'edge'`); the handler reads the raw body itself, so nothing else may.
import { createWebhookHandler } from 'mailchannels-webhooks/web'

// Created once per server instance (module scope): options are checked at startup and the
// fetched signing key is cached between requests.
export const POST = createWebhookHandler({
  customerHandles: [process.env.MAILCHANNELS_CUSTOMER_HANDLE ?? ''],
  // Optional: the key as base64 SPKI; a cold instance then verifies without fetching it.
  publicKey: process.env.MAILCHANNELS_PUBLIC_KEY || undefined,
  onEvents: async (events) => {
    for (const event of events) {
      // Store or queue the event; answering 2xx marks the delivery handled.
      console.log(`${event.event} for ${event.customerHandle}`)
    }
    return Response.json({ received: events.length })
  },
})
