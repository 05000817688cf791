// Two Fastify instances behind a load balancer share one real Redis (RedisReplayStore):
// a delivery is handled once across both, concurrent copies run the handler once, a failed
// handler releases its claim, and Redis going away fails closed (503) and then recovers.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import express from 'express'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { mailchannelsWebhooks, type WebhookRequest } from '../../src/express/index.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'
import { deliveryId } from '../../src/replay/types.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { startRedisServer, waitFor, type RedisServer } from './helpers/redis-server.js'

const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)
t.teardown(() => { process.off('unhandledRejection', onUnhandled) })

const KEYS = generateSigningKeyPair()
/**
 * Deadlines for hangs only (30 s): a wait for a condition returns as soon as it holds, and the
 * command and store timeouts of a running Redis must not fire because the machine is busy.
 * With Redis stopped, commands fail at once (no offline queue), whatever these are.
 */
const HANG_MS = 30_000
const PATIENT = { commandTimeout: HANG_MS }
const HANDLE = 'acct_1'
let serial = 0

/** A fresh signed delivery (distinct events, so a distinct signature). */
function delivery (): SignedWebhook {
  serial++
  return signWebhook({
    privateKey: KEYS.privateKey,
    events: [{ event: 'delivered', customer_handle: HANDLE, timestamp: 1700000000, request_id: `req-${serial}`, recipients: ['a@example.net'] }],
  })
}

/** The Redis key of a delivery (what RedisReplayStore claims: deliveryId of the signature bytes). */
function replayKey (prefix: string, d: SignedWebhook): string {
  const sig = d.headers.signature.slice(d.headers.signature.indexOf('=:') + 2, -1)
  return prefix + deliveryId(Buffer.from(sig, 'base64'))
}

interface Instance { url: string }
interface Cluster { a: Instance, b: Instance, calls: () => number, failNext: (n: number) => void, prefix: string }

/** Two instances, each with its own ioredis client (as two processes would have), one Redis. */
async function cluster (t: Test, redis: RedisServer): Promise<Cluster> {
  const prefix = `mcwh-test-${serial++}:`
  let calls = 0
  let failures = 0
  const start = async (): Promise<Instance> => {
    const app = Fastify()
    const replay = new RedisReplayStore(await redis.client(PATIENT), { prefix, timeout: HANG_MS })
    await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay })
    app.post('/webhooks/mailchannels', { config: { mailchannelsWebhooks: true } }, async (request) => {
      calls++
      // Long enough that concurrent copies overlap with this one.
      await new Promise((resolve) => setTimeout(resolve, 20))
      if (failures > 0) {
        failures--
        throw new Error('database down')
      }
      return { handled: request.webhookEvents.length }
    })
    const url = await app.listen({ port: 0, host: '127.0.0.1' })
    t.teardown(() => app.close())
    return { url: `${url}/webhooks/mailchannels` }
  }
  return { a: await start(), b: await start(), calls: () => calls, failNext: (n) => { failures = n }, prefix }
}

async function post (instance: Instance, d: SignedWebhook): Promise<{ status: number, body: Record<string, unknown>, retryAfter: string | null }> {
  const res = await fetch(instance.url, { method: 'POST', headers: d.headers, body: d.body })
  return { status: res.status, body: await res.json() as Record<string, unknown>, retryAfter: res.headers.get('retry-after') }
}

