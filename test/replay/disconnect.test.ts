// Replay by disconnect (docs/security.md, "Disconnects"): a
// captured delivery sent again and again, each copy's TCP connection reset at some point,
// must reach the handler at most once. The claim is settled by the handler's own outcome
// (2xx: done; throw or 5xx: released), never by the connection. Real Fastify and Express
// servers on 127.0.0.1, raw sockets reset with RST, the memory store and a real Redis.
// Every wait is for a condition (a handler entered, an answer arrived, the outcomes recorded),
// with deadlines for hangs only, so a machine busy with other work does not change a result.
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import express from 'express'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { mailchannelsWebhooks } from '../../src/express/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'
import type { DeliveryReplayStore } from '../../src/replay/types.js'
import type { SignedWebhook } from '../../src/testing/index.js'
import { delivery, event, HANDLE, KEYS } from '../fastify/helpers/fixtures.js'
import { until, within } from '../helpers/wait.js'
import { startRedisServer, type RedisServer } from './helpers/redis-server.js'

const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)
t.teardown(() => { process.off('unhandledRejection', onUnhandled) })

/** How long the handler works: long enough for a reset to land while it runs. */
const HANDLER_MS = 40
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
/** How long a step may take before it is taken for hung: far beyond what any takes, even on a busy machine. */
const HANG_MS = 30_000
/** Resolves when `p` does, or after HANG_MS (the assertions after it then say what was missing). */
const orHang = async (p: Promise<unknown>): Promise<void> => { await within(p, HANG_MS) }

type Outcome = 'ok' | 'throw' | '503'

interface Receiver {
  port: number
  /** Handler runs (entered) and finished runs. */
  runs: () => number
  finished: () => number
  /** What the next handler runs do. */
  behave: (outcome: Outcome) => void
}

let serial = 0
function freshDelivery (): SignedWebhook {
  serial++
  return delivery({ events: [event({ request_id: `disconnect-${serial}` })] })
}

async function fastifyReceiver (t: Test, replay: DeliveryReplayStore): Promise<Receiver> {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay })
  let runs = 0
  let finished = 0
  let outcome: Outcome = 'ok'
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request, reply) => {
    runs++
    const mine = outcome
    await sleep(HANDLER_MS)
    finished++
    if (mine === 'throw') throw new Error('database down')
    if (mine === '503') return reply.code(503).send({ retry: true })
    return { received: request.webhookEvents.length }
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { port: (app.server.address() as AddressInfo).port, runs: () => runs, finished: () => finished, behave: (o) => { outcome = o } }
}

async function expressReceiver (t: Test, replay: DeliveryReplayStore): Promise<Receiver> {
  const app = express()
  let runs = 0
  let finished = 0
  let outcome: Outcome = 'ok'
  app.post('/wh', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay }), (req, res, next) => {
    runs++
    const mine = outcome
    setTimeout(() => {
      finished++
      if (mine === 'throw') next(new Error('database down'))
      else if (mine === '503') res.status(503).json({ retry: true })
      else res.json({ received: req.webhookEvents!.length })
    }, HANDLER_MS)
  })
  app.use((_err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => { res.status(500).json({ error: 'handler failed' }) })
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { port: (server.address() as AddressInfo).port, runs: () => runs, finished: () => finished, behave: (o) => { outcome = o } }
}

/** Where the sender resets the connection. */
type ResetPoint = 'during-body' | 'after-body' | 'during-handler' | 'after-handler'
const POINTS: ResetPoint[] = ['during-body', 'after-body', 'during-handler', 'after-handler']

