// A Cloudflare Worker receiving MailChannels webhooks (module syntax, no nodejs_compat needed).
// Locally: see README.md in this folder (workerd against the sandbox). Deployed: `npx wrangler
// deploy`, then point the webhook at https://<worker>/webhooks/mailchannels.
import { createWebhookHandler, type WebhookHandler } from 'mailchannels-webhooks/web'

export interface Env {
  /** Your MailChannels customer handle: only deliveries for it are accepted. */
  MAILCHANNELS_CUSTOMER_HANDLE: string
  /**
   * Optional: the signing key (base64 SPKI, from the public-key endpoint). With it a fresh
   * isolate verifies at once instead of fetching the key first.
   */
  MAILCHANNELS_PUBLIC_KEY?: string
  /** Optional: where the key is fetched from; MailChannels unless set (the local sandbox's URL). */
  MAILCHANNELS_BASE_URL?: string
}

// One handler per isolate, made at its first request (env is known then, and Workers allow no
// I/O outside a request): its key cache and replay memory live as long as the isolate.
// (Workers isolates are many and short-lived: use a shared ReplayStore, such as one on a
// Durable Object, to catch resends that land on another isolate; see docs/runtimes.md.)
let handler: WebhookHandler | undefined

export default {
  async fetch (request: Request, env: Env): Promise<Response> {
    if (new URL(request.url).pathname !== '/webhooks/mailchannels') return new Response('Not found', { status: 404 })
    handler ??= createWebhookHandler({
      customerHandles: [env.MAILCHANNELS_CUSTOMER_HANDLE],
      publicKey: env.MAILCHANNELS_PUBLIC_KEY || undefined,
      baseUrl: env.MAILCHANNELS_BASE_URL || undefined,
      onEvents: async (events) => {
        for (const event of events) {
          // Store or queue the event here; answering 2xx tells MailChannels it was handled.
          console.log(`received ${event.event} event`)
        }
      },
    })
    return handler(request)
  },
}