t.test('two instances sharing one Redis', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const admin: Redis = await redis.client(PATIENT)

  t.test('accepted once on A, a replay on B (and on A) is a duplicate', async (t) => {
    const c = await cluster(t, redis)
    const d = delivery()
    t.same(await post(c.a, d), { status: 200, body: { handled: 1 }, retryAfter: null })
    await waitFor(async () => await admin.get(replayKey(c.prefix, d)) === '1', HANG_MS)
    t.equal(await admin.get(replayKey(c.prefix, d)), '1', 'recorded in the shared store (the done mark)')
    const onB = await post(c.b, d)
    t.equal(onB.status, 200, 'a duplicate gets a 2xx so the sender stops retrying')
    t.same(onB.body, { duplicate: true })
    t.same((await post(c.a, d)).body, { duplicate: true })
    t.equal(c.calls(), 1, 'the handler ran once')
    t.same((await post(c.b, delivery())).body, { handled: 1 }, 'another delivery is handled')
    t.equal(c.calls(), 2)
  })

  t.test('100 concurrent identical deliveries across both instances: the handler runs exactly once', async (t) => {
    const c = await cluster(t, redis)
    const d = delivery()
    const replies = await Promise.all(Array.from({ length: 100 }, async (_v, i) => await post(i % 2 === 0 ? c.a : c.b, d)))
    t.equal(c.calls(), 1)
    t.ok(replies.every((r) => r.status === 200), 'every copy is answered 200')
    t.equal(replies.filter((r) => r.body.handled === 1).length, 1, 'one processed')
    t.equal(replies.filter((r) => r.body.duplicate === true).length, 99, '99 duplicates')
  })

  t.test('a handler failure releases the claim: the retry is processed, on either instance', async (t) => {
    const c = await cluster(t, redis)
    const d = delivery()
    c.failNext(1)
    const first = await post(c.a, d)
    t.equal(first.status, 500)
    t.equal(c.calls(), 1)
    // The claim is released when the response ends; the sender's retry comes later than that.
    t.ok(await waitFor(async () => await admin.exists(replayKey(c.prefix, d)) === 0, HANG_MS), 'claim released')
    const retry = await post(c.b, d)
    t.same(retry, { status: 200, body: { handled: 1 }, retryAfter: null }, 'the identical retry is processed')
    t.equal(c.calls(), 2)
    await waitFor(async () => await admin.get(replayKey(c.prefix, d)) === '1', HANG_MS)
    t.same((await post(c.a, d)).body, { duplicate: true }, 'and after success it is a duplicate')
    t.equal(c.calls(), 2)
  })

  t.test('Redis stopped mid-run: 503 + Retry-After without running the handler; recovers after a restart', async (t) => {
    const c = await cluster(t, redis)
    t.same((await post(c.a, delivery())).body, { handled: 1 })
    await redis.stop()
    const down = delivery()
    for (const instance of [c.a, c.b]) {
      const started = Date.now()
      const res = await post(instance, down)
      t.equal(res.status, 503)
      t.equal(res.body.code, 'replay_store_unavailable')
      t.match(res.retryAfter, /^[1-9][0-9]*$/, 'Retry-After in seconds')
      t.ok(Date.now() - started < HANG_MS, 'answered without waiting for Redis to come back')
    }
    t.equal(c.calls(), 1, 'the handler did not run while the store was down')

    await redis.start()
    // ioredis reconnects by itself; the sender's retry is then processed.
    let res: Awaited<ReturnType<typeof post>> | null = null
    t.ok(await waitFor(async () => {
      res = await post(c.b, down)
      return res.status === 200
    }, HANG_MS), 'recovered once Redis is back')
    t.same(res, { status: 200, body: { handled: 1 }, retryAfter: null })
    t.equal(c.calls(), 2)
    t.ok(await waitFor(async () => (await post(c.a, delivery())).status === 200, HANG_MS), 'the other instance recovers too')
    await waitFor(async () => await admin.get(replayKey(c.prefix, down)) === '1', HANG_MS)
    t.same((await post(c.a, down)).body, { duplicate: true })
  })
})

t.test('a Fastify and an Express instance share one Redis', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const admin: Redis = await redis.client(PATIENT)
  const c = await cluster(t, redis)
  let expressCalls = 0
  let failNext = false
  const app = express()
  const replay = new RedisReplayStore(await redis.client(PATIENT), { prefix: c.prefix, timeout: HANG_MS })
  app.post('/webhooks/mailchannels', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay }), (req, res, next) => {
    expressCalls++
    if (failNext) {
      failNext = false
      next(new Error('database down'))
      return
    }
    res.json({ handled: (req as unknown as WebhookRequest).webhookEvents?.length })
  })
  // The app's own error handler (Express' default one prints the stack and answers HTML).
  app.use((_err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => { res.status(500).json({ error: 'handler failed' }) })
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const onExpress: Instance = { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks/mailchannels` }

  const d = delivery()
  t.same(await post(onExpress, d), { status: 200, body: { handled: 1 }, retryAfter: null })
  await waitFor(async () => await admin.get(replayKey(c.prefix, d)) === '1', HANG_MS)
  t.same(await post(c.a, d), { status: 200, body: { duplicate: true }, retryAfter: null }, 'Fastify sees the Express delivery as a duplicate')
  t.equal(c.calls() + expressCalls, 1)

  const e = delivery()
  failNext = true
  t.equal((await post(onExpress, e)).status, 500)
  t.ok(await waitFor(async () => await admin.exists(replayKey(c.prefix, e)) === 0, HANG_MS), 'claim released')
  t.same((await post(c.b, e)).body, { handled: 1 }, 'the retry is processed by a Fastify instance')
  t.equal(c.calls() + expressCalls, 3)
})

t.test('no unhandled rejection', async (t) => {
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.same(unhandled, [])
})
