// Compile-time test of the middleware's typing (checked by `npx tsc -p tsconfig.json`).
import express from 'express'
import { mailchannelsWebhooks, type WebhookEvent } from '../../src/express/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

const app = express()
app.post('/webhooks/mailchannels', mailchannelsWebhooks({ customerHandles: ['abc123'] }), (req, res) => {
  assertType<Equal<typeof req.webhookEvents, WebhookEvent[] | undefined>>(true)
  for (const event of req.webhookEvents ?? []) {
    if (event.event === 'click') void event.url
  }
  res.json({ received: req.webhookEvents?.length ?? 0 })
})
// @ts-expect-error customerHandles is required
mailchannelsWebhooks({ publicKey: 'x' })
