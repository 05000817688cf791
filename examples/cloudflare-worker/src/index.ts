// A Cloudflare Worker receiving MailChannels webhooks (module syntax, no nodejs_compat needed).
// Deploy: `npx wrangler deploy`, then point the webhook at https://<worker>/webhooks/mailchannels.
import { createWebhookHandler, type WebhookHandler } from 'mailchannels-webhooks/web'

export interface Env {
  /** Your MailChannels customer handle: only deliveries for it are accepted. */
  MAILCHANNELS_CUSTOMER_HANDLE: string
  /**
   * Optional: the signing key (base64 SPKI, from the public-key endpoint). With it a fresh
   * isolate verifies at once instead of fetching the key first.
   */
  MAILCHANNELS_PUBLIC_KEY?: string
}

// One handler per isolate: its key cache and replay memory live as long as the isolate.
// (Workers isolates are many and short-lived: use a shared ReplayStore, such as one on KV or a
// Durable Object, to catch resends that land on another isolate.)
let handler: WebhookHandler | undefined

export default {
  async fetch (request: Request, env: Env): Promise<Response> {
    if (new URL(request.url).pathname !== '/webhooks/mailchannels') return new Response('Not found', { status: 404 })
    handler ??= createWebhookHandler({
      customerHandles: [env.MAILCHANNELS_CUSTOMER_HANDLE],
      publicKey: env.MAILCHANNELS_PUBLIC_KEY || undefined,
      onEvents: async (events) => {
        for (const event of events) {
          // Store or queue the event here; answering 2xx tells MailChannels it was handled.
          console.log(`${event.event} for ${event.customerHandle} (request ${event.requestId ?? 'n/a'})`)
        }
      },
    })
    return handler(request)
  },
}
