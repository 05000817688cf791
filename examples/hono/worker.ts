// The Hono app on Cloudflare Workers (module syntax, no nodejs_compat needed); locally in
// workerd: see README.md in this folder.
import type { Hono } from 'hono'
import { createApp } from './app.js'
import type { MailChannelsWebhooksEnv } from 'mailchannels-webhooks/hono'

interface Env {
  MAILCHANNELS_CUSTOMER_HANDLE: string
  MAILCHANNELS_PUBLIC_KEY?: string
  /** Optional: where the key is fetched from; MailChannels unless set (the local sandbox's URL). */
  MAILCHANNELS_BASE_URL?: string
}

// Built at the first request of each isolate (env is known then); kept for the isolate's life.
let app: Hono<MailChannelsWebhooksEnv> | undefined

export default {
  fetch (request: Request, env: Env): Response | Promise<Response> {
    app ??= createApp({ customerHandle: env.MAILCHANNELS_CUSTOMER_HANDLE, publicKey: env.MAILCHANNELS_PUBLIC_KEY, baseUrl: env.MAILCHANNELS_BASE_URL })
    return app.fetch(request, env)
  },
}
