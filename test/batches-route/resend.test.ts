import t from 'tap'
import express from 'express'
import express4 from 'express4'
import Fastify from 'fastify'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { batchesRoute as expressBatchesRoute } from '../../src/express/index.js'
import mailchannelsWebhooks, { batchesRoute } from '../../src/fastify/index.js'
import { MailChannels } from '../../src/index.js'
import { FAKE_API_KEY, hang, reply, useFakeApi } from '../helpers/fake-api.js'

// The optional resend route of the batch-listing helpers: POST <path>/:batchId/resend, off by
// default, behind the same authorize, on Fastify and on Express 4 and 5.

const TOKEN = 'admin-token'
const authorize = (req: { headers: http.IncomingHttpHeaders }): boolean => req.headers.authorization === `Bearer ${TOKEN}`
const AUTH = { authorization: `Bearer ${TOKEN}` }

interface Answer { status: number, headers: Record<string, unknown>, body: any }
interface Mounted { post (url: string, headers?: Record<string, string>): Promise<Answer>, close (): Promise<void> }
type Mount = (options: { client: MailChannels, resend?: unknown }) => Promise<Mounted>

const fastifyMount: Mount = async ({ client, resend }) => {
  const app = Fastify()
  await app.register(batchesRoute, { client, authorize, ...(resend === undefined ? {} : { resend: resend as boolean }) })
  await app.ready()
  return {
    async post (url, headers = {}) {
      const res = await app.inject({ method: 'POST', url, headers })
      return { status: res.statusCode, headers: res.headers, body: res.body === '' ? null : res.json() }
    },
    close: () => app.close(),
  }
}

