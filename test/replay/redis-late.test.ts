// A claim that timed out must not take effect later (docs/security.md, "Redis outages"). ioredis
// queues commands while disconnected (its default offline queue) and sends them on reconnect;
// a frozen Redis executes what it received once it wakes. Either way a claim could run after
// the receiver already answered 503, leave the delivery "processing" for the whole window, and
// turn the sender's identical retry into a `200 duplicate` that is never handled.
// Real redis-server: stopped and restarted, or frozen with SIGSTOP.
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import t from 'tap'
import plugin from '../../src/fastify/index.js'
import { ReplayStoreError, type RedisClientLike } from '../../src/index.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'
import { deliveryId } from '../../src/replay/types.js'
import { delivery, event, HANDLE, KEYS } from '../fastify/helpers/fixtures.js'
import { startRedisServer, waitFor } from './helpers/redis-server.js'

const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)
t.teardown(() => { process.off('unhandledRejection', onUnhandled) })

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
const id = (n: number): string => deliveryId(Buffer.alloc(64, n))
/** The Redis key of a delivery's claim: the prefix and its delivery id, as before (a one-key claim of the claim store behind). */
const key = (prefix: string, n: number): string => prefix + id(n)

t.test('with the default offline queue: a claim sent while Redis is down never runs late', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  // ioredis' defaults: offline queue on, 20 retries per request, reconnect with backoff.
  const client = new Redis({ host: '127.0.0.1', port: redis.port, retryStrategy: () => 50 })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  await waitFor(async () => client.status === 'ready', 3000)
  const admin = await redis.client()
  const store = new RedisReplayStore(client, { prefix: 'late-a:', timeout: 200 })

  await redis.stop()
  await waitFor(async () => client.status !== 'ready', 3000)
  const err = await store.claim(id(1), 60).then(() => null, (e: unknown) => e)
  t.ok(err instanceof ReplayStoreError, `the claim fails: ${String(err)}`)
  await redis.start()
  t.ok(await waitFor(async () => client.status === 'ready', 5000), 'the client reconnects')
  await sleep(200)
  t.equal(await admin.get(key('late-a:', 1)).catch(() => 'unreadable'), null, 'nothing was written after the failure')
  t.equal(await store.claim(id(1), 60), 'claimed', 'the retry claims the delivery')
})

t.test('a frozen Redis: a claim that timed out is cancelled, whatever order things run in', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client({ commandTimeout: undefined })
  const admin = await redis.client()
  const store = new RedisReplayStore(client, { prefix: 'late-b:', timeout: 150 })
  t.equal(await store.claim(id(0), 60), 'claimed', 'warm: the script is loaded')

  redis.pause()
  const err = await store.claim(id(2), 60).then(() => null, (e: unknown) => e)
  t.ok(err instanceof ReplayStoreError, `the claim times out: ${String(err)}`)
  redis.resume()
  // The frozen claim now runs, then its cancellation (or the other way round).
  await sleep(300)
  t.equal(await store.claim(id(2), 60), 'claimed', 'the retry claims the delivery: the late claim took no effect')
  await store.complete(id(2), 60)
  t.equal(await admin.get(key('late-b:', 2)), '1', 'the done mark')
  t.equal(await store.claim(id(2), 60), 'done', 'and a completed delivery stays done')
})

t.test('through the receiver: 503 while Redis is frozen, then the sender\'s identical retry is handled, not a duplicate', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client({ commandTimeout: undefined })
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: new RedisReplayStore(client, { prefix: 'late-c:', timeout: 150 }) })
  let runs = 0
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async () => { runs++; return { ok: true } })
  const warm = delivery({ events: [event({ request_id: 'warm' })] })
  t.equal((await app.inject({ method: 'POST', url: '/wh', headers: warm.headers, payload: warm.body })).statusCode, 200)

  const d = delivery({ events: [event({ request_id: 'late-c' })] })
  redis.pause()
  const first = await app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  redis.resume()
  t.equal(first.statusCode, 503)
  t.equal(first.json().code, 'replay_store_unavailable')
  await sleep(300)
  const retry = await app.inject({ method: 'POST', url: '/wh', headers: d.headers, payload: d.body })
  t.same(retry.json(), { ok: true }, 'the retry is handled')
  t.equal(runs, 2)
})

t.test('a claim that reaches Redis after its cancellation (reordered on the way) takes no effect', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const real = await redis.client()
  const admin = await redis.client()
  // A client whose first claim script is delayed on the way (a slow path), everything else goes straight.
  let delayNext = true
  const delayed: RedisClientLike = {
    get: async (k) => await real.get(k),
    del: async (...k) => await real.del(...k),
    eval: async (script, n, ...args) => await real.eval(script, n, ...args),
    evalsha: async (sha, n, ...args) => {
      if (delayNext && String(args[1]) === '60000') {
        delayNext = false
        await sleep(300)
      }
      return await real.evalsha(sha, n, ...args)
    },
  }
  const store = new RedisReplayStore(delayed, { prefix: 'late-e:', timeout: 100 })
  t.equal(await new RedisReplayStore(real, { prefix: 'late-e:' }).claim(id(9), 5), 'claimed', 'warm: the scripts are loaded')
  const err = await store.claim(id(4), 60).then(() => null, (e: unknown) => e)
  t.ok(err instanceof ReplayStoreError, 'the claim times out')
  await sleep(50)
  t.match(await admin.get(key('late-e:', 4)), /^c:~,[\w.-]+,$/, 'the cancellation arrived first and left a tombstone')
  await sleep(400)
  t.match(await admin.get(key('late-e:', 4)), /^c:~,/, 'the late claim found it and did nothing')
  t.equal(await store.claim(id(4), 30), 'claimed', 'a new claim of the delivery succeeds')
  await store.release(id(4))
  t.match(await admin.get(key('late-e:', 4)), /^c:~,/, 'its release keeps the tombstone')
  t.equal(await store.claim(id(4), 30), 'claimed')
})

t.test('release and complete act on their own claim only (a claim token)', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const a = new RedisReplayStore(await redis.client(), { prefix: 'late-d:' })
  const b = new RedisReplayStore(await redis.client(), { prefix: 'late-d:' })
  t.equal(await a.claim(id(3), 1), 'claimed')
  await sleep(1100)
  // A's claim expired (a handler slower than the window); B claims the same delivery.
  t.equal(await b.claim(id(3), 60), 'claimed')
  await a.release(id(3))
  t.equal(await b.claim(id(3), 60), 'processing', "A's late release did not drop B's claim")
  await b.release(id(3))
  t.equal(await a.claim(id(3), 60), 'claimed', "B's own release works")
})

t.test('no unhandled rejection', async (t) => {
  await sleep(50)
  t.same(unhandled, [])
})
