import t from 'tap'
import {
  MemoryClaimStore, RedisClaimStore, ReplayStoreError,
  type StoreClaim, type StoreClaimResult, type WebhookEvent,
} from '../../src/index.js'
import { toEvent } from '../../src/events/parse-events.js'
import { startRedisServer } from './helpers/redis-server.js'
import { behavesAsASeenStore } from './helpers/seen-store-contract.js'

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }
const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'

const ev = (n: number): WebhookEvent => toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000 + n, request_id: `req-${n}` }, 0)

t.test('MemoryClaimStore', async (t) => {
  await behavesAsASeenStore(t, async () => new MemoryClaimStore())

  t.test('bounded and expiring', async (t) => {
    const store = new MemoryClaimStore({ max: 100, ttl: 1 })
    await store.add(Array.from({ length: 1000 }, (_v, i) => `fp-${i}`))
    t.equal(store.size, 100)
    t.same(await store.has(['fp-999', 'fp-0']), [true, false])
    await new Promise((resolve) => setTimeout(resolve, 1100))
    t.same(await store.has(['fp-999']), [false], 'forgotten after its ttl')
  })

  t.test('claim tokens are unique over many claims, and one store\'s token holds nothing in another', async (t) => {
    const store = new MemoryClaimStore()
    const fps = Array.from({ length: 2000 }, (_, i) => `fp-${i}`)
    const claims = [...await store.claim(fps.slice(0, 1000), 30), ...await store.claim(fps.slice(1000), 30)].filter(isClaim)
    t.equal(claims.length, 2000)
    t.equal(new Set(claims.map((c) => c.token)).size, 2000, 'no token given twice')
    const other = new MemoryClaimStore()
    const [theirs] = await other.claim(['fp-0'], 30)
    if (!isClaim(theirs)) return t.fail('claimed')
    t.not(theirs.token, claims[0]!.token, 'two stores never hand out the same token')
    await store.release([theirs])
    t.same(await store.claim(['fp-0'], 30), ['processing'], 'the other store\'s token released nothing')
  })

  t.test('options are validated', async (t) => {
    t.throws(() => new MemoryClaimStore({ max: 0 }), { name: 'TypeError', message: /max/ })
    t.throws(() => new MemoryClaimStore({ ttl: 0.5 }), { name: 'TypeError', message: /ttl/ })
  })
})