const expressMount = (factory: typeof express): Mount => async ({ client, resend }) => {
  const app = factory()
  app.use(expressBatchesRoute({ client, authorize, ...(resend === undefined ? {} : { resend: resend as boolean }) }))
  app.use((_req: http.IncomingMessage, res: http.ServerResponse) => { res.statusCode = 404; res.setHeader('content-type', 'application/json'); res.end('{"notFound":true}') })
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    async post (url, headers = {}) {
      const res = await fetch(`${base}${url}`, { method: 'POST', headers })
      const text = await res.text()
      return { status: res.status, headers: Object.fromEntries(res.headers), body: text === '' ? null : JSON.parse(text) }
    },
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

const MOUNTS: Array<[string, Mount]> = [['fastify', fastifyMount], ['express 5', expressMount(express)], ['express 4', expressMount(express4 as unknown as typeof express)]]

const fake = useFakeApi(t)
const resends = (): typeof fake.api.requests => fake.api.requests.filter((r) => r.url.endsWith('/resend'))

for (const [name, mount] of MOUNTS) {
  t.test(`${name}: off by default`, async (t) => {
    const route = await mount({ client: new MailChannels(FAKE_API_KEY, { baseUrl: fake.api.url }) })
    t.teardown(() => route.close())
    t.equal((await route.post('/webhooks/batches/1001/resend', AUTH)).status, 404)
    t.equal(fake.api.requests.length, 0)
  })

  t.test(`${name}: resend: true serves POST <path>/:batchId/resend behind authorize`, async (t) => {
    const route = await mount({ client: new MailChannels(FAKE_API_KEY, { baseUrl: fake.api.url, maxRetries: 0 }), resend: true })
    t.teardown(() => route.close())
    // A short timeout only where the upstream hangs: on a loaded machine 300 ms can pass before a normal answer.
    const impatient = await mount({ client: new MailChannels(FAKE_API_KEY, { baseUrl: fake.api.url, maxRetries: 0, timeout: 300 }), resend: true })
    t.teardown(() => impatient.close())

    const denied = await route.post('/webhooks/batches/1001/resend', { authorization: 'Bearer wrong' })
    t.match(denied, { status: 401, body: { code: 'unauthorized' } })
    t.equal(fake.api.requests.length, 0, 'a denied request never reaches MailChannels')

    const ok = await route.post('/webhooks/batches/1001/resend', { ...AUTH, 'x-api-key': 'callers-key', 'x-customer-handle': 'evil' })
    t.equal(ok.status, 200)
    t.equal(ok.headers['cache-control'], 'no-store')
    t.same(ok.body, { data: { batchId: 1001, customerHandle: 'acme', webhook: 'https://hooks.example.com/b?token=t', createdAt: '2026-01-20T00:00:00.000Z', eventCount: 2, durationInMs: 12, statusCode: 200 } })
    t.equal(resends().length, 1)
    t.equal(resends()[0]!.url, '/tx/v1/webhook-batch/1001/resend')
    t.equal(resends()[0]!.headers['x-api-key'], FAKE_API_KEY, 'the server\'s key, not the caller\'s')
    t.equal(resends()[0]!.headers['x-customer-handle'], undefined, 'client headers are never forwarded')
    t.equal(resends()[0]!.headers.authorization, undefined)

    fake.api.requests.length = 0
    t.match(await route.post('/webhooks/batches/1001/resend?customerHandle=acme', AUTH), { status: 200 })
    t.equal(resends()[0]!.headers['x-customer-handle'], 'acme', 'the customerHandle query parameter')
    fake.api.resendAnswers.set(1002, 503)
    t.match(await route.post('/webhooks/batches/1002/resend', AUTH), { status: 200, body: { data: { batchId: 1002, statusCode: 503 } } }, "the endpoint's answer is data")

    t.match(await route.post('/webhooks/batches/999/resend', AUTH), { status: 404, body: { code: 'not_found', message: 'No batch with this id exists for this account.' } })
    for (const id of ['abc', '0', '01', '-1', '1.5', '9007199254740993', '1%2F2']) {
      fake.api.requests.length = 0
      t.match(await route.post(`/webhooks/batches/${id}/resend`, AUTH), { status: 400, body: { code: 'validation_error', message: /^The batch id must be a positive integer/ } }, `batch id ${id}`)
      t.equal(fake.api.requests.length, 0)
    }
    t.match(await route.post('/webhooks/batches/1001/resend?foo=1', AUTH), { status: 400, body: { message: "Unknown query parameter 'foo'. Allowed: customerHandle." } })
    t.match(await route.post('/webhooks/batches/1001/resend?customerHandle=a&customerHandle=b', AUTH), { status: 400, body: { message: /repeated/ } })
    t.match(await route.post('/webhooks/batches/1001/resend?customerHandle=a%20b', AUTH), { status: 400, body: { message: /customerHandle/ } })

    fake.api.requests.length = 0
    fake.api.queue.push(reply(500, { errors: ['upstream secret detail'] }))
    const down = await route.post('/webhooks/batches/1001/resend', AUTH)
    t.match(down, { status: 503, body: { code: 'internal_server_error', message: 'The MailChannels API is unavailable; try again later.' } })
    t.notMatch(JSON.stringify(down.body), 'secret detail', 'no upstream text in the reply')
    t.equal(resends().length, 1, 'a resend is not retried after a 5xx')
    fake.api.queue.push(reply(401, { errors: ['bad key'] }))
    t.match(await route.post('/webhooks/batches/1001/resend', AUTH), { status: 502, body: { code: 'authentication_error', message: 'Resending the webhook batch failed upstream.' } })
    fake.api.queue.push(hang)
    t.match(await impatient.post('/webhooks/batches/1001/resend', AUTH), { status: 504, body: { code: 'application_error' } })
    t.equal((await route.post('/webhooks/batches/1001', AUTH)).status, 404, 'POST on other paths is not served')
  })

  t.test(`${name}: options checked at registration`, async (t) => {
    const client = new MailChannels(FAKE_API_KEY, { baseUrl: fake.api.url })
    await t.rejects(mount({ client, resend: 'yes' }), { name: 'TypeError', message: /^resend must be true or false/ })
    const listingOnly = { webhooks: { batches: client.webhooks.batches } } as unknown as MailChannels
    await t.rejects(mount({ client: listingOnly, resend: true }), { name: 'TypeError', message: /^resend: true needs a client with webhooks\.resendBatch/ })
    const fine = await mount({ client: listingOnly })
    await fine.close()
  })
}

t.test('fastify: the resend route is not taken for a webhook route by the plugin in the same scope', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(mailchannelsWebhooks, { baseUrl: fake.api.url, customerHandles: ['acme'] })
  await app.register(batchesRoute, { client: new MailChannels(FAKE_API_KEY, { baseUrl: fake.api.url }), authorize, resend: true, prefix: '/admin' })
  await app.ready()
  const res = await app.inject({ method: 'POST', url: '/admin/webhooks/batches/1001/resend', headers: AUTH })
  t.equal(res.statusCode, 200, res.body)
  t.match(res.json(), { data: { batchId: 1001 } })
})