function head (port: number, d: SignedWebhook): string {
  return `POST /wh HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n` +
    Object.entries(d.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') +
    `content-length: ${d.body.length}\r\n\r\n`
}

/** Sends one copy on a raw socket and resets the connection (RST) at `point`. */
async function sendAndReset (r: Receiver, d: SignedWebhook, point: ResetPoint): Promise<void> {
  const socket = net.connect(r.port, '127.0.0.1')
  socket.on('error', () => {})
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  let answered = false
  const gotData = new Promise<void>((resolve) => socket.once('data', () => { answered = true; resolve() }))
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
  const before = r.runs()
  if (point === 'during-body') {
    socket.write(head(r.port, d) + d.body.subarray(0, d.body.length >> 1).toString('latin1'))
    await sleep(10)
  } else {
    socket.write(head(r.port, d) + d.body.toString('latin1'))
    if (point === 'during-handler') {
      // Until this copy entered the handler (a duplicate is answered at once instead).
      const deadline = Date.now() + HANG_MS
      while (r.runs() === before && !answered && Date.now() < deadline) await Promise.race([sleep(2), gotData])
    } else if (point === 'after-handler') {
      await orHang(gotData)
    }
  }
  if (!socket.destroyed) socket.resetAndDestroy()
  await closed
}

async function post (r: Receiver, d: SignedWebhook): Promise<{ status: number, body: Record<string, unknown> }> {
  const res = await fetch(`http://127.0.0.1:${r.port}/wh`, { method: 'POST', headers: d.headers, body: d.body })
  return { status: res.status, body: await res.json() as Record<string, unknown> }
}

/**
 * Redis store calls (claim, complete, release) not answered yet. The memory store settles a claim
 * synchronously, as the handler answers (the adapters' onSend / res.end); a Redis store takes a
 * round trip more, counted here.
 */
let storeCalls = 0
function counted (store: DeliveryReplayStore): DeliveryReplayStore {
  const count = async <T>(call: () => Promise<T>): Promise<T> => {
    storeCalls++
    try {
      return await call()
    } finally {
      storeCalls--
    }
  }
  return {
    claim: async (id, ttl) => await count(async () => await store.claim(id, ttl)),
    complete: async (id, ttl) => { await count(async () => { await store.complete(id, ttl) }) },
    release: async (id) => { await count(async () => { await store.release(id) }) },
  }
}

/** Waits until every handler run that started has finished and its outcome is recorded in the store. */
async function settled (r: Receiver): Promise<void> {
  await until(() => r.finished() === r.runs() && storeCalls === 0, 'the handler runs to finish and the store to record their outcomes')
}

type Build = (t: Test, replay: DeliveryReplayStore) => Promise<Receiver>
const RECEIVERS: Array<[string, Build]> = [['fastify', fastifyReceiver], ['express', expressReceiver]]

let redis: RedisServer | undefined
async function stores (t: Test): Promise<Array<[string, () => Promise<DeliveryReplayStore>]>> {
  redis ??= await startRedisServer()
  const server = redis
  return [
    ['memory', async () => new MemoryReplayStore()],
    // Timeouts for hangs only: the claims here are about resets, not about a slow Redis.
    ['redis', async () => counted(new RedisReplayStore(await server.client({ commandTimeout: HANG_MS }), { prefix: `disconnect-${serial++}:`, timeout: HANG_MS }))],
  ]
}
t.teardown(async () => { await redis?.close() })

t.test('a delivery whose sender resets the connection is handled at most once, across many copies', async (t) => {
  for (const [storeName, makeStore] of await stores(t)) {
    for (const [receiverName, build] of RECEIVERS) {
      for (const point of POINTS) {
        for (const mode of ['sequential', 'concurrent'] as const) {
          const r = await build(t, await makeStore())
          const d = freshDelivery()
          if (mode === 'sequential') {
            for (let i = 0; i < 4; i++) await sendAndReset(r, d, point)
          } else {
            await Promise.all(Array.from({ length: 8 }, async () => await sendAndReset(r, d, point)))
          }
          await settled(r)
          const clean = await post(r, d)
          await settled(r)
          const again = await post(r, d)
          const name = `${storeName} ${receiverName} ${point} ${mode}`
          t.equal(r.runs(), 1, `${name}: the handler ran exactly once (copies reset, then two clean copies)`)
          t.equal(clean.status, 200, `${name}: the clean copy is answered 200 (${JSON.stringify(clean.body)})`)
          t.same(again, { status: 200, body: { duplicate: true } }, `${name}: afterwards the delivery is done`)
        }
      }
    }
  }
})

t.test('a handler failure (throw or 5xx) still lets the retry through, also when the client reset during it', async (t) => {
  for (const [storeName, makeStore] of await stores(t)) {
    for (const [receiverName, build] of RECEIVERS) {
      for (const failure of ['throw', '503'] as const) {
        for (const reset of [false, true]) {
          const r = await build(t, await makeStore())
          const d = freshDelivery()
          r.behave(failure)
          if (reset) await sendAndReset(r, d, 'during-handler')
          else t.equal((await post(r, d)).status, failure === 'throw' ? 500 : 503)
          await settled(r)
          r.behave('ok')
          const retry = await post(r, d)
          const name = `${storeName} ${receiverName} ${failure}${reset ? ' after a reset' : ''}`
          t.same(retry, { status: 200, body: { received: 1 } }, `${name}: the retry is handled`)
          t.equal(r.runs(), 2, `${name}: two handler runs`)
          await settled(r)
          t.same(await post(r, d), { status: 200, body: { duplicate: true } }, `${name}: then done`)
        }
      }
    }
  }
})

/**
 * A real store whose first claim answers only when the test says so (a slow Redis), so a client
 * can leave during the claim: `claiming` resolves once that claim was made, `answer()` lets it return.
 */
function heldClaim (store: DeliveryReplayStore): { store: DeliveryReplayStore, claiming: Promise<void>, answer: () => void } {
  let claimed!: () => void
  const claiming = new Promise<void>((resolve) => { claimed = resolve })
  let answer!: () => void
  const answered = new Promise<void>((resolve) => { answer = resolve })
  let first = true
  return {
    claiming,
    answer,
    store: {
      claim: async (id, ttl) => {
        const state = await store.claim(id, ttl)
        if (first) {
          first = false
          claimed()
          await answered
        }
        return state
      },
      complete: async (id, ttl) => { await store.complete(id, ttl) },
      release: async (id) => { await store.release(id) },
    },
  }
}

t.test('a client that leaves during the claim: the claimed delivery is still handled, a copy meanwhile is a duplicate, nothing is released', async (t) => {
  for (const [storeName, makeStore] of await stores(t)) {
    for (const [receiverName, build] of RECEIVERS) {
      const held = heldClaim(await makeStore())
      const r = await build(t, held.store)
      const d = freshDelivery()
      const socket = net.connect(r.port, '127.0.0.1')
      socket.on('error', () => {})
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
      socket.write(head(r.port, d) + d.body.toString('latin1'))
      // The body was read and verified, and the claim made; it has not answered yet.
      await orHang(held.claiming)
      socket.resetAndDestroy()
      await closed
      const meanwhile = await post(r, d)
      held.answer()
      const name = `${storeName} ${receiverName}`
      await until(() => r.runs() > 0, `${name}: the handler to run for the claimed delivery`).catch(() => {})
      await settled(r)
      t.same(meanwhile, { status: 200, body: { duplicate: true } }, `${name}: a copy during the claim is a duplicate`)
      t.equal(r.runs(), 1, `${name}: the delivery whose client left was handled (not released, not lost)`)
      t.same(await post(r, d), { status: 200, body: { duplicate: true } }, `${name}: and is done`)
      t.equal(r.runs(), 1)
    }
  }
})

t.test('no unhandled rejection', async (t) => {
  await sleep(50)
  t.same(unhandled, [])
})
