import t from 'tap'
import { Redis } from 'ioredis'
import { ReplayStoreError, type RedisClientLike } from '../../src/index.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'
import { deliveryId } from '../../src/replay/types.js'
import { startRedisServer } from './helpers/redis-server.js'
import { closedPort } from '../helpers/closed-port.js'

const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)
t.teardown(() => {
  process.off('unhandledRejection', onUnhandled)
})

const id = (n: number): string => { const sig = Buffer.alloc(64, 7); sig.writeUInt32BE(n); return deliveryId(sig) }
/** The Redis key of a delivery's claim: the prefix and its delivery id, as before (a one-key claim of the claim store behind). */
const key = (prefix: string, n: number): string => prefix + id(n)

t.test('against a real redis-server', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client()
  const admin = await redis.client()
  // An ioredis client fits the structural client type as is.
  const asLike: RedisClientLike = client
  const store = new RedisReplayStore(asLike)

  t.test('claim, complete and release follow the delivery lifecycle', async (t) => {
    t.equal(await store.claim(id(1), 360), 'claimed')
    t.equal(await store.claim(id(1), 360), 'processing')
    await store.complete(id(1), 360)
    t.equal(await store.claim(id(1), 360), 'done')
    await store.release(id(1))
    t.equal(await store.claim(id(1), 360), 'done', 'release never forgets a completed delivery')

    t.equal(await store.claim(id(2), 360), 'claimed')
    await store.release(id(2))
    t.equal(await store.claim(id(2), 360), 'claimed', 'a released claim is handled again')
  })

  t.test('keys live under the prefix with the given TTL', async (t) => {
    const prefixed = new RedisReplayStore(client, { prefix: 'tenant-a:' })
    t.equal(await prefixed.claim(id(3), 360), 'claimed')
    t.match(await admin.get(key('tenant-a:', 3)), /^c:[\w.-]+$/, 'a claim, with its token')
    const ttl = await admin.ttl(key('tenant-a:', 3))
    t.ok(ttl > 350 && ttl <= 360, `TTL ${ttl}`)
    await prefixed.complete(id(3), 300)
    t.equal(await admin.get(key('tenant-a:', 3)), '1', 'the done mark')
    t.ok(await admin.ttl(key('tenant-a:', 3)) <= 300)
    t.equal(await store.claim(id(3), 360), 'claimed', 'another prefix is another namespace')
    t.match(await admin.get(key('mailchannels-webhooks:replay:', 3)), /^c:/, 'default prefix')
  })

  t.test('entries expire after their TTL', async (t) => {
    t.equal(await store.claim(id(4), 1), 'claimed')
    await store.complete(id(4), 1)
    await new Promise((resolve) => setTimeout(resolve, 1100))
    t.equal(await store.claim(id(4), 1), 'claimed')
  })

  t.test('100 concurrent claims from two clients: exactly one is claimed', async (t) => {
    const other = new RedisReplayStore(await redis.client())
    const states = await Promise.all(Array.from({ length: 100 }, async (_v, i) => await (i % 2 === 0 ? store : other).claim(id(5), 360)))
    t.equal(states.filter((s) => s === 'claimed').length, 1)
    t.equal(states.filter((s) => s === 'processing').length, 99)
  })

  t.test('works when the script cache was flushed (NOSCRIPT is handled)', async (t) => {
    await admin.script('FLUSH')
    t.equal(await store.claim(id(6), 360), 'claimed')
    await admin.script('FLUSH')
    await store.release(id(6))
    t.equal(await store.claim(id(6), 360), 'claimed')
  })

  t.test('an unexpected value under the key fails closed', async (t) => {
    await admin.set(key('mailchannels-webhooks:replay:', 8), 'something-else')
    await t.rejects(store.claim(id(8), 360), { name: 'ReplayStoreError', operation: 'claim' })
  })

  t.test('a rolling upgrade: what the previous version wrote under a delivery still reads as it did', async (t) => {
    const prefix = 'upgrade:'
    const upgraded = new RedisReplayStore(client, { prefix })
    await admin.set(prefix + id(60), 'done', 'EX', 60)
    await admin.set(prefix + id(61), 'processing:previous-token|,', 'EX', 60)
    await admin.set(prefix + id(62), 'cancelled|,previous-token,', 'EX', 60)
    t.equal(await upgraded.claim(id(60), 360), 'done', 'its done delivery is done')
    t.equal(await upgraded.claim(id(61), 360), 'processing', 'its live claim holds')
    t.equal(await upgraded.claim(id(62), 360), 'claimed', 'its cancelled claim leaves the delivery free')
    await upgraded.release(id(62))
    t.equal(await upgraded.claim(id(62), 360), 'claimed', 'and released again')
  })

  t.test('waitForReplicas on a Redis without replicas: the claim fails with ReplayStoreError and never counts', async (t) => {
    const durable = new RedisReplayStore(client, { prefix: 'durable:', waitForReplicas: 1, waitTimeout: 50 })
    const err = await durable.claim(id(50), 360).then(() => null, (e: unknown) => e)
    t.ok(err instanceof ReplayStoreError, String(err))
    t.match(String((err as Error).message), /Only 0 of 1 Redis replicas acknowledged claim within 50 ms/)
    const plain = new RedisReplayStore(client, { prefix: 'durable:' })
    let state = ''
    for (let i = 0; i < 40 && state !== 'claimed'; i++) {
      state = await plain.claim(id(50), 360)
      if (state !== 'claimed') await new Promise((resolve) => setTimeout(resolve, 50))
    }
    t.equal(state, 'claimed', 'the failed claim was cancelled: the retry claims the delivery')
    await t.rejects(durable.complete(id(50), 360), { name: 'ReplayStoreError', message: /replicas acknowledged complete/ })
  })

  t.test('server down: every call rejects with ReplayStoreError, quickly; then recovers', async (t) => {
    t.equal(await store.claim(id(10), 360), 'claimed', 'a claim held when Redis goes away')
    await redis.stop()
    const started = Date.now()
    for (const call of [() => store.claim(id(9), 360), () => store.complete(id(9), 360), () => store.release(id(10))]) {
      const err = await call().then(() => null, (e: unknown) => e)
      t.ok(err instanceof ReplayStoreError, `rejected with ReplayStoreError: ${String(err)}`)
    }
    t.ok(Date.now() - started < 3000, 'no call hangs')
    await redis.start()
    const deadline = Date.now() + 5000
    let state: string | null = null
    while (Date.now() < deadline && state === null) {
      state = await store.claim(id(11), 360).catch(() => null)
      if (state === null) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    t.equal(state, 'claimed', 'the same client works again once Redis is back')
  })
})

