import t from 'tap'
import express from 'express'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { batchesRoute, mailchannelsWebhooks } from '../../src/express/index.js'
import { MailChannels, WEBHOOK_EVENT_TYPES, type WebhookEvent } from '../../src/index.js'
import { testSandbox } from './helpers/sandbox.js'

// Sandbox -> real loopback HTTP -> the Express middleware (replay protection on, keys fetched from the sandbox).
t.test('Express middleware receiving from the sandbox over loopback', async (t) => {
  const sandbox = await testSandbox(t)
  const seen: WebhookEvent[][] = []
  let failNext = 0
  const app = express()
  app.post('/webhooks', mailchannelsWebhooks({ customerHandles: [sandbox.customerHandle], baseUrl: sandbox.baseUrl }), (req, res) => {
    if (failNext > 0) {
      failNext--
      res.status(500).json({ error: 'oops' })
      return
    }
    seen.push(req.webhookEvents!)
    res.sendStatus(204)
  })
  app.use(batchesRoute({
    client: new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl }),
    path: '/webhooks/batches',
    authorize: (req) => req.headers.authorization === 'Bearer t0ken',
  }))
  const server = await new Promise<Server>((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
  t.teardown(() => new Promise<void>((resolve) => { server.close(() => resolve()); server.closeAllConnections() }))
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const target = `${origin}/webhooks`

  const ok = await sandbox.deliver(undefined, { target })
  t.match(ok, { status: '2xx_response', status_code: 204, event_count: 10 })
  t.same(seen[0]?.map((e) => e.event), WEBHOOK_EVENT_TYPES, 'typed events of all ten types')
  const bounce = seen[0]?.find((e) => e.event === 'hard-bounced')
  t.ok(bounce?.event === 'hard-bounced' && bounce.status === '5.1.1')

  const tampered = await sandbox.deliver(undefined, { target, tamper: 'body' })
  t.match(tampered, { status: '4xx_response', status_code: 401 })

  failNext = 1
  await sandbox.deliver(undefined, { target })
  t.same(sandbox.batches.slice(-2).map((b) => [b.status, b.status_code]), [['5xx_response', 500], ['2xx_response', 204]], 'a 500 is retried, re-signed')
  t.equal(seen.length, 2)

  t.equal(sandbox.stats.publicKeyRequests, 1)
  sandbox.rotateKey()
  t.equal((await sandbox.deliver(undefined, { target })).status, '2xx_response')
  t.equal((await sandbox.deliver(undefined, { target })).status, '2xx_response')
  t.equal(sandbox.stats.publicKeyRequests, 2, 'a rotation costs exactly one key fetch')

  const res = await fetch(`${origin}/webhooks/batches?statuses=4xx,5xx`, { headers: { authorization: 'Bearer t0ken' } })
  t.equal(res.status, 200)
  const body = await res.json() as { data: Array<{ batchId: number, status: string, statusCode: number }> }
  t.same(body.data.map((b) => [b.batchId, b.status, b.statusCode]), [[2, '4xx_response', 401], [3, '5xx_response', 500]])
  t.equal((await fetch(`${origin}/webhooks/batches`)).status, 401, 'behind the authorize hook')
})
