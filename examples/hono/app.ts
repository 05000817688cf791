// A Hono app receiving MailChannels webhooks; the same app runs on Cloudflare Workers
// (./worker.ts) and on Node (./node.ts, with @hono/node-server).
import { Hono } from 'hono'
import { mailchannelsWebhooks, type MailChannelsWebhooksEnv } from 'mailchannels-webhooks/hono'

export interface AppConfig {
  /** Your MailChannels customer handle: only deliveries for it are accepted. */
  customerHandle: string
  /** Optional: the signing key (base64 SPKI); without it the key is fetched once and cached. */
  publicKey?: string
  /** Optional: where the key is fetched from; MailChannels unless set (the local sandbox's URL). */
  baseUrl?: string
}

export function createApp (config: AppConfig): Hono<MailChannelsWebhooksEnv> {
  const app = new Hono<MailChannelsWebhooksEnv>()
  app.get('/health', (c) => c.text('ok'))
  app.post(
    '/webhooks/mailchannels',
    mailchannelsWebhooks({
      customerHandles: [config.customerHandle],
      publicKey: config.publicKey || undefined,
      baseUrl: config.baseUrl || undefined,
    }),
    (c) => {
      const events = c.get('webhookEvents')
      // Store or queue the events here; a 2xx marks the delivery handled.
      for (const event of events) console.log(`received ${event.event} event`)
      return c.json({ received: events.map((e) => e.event) })
    },
  )
  return app
}
