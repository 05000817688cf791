import Fastify, { type FastifyReply } from 'fastify'
import pino from 'pino'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import type { ReplayStore } from '../../src/replay/types.js'
import { delivery, flakyOutcomeStore, HANDLE, KEYS, logCapture } from './helpers/fixtures.js'

type Behaviour = (reply: FastifyReply) => Promise<unknown>

async function app (t: Test, replay?: ReplayStore, behaviour?: () => Behaviour) {
  const logs = logCapture()
  const fastify = Fastify({ loggerInstance: pino({ level: 'info' }, logs.stream) })
  await fastify.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], ...(replay === undefined ? {} : { replay }) })
  let calls = 0
  fastify.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request, reply) => {
    calls++
    if (behaviour !== undefined) return behaviour()(reply)
    return { received: request.webhookEvents.length }
  })
  t.teardown(() => fastify.close())
  return { fastify, logs, calls: () => calls }
}

t.test('B1: an exact resend is answered 200 duplicate; the handler ran once (default MemoryReplayStore)', async (t) => {
  const { fastify, calls, logs } = await app(t)
  const d = delivery()
  const first = await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  t.equal(first.statusCode, 200)
  t.same(first.json(), { received: 1 })
  for (let i = 0; i < 3; i++) {
    const again = await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
    t.equal(again.statusCode, 200)
    t.same(again.json(), { duplicate: true })
  }
  t.equal(calls(), 1)
  t.ok(logs.lines().some((l) => l.level === 30 && /duplicate/.test(String(l.msg))), 'duplicates logged at info')
  // The same events signed again (a new created time) are a new delivery.
  const resigned = delivery({ created: Math.floor(Date.now() / 1000) - 5 })
  t.equal((await fastify.inject({ method: 'POST', url: '/wh', headers: resigned.headers, payload: resigned.body })).json().received, 1)
  t.equal(calls(), 2)
})

t.test('B2: two concurrent identical deliveries run the handler once', async (t) => {
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  const { fastify, calls } = await app(t, new MemoryReplayStore(), () => async () => { await gate; return { ok: true } })
  const d = delivery()
  const a = fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  const b = fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  const second = await Promise.race([a, b])
  t.same(second.json(), { duplicate: true }, 'the second is a duplicate while the first is processing')
  release()
  const results = await Promise.all([a, b])
  t.same(results.map((r) => r.statusCode), [200, 200])
  t.equal(calls(), 1)
})

t.test('B11: the handler throws -> 500; the retry is processed', async (t) => {
  let fail = true
  const { fastify, calls } = await app(t, new MemoryReplayStore(), () => async () => {
    if (fail) throw new Error('database down')
    return { ok: true }
  })
  const d = delivery()
  const first = await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  t.equal(first.statusCode, 500)
  t.notMatch(first.body, /duplicate/)
  fail = false
  await new Promise((resolve) => setImmediate(resolve))
  const retry = await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  t.equal(retry.statusCode, 200)
  t.same(retry.json(), { ok: true })
  t.equal(calls(), 2)
  const third = await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  t.same(third.json(), { duplicate: true })
  t.equal(calls(), 2)
})

t.test('a handler reply >= 500 (or any non-2xx) releases the claim', async (t) => {
  let status = 503
  const { fastify, calls } = await app(t, new MemoryReplayStore(), () => async (reply) => reply.code(status).send({ status }))
  const d = delivery()
  t.equal((await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })).statusCode, 503)
  status = 422
  await new Promise((resolve) => setImmediate(resolve))
  t.equal((await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })).statusCode, 422)
  status = 204
  await new Promise((resolve) => setImmediate(resolve))
  t.equal((await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })).statusCode, 204)
  await new Promise((resolve) => setImmediate(resolve))
  t.same((await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })).json(), { duplicate: true })
  t.equal(calls(), 3)
})

t.test('replay: false disables replay protection', async (t) => {
  const fastify = Fastify()
  await fastify.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false })
  let calls = 0
  fastify.post('/wh', { config: { mailchannelsWebhooks: true } }, async () => { calls++; return {} })
  t.teardown(() => fastify.close())
  const d = delivery()
  for (let i = 0; i < 2; i++) t.equal((await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })).statusCode, 200)
  t.equal(calls, 2)
})

t.test('complete/release failures are logged, never unhandled rejections', async (t) => {
  const store = flakyOutcomeStore()
  let fail = false
  const { fastify, logs } = await app(t, store, () => async () => { if (fail) throw new Error('x'); return {} })
  const d = delivery()
  t.equal((await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })).statusCode, 200)
  fail = true
  t.equal((await fastify.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })).statusCode, 500)
  await new Promise((resolve) => setTimeout(resolve, 20))
  t.same(store.calls, ['claim', 'complete', 'claim', 'release'])
  const errors = logs.lines().filter((l) => l.level === 50 && /replay store/.test(String(l.msg)))
  t.equal(errors.length, 2)
})
