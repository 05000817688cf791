// The Hono app on Cloudflare Workers (module syntax, no nodejs_compat needed).
import type { Hono } from 'hono'
import { createApp } from './app.js'
import type { MailChannelsWebhookEnv } from 'mailchannels-webhooks/hono'

interface Env {
  MAILCHANNELS_CUSTOMER_HANDLE: string
  MAILCHANNELS_PUBLIC_KEY?: string
}

// Built at the first request of each isolate (env is known then); kept for the isolate's life.
let app: Hono<MailChannelsWebhookEnv> | undefined

export default {
  fetch (request: Request, env: Env): Response | Promise<Response> {
    app ??= createApp({ customerHandle: env.MAILCHANNELS_CUSTOMER_HANDLE, publicKey: env.MAILCHANNELS_PUBLIC_KEY })
    return app.fetch(request, env)
  },
}
