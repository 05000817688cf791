import t, { type Test } from 'tap'
import {
  MemorySeenEventsStore, RedisSeenEventsStore, ReplayStoreError, claimUnseen, eventFingerprint, filterUnseen, markSeen,
  type SeenEventsStore, type WebhookEvent,
} from '../../src/index.js'
import { toEvent } from '../../src/events/parse-events.js'
import { startRedisServer } from './helpers/redis-server.js'

const ev = (n: number): WebhookEvent => toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000 + n, request_id: `req-${n}` }, 0)

async function behavesAsASeenStore (t: Test, make: () => Promise<SeenEventsStore>): Promise<void> {
  t.test('a resend: handled events are skipped, new ones kept in order', async (t) => {
    const store = await make()
    const first = [ev(1), ev(2), ev(3)]
    t.same(await filterUnseen(first, store), first, 'nothing seen yet')
    await markSeen(first, store)
    // The service re-signs a resend: a new delivery, the same events (fresh objects), plus a new one.
    const resend = [ev(4), ev(2), ev(1), ev(5)]
    t.same(await filterUnseen(resend, store), [ev(4), ev(5)])
  })

  t.test('claimUnseen: of concurrent resends each event is claimed once', async (t) => {
    const store = await make()
    const batch = [ev(10), ev(11), ev(12)]
    const results = await Promise.all(Array.from({ length: 20 }, async () => await claimUnseen(batch, store)))
    t.same(results.flat().map(eventFingerprint).sort(), batch.map(eventFingerprint).sort(), 'every event exactly once over all callers')
    t.same(await claimUnseen(batch, store), [])
    await store.delete([eventFingerprint(ev(11))])
    t.same(await claimUnseen(batch, store), [ev(11)], 'a deleted fingerprint (processing failed) is handled again')
  })

  t.test('add reports which fingerprints were new; duplicates within a batch count once', async (t) => {
    const store = await make()
    t.same(await store.add(['a', 'b', 'a']), [true, true, false])
    t.same(await store.add(['b', 'c']), [false, true])
    t.same(await store.has(['a', 'b', 'c', 'd']), [true, true, true, false])
    t.same(await store.has([]), [])
    t.same(await store.add([]), [])
  })
}

t.test('MemorySeenEventsStore', async (t) => {
  await behavesAsASeenStore(t, async () => new MemorySeenEventsStore())

  t.test('bounded and expiring', async (t) => {
    const store = new MemorySeenEventsStore({ max: 100, ttl: 1 })
    await store.add(Array.from({ length: 1000 }, (_v, i) => `fp-${i}`))
    t.equal(store.size, 100)
    t.same(await store.has(['fp-999', 'fp-0']), [true, false])
    await new Promise((resolve) => setTimeout(resolve, 1100))
    t.same(await store.has(['fp-999']), [false], 'forgotten after its ttl')
  })

  t.test('options are validated', async (t) => {
    t.throws(() => new MemorySeenEventsStore({ max: 0 }), { name: 'TypeError', message: /max/ })
    t.throws(() => new MemorySeenEventsStore({ ttl: 0.5 }), { name: 'TypeError', message: /ttl/ })
  })
})

t.test('RedisSeenEventsStore against a real redis-server', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client()
  const admin = await redis.client()
  let n = 0
  await behavesAsASeenStore(t, async () => new RedisSeenEventsStore(client, { prefix: `seen-${n++}:` }))

  t.test('keys carry the TTL (default 3 days)', async (t) => {
    const store = new RedisSeenEventsStore(client)
    await store.add(['x'])
    const ttl = await admin.ttl('mailchannels-webhooks:seen:x')
    t.ok(ttl > 259_000 && ttl <= 259_200, `TTL ${ttl}`)
    const short = new RedisSeenEventsStore(client, { prefix: 'short:', ttl: 60 })
    await short.add(['x'])
    t.ok(await admin.ttl('short:x') <= 60)
  })

  t.test('Redis down: every call rejects with ReplayStoreError', async (t) => {
    const store = new RedisSeenEventsStore(client, { prefix: 'down:' })
    await redis.stop()
    for (const call of [() => store.has(['a']), () => store.add(['a']), () => store.delete(['a']), () => filterUnseen([ev(1)], store)]) {
      const err = await call().then(() => null, (e: unknown) => e)
      t.ok(err instanceof ReplayStoreError, String(err))
    }
    await redis.start()
  })

  t.test('options are validated', async (t) => {
    t.throws(() => new RedisSeenEventsStore(client, { ttl: 0 }), { name: 'TypeError', message: /ttl/ })
    t.throws(() => new RedisSeenEventsStore(client, { prefix: '' }), { name: 'TypeError', message: /prefix/ })
    t.throws(() => new RedisSeenEventsStore({} as never), { name: 'TypeError', message: /ioredis client/ })
  })
})
