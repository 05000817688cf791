import t from 'tap'
import Fastify from 'fastify'
import type { AddressInfo } from 'node:net'
import mailchannelsWebhooks, { batchesRoute } from '../../src/fastify/index.js'
import { MailChannels, WEBHOOK_EVENT_TYPES, type WebhookEvent } from '../../src/index.js'
import { closedPortUrl } from './helpers/receiver.js'
import { testSandbox } from './helpers/sandbox.js'

// Sandbox -> real loopback HTTP -> the Fastify plugin (replay protection on, keys fetched from the sandbox).
t.test('Fastify plugin receiving from the sandbox over loopback', async (t) => {
  const sandbox = await testSandbox(t, { customerHandle: 'acme' })
  const seen: WebhookEvent[][] = []
  let failNext = 0
  const app = Fastify()
  await app.register(mailchannelsWebhooks, { customerHandles: [sandbox.customerHandle], baseUrl: sandbox.baseUrl })
  app.post('/webhooks', { config: { mailchannelsWebhooks: true } }, async (request, reply) => {
    if (failNext > 0) {
      failNext--
      return reply.code(503).send({ error: 'try later' })
    }
    seen.push(request.webhookEvents)
    return reply.code(204).send()
  })
  const TOKEN = 'test-token'
  await app.register(batchesRoute, {
    client: new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl }),
    url: '/webhooks/batches',
    authorize: (request) => request.headers.authorization === `Bearer ${TOKEN}`,
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  const target = `${origin}/webhooks`

  t.test('verified deliveries: typed events of all ten types', async (t) => {
    const batch = await sandbox.deliver(undefined, { target })
    t.match(batch, { status: '2xx_response', status_code: 204, event_count: 10, customer_handle: 'acme', webhook: target })
    t.equal(seen.length, 1)
    const events = seen[0]!
    t.same(events.map((e) => e.event), WEBHOOK_EVENT_TYPES)
    for (const e of events) {
      t.equal(e.customerHandle, 'acme')
      switch (e.event) {
        case 'click': t.match(e, { url: String, userAgent: String, ip: String }); break
        case 'open': t.match(e, { userAgent: String, ip: String }); break
        case 'hard-bounced': t.match(e, { status: '5.1.1', reason: String }); break
        case 'soft-bounced': t.match(e, { status: '4.2.2', reason: String }); break
        case 'dropped': t.match(e, { status: '5.7.1', reason: String }); break
        case 'test': t.equal(e.email, 'test@mailchannels.com'); break
        default: t.match(e, { recipients: [String], requestId: String })
      }
    }
  })

  t.test('4xx: tampered deliveries are rejected by the plugin and recorded', async (t) => {
    for (const tamper of ['body', 'signature', 'expired'] as const) {
      const batch = await sandbox.deliver(undefined, { target, tamper })
      t.match(batch, { status: '4xx_response', status_code: 401 }, tamper)
    }
    t.equal(seen.length, 1, 'the handler never ran')
  })

  t.test('5xx: a failing handler makes the sandbox retry; the re-signed retry is accepted', async (t) => {
    failNext = 2
    const before = sandbox.batches.length
    const last = await sandbox.deliver(undefined, { target })
    t.same(sandbox.batches.slice(before).map((b) => [b.status, b.status_code]), [['5xx_response', 503], ['5xx_response', 503], ['2xx_response', 204]])
    t.equal(last.status, '2xx_response')
    t.equal(seen.length, 2)
  })

  t.test('no_response: the receiver is down', async (t) => {
    const down = await closedPortUrl()
    const batch = await sandbox.deliver(undefined, { target: down })
    t.match(batch, { status: 'no_response', status_code: null, webhook: down })
    t.same(sandbox.batches.slice(-3).map((b) => b.status), ['no_response', 'no_response', 'no_response'], 'three attempts')
  })

  t.test('a key rotation is picked up with exactly one new key fetch', async (t) => {
    t.equal(sandbox.stats.publicKeyRequests, 1, 'one fetch so far (the signature-tampered delivery used the cached key)')
    sandbox.rotateKey()
    t.equal((await sandbox.deliver(undefined, { target })).status, '2xx_response')
    t.equal((await sandbox.deliver(undefined, { target })).status, '2xx_response')
    t.equal(sandbox.stats.publicKeyRequests, 2, 'exactly one new fetch, for the new key id')
  })

  t.test('listing the recorded batches through the batches route', async (t) => {
    const get = async (query: string, token = TOKEN): Promise<{ status: number, body: any }> => {
      const res = await fetch(`${origin}/webhooks/batches${query}`, { headers: { authorization: `Bearer ${token}` } })
      return { status: res.status, body: await res.json() }
    }
    t.equal((await get('', 'wrong')).status, 401, 'behind the authorize hook')
    const all = await get('')
    t.equal(all.status, 200)
    t.same(all.body.data.map((b: { batchId: number }) => b.batchId), sandbox.batches.map((b) => b.batch_id))
    const failed = await get('?statuses=4xx,5xx,no_response')
    t.same(failed.body.data.map((b: { status: string }) => b.status),
      ['4xx_response', '4xx_response', '4xx_response', '5xx_response', '5xx_response', 'no_response', 'no_response', 'no_response'])
    t.match(failed.body.data.at(-1), { statusCode: null, customerHandle: 'acme', eventCount: 10, duration: { unit: 'milliseconds' } })
    const page = await get('?limit=2&offset=1')
    t.same(page.body.data.map((b: { batchId: number }) => b.batchId), [2, 3])
  })
})

// A receiver keeps running while the developer restarts the sandbox (same port). Each run
// signs under a fresh key id, so the receiver fetches the new key at once; with a fixed key id
// it would hold the old run's key and reject every delivery until its refresh cooldown passed.
t.test('a restarted sandbox is accepted at once by a receiver that is still running', async (t) => {
  const first = await testSandbox(t)
  const port = Number(new URL(first.baseUrl).port)
  const app = Fastify()
  await app.register(mailchannelsWebhooks, { customerHandles: ['sandbox'], baseUrl: first.baseUrl })
  let handled = 0
  app.post('/webhooks', { config: { mailchannelsWebhooks: true } }, async (_request, reply) => {
    handled++
    return reply.code(204).send()
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const target = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/webhooks`
  t.match(await first.deliver(undefined, { target }), { status_code: 204 })
  await first.close()
  for (let run = 2; run <= 3; run++) {
    const again = await testSandbox(t, { port, maxAttempts: 1 })
    t.not(again.keyId, first.keyId)
    t.match(await again.deliver(undefined, { target }), { status_code: 204 }, `run ${run}: accepted on the first attempt`)
    await again.close()
  }
  t.equal(handled, 3)
})
