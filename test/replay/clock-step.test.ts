// A wall-clock step must not open a replay window (docs/security.md, "Clock steps"): replay-store
// entries expire on a monotonic clock (memory) or on Redis' own clock, while `created` is
// checked against the receiver's clock. If that clock steps back after a delivery was handled
// and its entry expired, the same delivery must not look fresh again. The receiver's `now`
// option stands in for the wall clock; the freshness window is 1 s so entries expire quickly (2 s).
// That clock only moves when the test steps it (the receiver adds the monotonic time elapsed
// since, never less), so whether a delivery is fresh depends on the steps, not on how fast a
// busy machine ran the test: the only wait is for the store entry to expire, a lower bound.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import express from 'express'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { mailchannelsWebhooks } from '../../src/express/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'
import type { ReplayStore } from '../../src/replay/types.js'
import { SteadyClock } from '../../src/receiver/clock.js'
import type { SignedWebhook } from '../../src/testing/index.js'
import { delivery, event, HANDLE, KEYS } from '../fastify/helpers/fixtures.js'
import { startRedisServer } from './helpers/redis-server.js'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** A wall clock that reads `start` (a whole second) until the test steps it. */
function steppableClock (): { now: () => number, start: number, stepTo: (ms: number) => void } {
  const start = Math.floor(Date.now() / 1000) * 1000
  let reading = start
  return { now: () => reading, start, stepTo: (ms) => { reading = ms } }
}

interface Receiver { send: (d: SignedWebhook) => Promise<{ status: number, body: Record<string, unknown> }>, runs: () => number }
const WINDOW = { maxAge: 1, clockSkew: 0 }

async function fastifyReceiver (t: Test, replay: ReplayStore, now: () => number): Promise<Receiver> {
  const app = Fastify()
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay, now, ...WINDOW })
  let runs = 0
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async () => { runs++; return { ok: true } })
  t.teardown(() => app.close())
  return {
    send: async (d) => { const res = await app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body }); return { status: res.statusCode, body: res.json() } },
    runs: () => runs,
  }
}

async function expressReceiver (t: Test, replay: ReplayStore, now: () => number): Promise<Receiver> {
  const app = express()
  let runs = 0
  app.post('/wh', mailchannelsWebhooks({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay, now, ...WINDOW }), (_req, res) => { runs++; res.json({ ok: true }) })
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/wh`
  return {
    send: async (d) => { const res = await fetch(url, { method: 'POST', headers: d.headers, body: d.body }); return { status: res.status, body: await res.json() as Record<string, unknown> } },
    runs: () => runs,
  }
}

t.test('a wall-clock step back after the store forgot a delivery does not make it fresh again', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  let n = 0
  const cases: Array<[string, (t: Test, replay: ReplayStore, now: () => number) => Promise<Receiver>, () => Promise<ReplayStore>]> = []
  for (const [rn, build] of [['fastify', fastifyReceiver], ['express', expressReceiver]] as const) {
    cases.push([`${rn} memory`, build, async () => new MemoryReplayStore()])
    // Command and store timeouts for hangs only (30 s): this is about clocks, not a slow Redis.
    cases.push([`${rn} redis`, build, async () => new RedisReplayStore(await redis.client({ commandTimeout: 30_000 }), { prefix: `clock-${n++}:`, timeout: 30_000 })])
  }
  // The four run at once: each waits for its store entry to expire.
  await Promise.all(cases.map(async ([name, build, store]) => {
    const clock = steppableClock()
    const r = await build(t, await store(), clock.now)
    // Signed at the receiver's first reading of its clock: 0 s old when it is checked.
    const d = delivery({ created: clock.start / 1000, events: [event({ request_id: `clock-${name}` })] })
    t.same(await r.send(d), { status: 200, body: { ok: true } }, `${name}: handled`)
    // The store keeps the entry for the window and a second (2 s); the clock counts whole seconds.
    // Real time, at least that long: the store expires entries on its own clock.
    await sleep(2200)
    // The clock steps back: `created` is 0.5 s old again, and the store entry has expired.
    clock.stepTo(clock.start + 500)
    const replayed = await r.send(d)
    t.equal(replayed.status, 401, `${name}: the copy is refused`)
    t.equal(replayed.body.code, 'signature_expired', `${name}: as expired (the receiver's clock did not go back)`)
    t.equal(r.runs(), 1, `${name}: the handler ran once`)
    // A step forward is taken at once: a delivery signed at the new time is accepted.
    clock.stepTo(clock.start + 3_600_000)
    const later = delivery({ created: (clock.start + 3_600_000) / 1000, events: [event({ request_id: `clock-later-${name}` })] })
    t.equal((await r.send(later)).status, 200, `${name}: a step forward is followed`)
  }))
})

t.test('SteadyClock: never runs backwards, follows forward steps and a constant clock advances with elapsed time', async (t) => {
  let wall = 1_000_000
  const c = new SteadyClock(() => wall)
  t.equal(c.now(), 1_000_000)
  wall += 60_000
  t.equal(c.now(), 1_060_000, 'a forward step is taken')
  wall -= 600_000
  const held = c.now()
  t.ok(held >= 1_060_000, `a step back is held (${held})`)
  await sleep(20)
  t.ok(c.now() >= held + 15, 'and keeps advancing with monotonic time')
  t.ok(Math.abs(new SteadyClock(undefined).now() - Date.now()) < 50, 'the default is the wall clock')
})
