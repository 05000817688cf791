// The Hono app on Node: see README.md in this folder.
import { serve } from '@hono/node-server'
import { createApp } from './app.js'

const app = createApp({
  customerHandle: process.env.MAILCHANNELS_CUSTOMER_HANDLE ?? '',
  publicKey: process.env.MAILCHANNELS_PUBLIC_KEY,
  baseUrl: process.env.MAILCHANNELS_BASE_URL,
})

const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: Number(process.env.PORT ?? 3000) }, (info) => {
  console.log(`Listening on http://127.0.0.1:${info.port}`)
})
// Bound how long a slow client may take to send its request.
server.setTimeout?.(30_000)
process.on('SIGTERM', () => { server.close() })