t.test('RedisClaimStore against a real redis-server', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client()
  const admin = await redis.client()
  let n = 0
  await behavesAsASeenStore(t, async () => new RedisClaimStore(client, { prefix: `seen-${n++}:` }))

  t.test('keys carry the TTL (default 3 days)', async (t) => {
    const store = new RedisClaimStore(client)
    await store.add(['x'])
    const ttl = await admin.ttl('mailchannels-webhooks:seen:x')
    t.ok(ttl > 259_000 && ttl <= 259_200, `TTL ${ttl}`)
    const short = new RedisClaimStore(client, { prefix: 'short:', ttl: 60 })
    await short.add(['x'])
    t.ok(await admin.ttl('short:x') <= 60)
  })

  t.test('a done mark written by the first version (value 1) reads as done', async (t) => {
    const store = new RedisClaimStore(client, { prefix: 'v1:' })
    await admin.set('v1:old', '1', 'EX', 60)
    t.same(await store.claim(['old', 'new'], 30).then((r) => r.map((x) => isClaim(x) ? 'claimed' : x)), ['done', 'claimed'])
    t.same(await store.has(['old', 'new']), [true, false])
    t.equal(await admin.get('v1:old'), '1', 'the claim did not overwrite it')
  })

  t.test('a claim lives its lifetime, a done mark the store ttl', async (t) => {
    const store = new RedisClaimStore(client, { prefix: 'ttl:', ttl: 600 })
    const [c] = await store.claim(['e'], 5)
    const pttl = await admin.pttl('ttl:e')
    t.ok(pttl > 0 && pttl <= 5000, `claim PTTL ${pttl}`)
    if (!isClaim(c)) return t.fail('claimed')
    await store.extend([c], 20)
    const extended = await admin.pttl('ttl:e')
    t.ok(extended > 5000 && extended <= 20_000, `extended PTTL ${extended}`)
    await store.complete([c])
    const ttl = await admin.ttl('ttl:e')
    t.ok(ttl > 590 && ttl <= 600, `done mark TTL ${ttl}`)
  })

  t.test('a frozen Redis: a claim that timed out never makes an event look done', async (t) => {
    const slow = await redis.client({ commandTimeout: undefined })
    const store = new RedisClaimStore(slow, { prefix: 'frozen:', timeout: 150 })
    await store.claim(['warm'], 30)
    redis.pause()
    const err = await store.claim(['late-1', 'late-2'], 2).then(() => null, (e: unknown) => e)
    redis.resume()
    t.ok(err instanceof ReplayStoreError, `the claim fails: ${String(err)}`)
    await sleep(200)
    t.same(await store.has(['late-1', 'late-2']), [false, false], 'not done')
    // It ran late, then its release (best effort); at worst it holds the event for its lifetime.
    let retaken: StoreClaimResult[] = []
    for (let i = 0; i < 30; i++) {
      retaken = await store.claim(['late-1', 'late-2'], 30)
      if (retaken.every(isClaim)) break
      await sleep(100)
    }
    t.ok(retaken.every(isClaim), 'the next attempt claims both events')
  })

  t.test('waitForReplicas on a Redis without replicas: claims and marks fail with ReplayStoreError; failed claims are given back', async (t) => {
    const durable = new RedisClaimStore(client, { prefix: 'durable:', waitForReplicas: 1, waitTimeout: 50 })
    const err = await durable.claim(['w1', 'w2'], 30).then(() => null, (e: unknown) => e)
    t.ok(err instanceof ReplayStoreError, String(err))
    t.match(String((err as Error).message), /Only 0 of 1 Redis replicas acknowledged claim within 50 ms/)
    await t.rejects(durable.add(['w3']), { name: 'ReplayStoreError', message: /replicas acknowledged add/ })
    await t.rejects(durable.complete([{ fingerprint: 'w4', token: 'x' }]), { name: 'ReplayStoreError', message: /replicas acknowledged complete/ })
    const plain = new RedisClaimStore(client, { prefix: 'durable:' })
    let retry: StoreClaimResult[] = []
    for (let i = 0; i < 40; i++) {
      retry = await plain.claim(['w1', 'w2'], 30)
      if (retry.every(isClaim)) break
      await sleep(50)
    }
    t.ok(retry.every(isClaim), 'the retry claims both events')
    // Release and extend do not wait: they work without replicas.
    await durable.extend(retry.filter(isClaim), 60)
    await durable.release(retry.filter(isClaim))
    t.ok((await plain.claim(['w1', 'w2'], 30)).every(isClaim))
  })

  t.test('Redis down: every call rejects with ReplayStoreError', async (t) => {
    const store = new RedisClaimStore(client, { prefix: 'down:' })
    const [held] = await store.claim(['held'], 30)
    if (!isClaim(held)) return t.fail('claimed')
    await redis.stop()
    for (const call of [() => store.has(['a']), () => store.add(['a']), () => store.delete(['a']),
      () => store.claim(['a'], 30), () => store.complete([held]), () => store.release([held]), () => store.extend([held], 30)]) {
      const err = await call().then(() => null, (e: unknown) => e)
      t.ok(err instanceof ReplayStoreError, String(err))
    }
    await redis.start()
  })

  t.test('options are validated', async (t) => {
    t.throws(() => new RedisClaimStore(client, { ttl: 0 }), { name: 'TypeError', message: /ttl/ })
    t.throws(() => new RedisClaimStore(client, { prefix: '' }), { name: 'TypeError', message: /prefix/ })
    t.throws(() => new RedisClaimStore({} as never), { name: 'TypeError', message: /ioredis client/ })
    t.throws(() => new RedisClaimStore(client, { waitForReplicas: -1 }), { name: 'TypeError', message: /waitForReplicas must be a non-negative integer/ })
    t.throws(() => new RedisClaimStore(client, { waitForReplicas: 1, timeout: 200, waitTimeout: 200 }), { name: 'TypeError', message: /waitTimeout must be .* below timeout \(200\)/ })
  })
})
