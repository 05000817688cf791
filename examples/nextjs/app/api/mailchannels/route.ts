// Next.js App Router route handler: POST /api/mailchannels receives MailChannels webhooks.
// Works on the Node.js runtime (the default) and on the Edge runtime (add
// `export const runtime = 'edge'`); the handler reads the raw body itself, so nothing else may.
import { createWebhookHandler, type WebhookHandler } from 'mailchannels-webhooks/web'

// Made at the first request, not when the module loads: `next build` loads this module to
// collect page data, where the variables below need not be set. Kept for the server's life:
// the fetched signing key is cached between requests.
let handler: WebhookHandler | undefined

function createHandler (): WebhookHandler {
  const customerHandle = process.env.MAILCHANNELS_CUSTOMER_HANDLE
  if (!customerHandle) throw new Error('Set MAILCHANNELS_CUSTOMER_HANDLE to your MailChannels customer handle (see examples/nextjs/README.md).')
  return createWebhookHandler({
    customerHandles: [customerHandle],
    // Optional: the key as base64 SPKI; a cold instance then verifies without fetching it.
    publicKey: process.env.MAILCHANNELS_PUBLIC_KEY || undefined,
    // Optional: where the key is fetched from; MailChannels unless set (the local sandbox's URL).
    baseUrl: process.env.MAILCHANNELS_BASE_URL || undefined,
    onEvents: async (events) => {
      for (const event of events) {
        // Store or queue the event; answering 2xx marks the delivery handled.
        console.log(`received ${event.event} event`)
      }
      return Response.json({ received: events.length })
    },
  })
}

export async function POST (request: Request): Promise<Response> {
  handler ??= createHandler()
  return handler(request)
}
