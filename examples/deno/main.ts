// Deno: see README.md in this folder (run from the clone against the local sandbox, or in your project).
import { createWebhookHandler } from 'mailchannels-webhooks/web'

const handler = createWebhookHandler({
  customerHandles: [Deno.env.get('MAILCHANNELS_CUSTOMER_HANDLE') ?? ''],
  // Optional: the signing key (base64 SPKI); without it the key is fetched once and cached.
  publicKey: Deno.env.get('MAILCHANNELS_PUBLIC_KEY') || undefined,
  // Where the key is fetched from: MailChannels unless set (the sandbox's URL, to try it locally).
  baseUrl: Deno.env.get('MAILCHANNELS_BASE_URL') || undefined,
  onEvents: async (events) => {
    // Store or queue the events here; answering 2xx marks the delivery handled.
    for (const event of events) console.log(`received ${event.event} event`)
    return Response.json({ received: events.map((e) => e.event) })
  },
})

Deno.serve({ hostname: '127.0.0.1', port: Number(Deno.env.get('PORT') ?? 8000) }, (request) => {
  if (new URL(request.url).pathname === '/webhooks/mailchannels') return handler(request)
  return new Response('Not found', { status: 404 })
})
