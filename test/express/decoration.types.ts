// Compile-time test of the middleware's typing (checked by `npx tsc -p tsconfig.json`): after
// `mailchannelsWebhooks()` on a route, `req.webhookEvents` is a `WebhookEvent[]` (no `!`), under
// Express 5 (`express`) and Express 4 (`express4`, the npm alias of express@4 and its types);
// anywhere else it may be undefined.
import http from 'node:http'
import express from 'express'
import express4 from 'express4'
import { captureRawBody, mailchannelsWebhooks, webhookEventsOf, type WebhookEvent } from '../../src/express/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

const app = express()
app.post('/webhooks/mailchannels', mailchannelsWebhooks({ customerHandles: ['abc123'] }), (req, res) => {
  assertType<Equal<typeof req.webhookEvents, WebhookEvent[]>>(true)
  for (const event of req.webhookEvents) {
    if (event.event === 'click') void event.url
  }
  res.json({ received: req.webhookEvents.length })
})
// Route parameters, an async handler, and a router: the same.
app.post('/webhooks/:tenant', mailchannelsWebhooks({ customerHandles: ['abc123'] }), async (req, res) => {
  res.json({ tenant: req.params.tenant, received: req.webhookEvents.length })
})
const router = express.Router()
router.post('/mc', mailchannelsWebhooks({ customerHandles: ['abc123'] }), (req, res) => { res.json(req.webhookEvents.map((e) => e.event)) })
app.use('/hooks', router)

// A handler without the middleware before it may see no events.
app.post('/other', (req, res) => {
  assertType<Equal<typeof req.webhookEvents, WebhookEvent[] | undefined>>(true)
  // @ts-expect-error possibly undefined: no mailchannelsWebhooks() on this route
  res.json({ received: req.webhookEvents.length })
})
app.use(mailchannelsWebhooks({ customerHandles: ['abc123'] }))

// Express 4's types.
const app4 = express4()
app4.post('/webhooks/mailchannels', mailchannelsWebhooks({ customerHandles: ['abc123'] }), (req, res) => {
  assertType<Equal<typeof req.webhookEvents, WebhookEvent[]>>(true)
  res.json({ received: req.webhookEvents.length })
})
app4.post('/other', (req, res) => {
  // @ts-expect-error possibly undefined: no mailchannelsWebhooks() on this route
  res.json({ received: req.webhookEvents.length })
})

// captureRawBody fits body-parser's verify option of every parser, under both majors' types.
app.use(express.json({ verify: captureRawBody }))
app.use(express.urlencoded({ extended: false, verify: captureRawBody }))
app.use(express.text({ verify: captureRawBody }))
app.use(express.raw({ verify: captureRawBody }))
app4.use(express4.json({ verify: captureRawBody }))
app4.use(express4.urlencoded({ extended: false, verify: captureRawBody }))
app4.use(express4.text({ verify: captureRawBody }))

// webhookEventsOf never throws and says the events may be absent.
app.all('/any', mailchannelsWebhooks({ customerHandles: ['abc123'] }), (req, res) => {
  assertType<Equal<ReturnType<typeof webhookEventsOf>, WebhookEvent[] | undefined>>(true)
  res.json({ received: webhookEventsOf(req)?.length ?? 0 })
})

// A bare node:http server.
const mw = mailchannelsWebhooks({ customerHandles: ['abc123'] })
http.createServer((req, res) => { mw(req, res, () => { res.end() }) })

// @ts-expect-error customerHandles is required
mailchannelsWebhooks({ publicKey: 'x' })