t.test('a client that never answers: the timeout guard rejects', async (t) => {
  const silent: RedisClientLike = {
    get: async () => await new Promise(() => {}),
    del: async () => await new Promise(() => {}),
    eval: async () => await new Promise(() => {}),
    evalsha: async () => await new Promise(() => {}),
  }
  const store = new RedisReplayStore(silent, { timeout: 50 })
  await t.rejects(store.claim(id(1), 360), { name: 'ReplayStoreError', operation: 'claim', message: /within 50 ms/ })
})

t.test('an offline client with the default ioredis options: claims reject, never hang', async (t) => {
  // Nothing listens on this port; the offline queue is on (ioredis' default).
  const port = await closedPort()
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => 1000 })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  const store = new RedisReplayStore(client, { timeout: 200 })
  await t.rejects(store.claim(id(1), 360), { name: 'ReplayStoreError' })
})

t.test('options are validated', async (t) => {
  t.throws(() => new RedisReplayStore({} as unknown as RedisClientLike), { name: 'TypeError', message: /ioredis client/ })
  t.throws(() => new RedisReplayStore(null as unknown as RedisClientLike), { name: 'TypeError', message: /ioredis client/ })
  const fake = { get: () => {}, mget: () => {}, del: () => {}, eval: () => {}, evalsha: () => {} } as unknown as RedisClientLike
  t.throws(() => new RedisReplayStore(fake, { prefix: '' }), { name: 'TypeError', message: /prefix/ })
  t.throws(() => new RedisReplayStore(fake, { timeout: 0 }), { name: 'TypeError', message: /timeout/ })
  t.throws(() => new RedisReplayStore(fake, { waitForReplicas: 1 }), { name: 'TypeError', message: /waitForReplicas needs an ioredis client with pipeline/ })
  const piped = { ...fake as object, pipeline: () => {} } as unknown as RedisClientLike
  t.throws(() => new RedisReplayStore(piped, { waitForReplicas: -1 }), { name: 'TypeError', message: /waitForReplicas must be a non-negative integer/ })
  t.throws(() => new RedisReplayStore(piped, { waitForReplicas: 1.5 }), { name: 'TypeError', message: /waitForReplicas/ })
  t.throws(() => new RedisReplayStore(piped, { waitForReplicas: 1, waitTimeout: 1000 }), { name: 'TypeError', message: /waitTimeout must be .* below timeout \(1000\)/ })
  t.throws(() => new RedisReplayStore(piped, { waitForReplicas: 1, waitTimeout: 0 }), { name: 'TypeError', message: /waitTimeout/ })
  t.doesNotThrow(() => new RedisReplayStore(piped, { waitForReplicas: 1, waitTimeout: 999 }))
  t.doesNotThrow(() => new RedisReplayStore(piped, { waitForReplicas: 2, timeout: 100 }), 'the waitTimeout default stays below a short timeout')
  const store = new RedisReplayStore(fake)
  await t.rejects(store.claim('x', 0), { name: 'TypeError', message: /ttlSeconds/ })
})

t.test('no unhandled rejection', async (t) => {
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.same(unhandled, [])
})
