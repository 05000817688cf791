// Deno: MAILCHANNELS_CUSTOMER_HANDLE=... deno run --allow-net --allow-env main.ts
// (deno.json maps `mailchannels-webhooks/` to the npm package.)
import { createWebhookHandler } from 'mailchannels-webhooks/web'

const handler = createWebhookHandler({
  customerHandles: [Deno.env.get('MAILCHANNELS_CUSTOMER_HANDLE') ?? ''],
  // Optional: the signing key (base64 SPKI); without it the key is fetched once and cached.
  publicKey: Deno.env.get('MAILCHANNELS_PUBLIC_KEY') || undefined,
  onEvents: async (events) => {
    // Store or queue the events here; answering 2xx marks the delivery handled.
    return Response.json({ received: events.map((e) => e.event) })
  },
})

Deno.serve({ hostname: '127.0.0.1', port: Number(Deno.env.get('PORT') ?? 8000) }, (request) => {
  if (new URL(request.url).pathname === '/webhooks/mailchannels') return handler(request)
  return new Response('Not found', { status: 404 })
})
