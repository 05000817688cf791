import crypto from 'node:crypto'
import t, { type Test } from 'tap'
import { KeyStore, MailChannels, verifyWebhook, type Result } from '../../src/index.js'
import { assertRejected } from '../helpers/assert.js'
import { fakeClock } from '../helpers/clock.js'
import { delay, serveKeys, startKeyServer, type KeyServer } from '../helpers/key-server.js'
import { B0, nowSeconds, p0, signRaw, TEST_PUBLIC_KEY, TEST_PUBLIC_KEY_PEM, validDelivery } from '../helpers/sign.js'

const keys = serveKeys({ mckey: TEST_PUBLIC_KEY_PEM, 'mc.key~_-': TEST_PUBLIC_KEY, k1: TEST_PUBLIC_KEY })

async function server (t: Test, behaviour = keys): Promise<KeyServer> {
  const s = await startKeyServer(behaviour)
  t.teardown(() => s.close())
  return s
}

t.test('cache default true: two verifies, one fetch (shared store per baseUrl)', async (t) => {
  const s = await server(t)
  const d = validDelivery()
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, baseUrl: s.baseUrl })).error, null)
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, baseUrl: s.baseUrl })).error, null)
  t.equal(s.keyFetches(), 1, 'one fetch')
  t.strictSame(s.requests.map((r) => [r.method, r.url]), [['GET', '/tx/v1/webhook/public-key?id=mckey']], 'the documented endpoint')
})

t.test('cache false: a fetch for every verify', async (t) => {
  const s = await server(t)
  const d = validDelivery()
  for (let i = 0; i < 3; i++) t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, baseUrl: s.baseUrl, cache: false })).error, null)
  t.equal(s.keyFetches(), 3)
})

t.test('no X-Api-Key is ever sent to the public-key endpoint, even from a MailChannels instance', async (t) => {
  const s = await server(t)
  const apiKey = 'mc_live_SECRET_api_key_123'
  const client = new MailChannels(apiKey, { baseUrl: s.baseUrl })
  const d = validDelivery()
  t.equal((await client.webhooks.verify({ payload: d.body, headers: d.headers })).error, null, 'instance verify fetches from the client baseUrl')
  t.equal((await client.webhooks.verify({ payload: d.body, headers: d.headers, cache: false })).error, null)
  // an unknown key id and a failing one also go out without the key
  const k = signRaw({ params: p0(nowSeconds(), 'nokey'), body: B0 })
  t.equal((await client.webhooks.verify({ payload: k.body, headers: k.headers })).error?.type, 'unknown_key')
  t.ok(s.keyFetches() >= 2)
  for (const r of s.requests) {
    t.equal(r.headers['x-api-key'], undefined, 'no x-api-key')
    t.equal(r.headers.authorization, undefined, 'no authorization')
    t.notOk(JSON.stringify(r).includes(apiKey), 'the API key appears nowhere in the request')
  }
})

t.test('E2 100 concurrent verifies with one uncached keyid -> exactly 1 fetch', async (t) => {
  const s = await server(t, async (id, req) => { await delay(50); return keys(id, req) })
  const store = new KeyStore({ baseUrl: s.baseUrl })
  const d = signRaw({ params: p0(nowSeconds(), 'k1'), body: B0 })
  const results = await Promise.all(Array.from({ length: 100 }, () => verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })))
  t.equal(results.filter((r) => r.error === null).length, 100, 'all 100 verified')
  t.equal(s.keyFetches(), 1, 'exactly 1 upstream fetch')
  t.equal(store.stats().fetches, 1)
})

t.test('E6 404 -> unknown_key; 50 more within the negative TTL -> still 1 fetch', async (t) => {
  const s = await server(t)
  const store = new KeyStore({ baseUrl: s.baseUrl })
  const d = signRaw({ params: p0(nowSeconds(), 'k404'), body: B0 })
  assertRejected(t, await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store }), 'unknown_key', 401)
  const more = await Promise.all(Array.from({ length: 50 }, () => verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })))
  t.equal(more.filter((r) => r.error?.type === 'unknown_key').length, 50, 'all 401 unknown_key')
  t.equal(s.keyFetches(), 1, '1 fetch in total')
  t.equal(store.stats().negativeHits, 50)
  t.equal(store.stats().keys, 0, 'nothing cached as a key')
})

t.test('E6 negative TTL: unknown key fetched again only after unknownKeyTtl', async (t) => {
  const s = await server(t)
  const clock = fakeClock()
  const store = new KeyStore({ baseUrl: s.baseUrl, now: clock.now, unknownKeyTtl: 300 })
  const d = signRaw({ params: p0(nowSeconds(), 'k404'), body: B0 })
  const run = (): Promise<Result<unknown[]>> => verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  t.equal((await run()).error?.type, 'unknown_key')
  await clock.advance(299)
  t.equal((await run()).error?.type, 'unknown_key')
  t.equal(s.keyFetches(), 1)
  await clock.advance(2)
  t.equal((await run()).error?.type, 'unknown_key')
  t.equal(s.keyFetches(), 2, 'refetched after 300 s')
})

t.test('E1 1,000 random keyids: fetches within the budget; valid cached key traffic unaffected', async (t) => {
  const s = await server(t)
  const store = new KeyStore({ baseUrl: s.baseUrl })
  const good = validDelivery()
  t.equal((await verifyWebhook({ payload: good.body, headers: good.headers, keyStore: store })).error, null, 'mckey cached first')
  const now = nowSeconds()
  const zeroSig = `sig_1=:${Buffer.alloc(64).toString('base64')}:`
  const types = new Map<string, number>()
  for (let batch = 0; batch < 10; batch++) {
    const results = await Promise.all(Array.from({ length: 100 }, () => {
      const keyId = `k${crypto.randomBytes(8).toString('hex')}`
      const d = signRaw({ params: p0(now, keyId), body: B0 })
      return verifyWebhook({ payload: d.body, headers: { ...d.headers, signature: zeroSig }, keyStore: store })
    }))
    for (const r of results) types.set(r.error?.type ?? 'accepted', (types.get(r.error?.type ?? 'accepted') ?? 0) + 1)
    // valid traffic interleaved with the flood still verifies
    t.equal((await verifyWebhook({ payload: good.body, headers: good.headers, keyStore: store })).error, null, `mckey verifies during batch ${batch}`)
  }
  t.same([...types.keys()].filter((k) => k !== 'unknown_key' && k !== 'key_unavailable'), [], `only 401 unknown_key / 503 key_unavailable: ${JSON.stringify([...types])}`)
  t.equal([...types.values()].reduce((a, b) => a + b, 0), 1000)
  // 1 fetch for mckey + at most the budget (10) for the flood
  t.ok(s.keyFetches() <= 11, `upstream fetches ${s.keyFetches()} <= 1 + budget 10`)
  t.ok(store.stats().failures <= 1000, 'negative cache within its cap')
  t.ok(store.stats().budgetRejections > 0, 'the budget refused fetches')
})

t.test('E1 with the keyIds allowlist: unknown_key with 0 fetches for the unlisted id (the listed one is warmed up)', async (t) => {
  const s = await server(t)
  const store = new KeyStore({ baseUrl: s.baseUrl })
  const d = signRaw({ params: p0(nowSeconds(), 'k0123456789abcdef'), body: B0 })
  assertRejected(t, await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store, keyIds: ['mckey'] }), 'unknown_key', 401)
  // keyIds also starts a one-time warm-up fetch of the listed ids: wait for it, then count.
  await store.prefetch(['mckey'])
  t.strictSame(s.requests.map((r) => r.url), ['/tx/v1/webhook/public-key?id=mckey'], 'only the listed id was fetched, never the random one')
})

t.test('E3/E4 keyid charset rejections -> malformed_header with 0 fetches', async (t) => {
  const s = await server(t)
  const store = new KeyStore({ baseUrl: s.baseUrl })
  for (const keyId of ['k'.repeat(10_000), 'k'.repeat(65), '../../send', 'mckey&id=x', 'mckey#x', '%2e%2e%2f', 'mc key', 'mckey/..', 'mckey?x', '']) {
    const d = signRaw({ params: p0(nowSeconds(), keyId.replace(/"/g, '')), body: B0 })
    assertRejected(t, await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store }), 'malformed_header', 400)
  }
  t.equal(s.keyFetches(), 0, '0 fetches')
  // the longest legal keyid and every allowed character produce exactly <base>/tx/v1/webhook/public-key?id=<id>
  const odd = signRaw({ params: p0(nowSeconds(), 'mc.key~_-'), body: B0 })
  t.equal((await verifyWebhook({ payload: odd.body, headers: odd.headers, keyStore: store })).error, null)
  t.strictSame(s.requests.map((r) => r.url), ['/tx/v1/webhook/public-key?id=mc.key%7E_-'], 'encoded query, nothing else')
  t.equal(new URL(s.requests[0]!.url, 'http://x').searchParams.get('id'), 'mc.key~_-')
})

t.test('E5 unknown keyid with an expired created or a wrong digest -> 401 with 0 fetches', async (t) => {
  const s = await server(t)
  const store = new KeyStore({ baseUrl: s.baseUrl })
  const old = signRaw({ params: p0(nowSeconds() - 3600, 'kunknown'), body: B0 })
  assertRejected(t, await verifyWebhook({ payload: old.body, headers: old.headers, keyStore: store }), 'signature_expired', 401)
  const fresh = signRaw({ params: p0(nowSeconds(), 'kunknown'), body: B0 })
  assertRejected(t, await verifyWebhook({ payload: B0.replace('r1', 'r2'), headers: fresh.headers, keyStore: store }), 'digest_mismatch', 401)
  const future = signRaw({ params: p0(nowSeconds() + 3600, 'kunknown'), body: B0 })
  assertRejected(t, await verifyWebhook({ payload: future.body, headers: future.headers, keyStore: store }), 'signature_from_future', 401)
  t.equal(s.keyFetches(), 0)
})

t.test('TTL expiry triggers exactly one refetch', async (t) => {
  const s = await server(t, async (id, req) => { await delay(20); return keys(id, req) })
  const clock = fakeClock()
  const store = new KeyStore({ baseUrl: s.baseUrl, now: clock.now, keyTtl: 60 })
  const d = validDelivery()
  const run = (): Promise<Result<unknown[]>> => verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  t.equal((await run()).error, null)
  await clock.advance(59)
  t.equal((await run()).error, null)
  t.equal(s.keyFetches(), 1, 'cached within the TTL')
  await clock.advance(2)
  const results = await Promise.all(Array.from({ length: 20 }, run))
  t.equal(results.filter((r) => r.error === null).length, 20)
  t.equal(s.keyFetches(), 2, 'one refetch for 20 concurrent verifies after expiry')
  t.equal((await run()).error, null)
  t.equal(s.keyFetches(), 2)
})

t.test('stale key served while the endpoint is down within maxStale, refused after', async (t) => {
  const s = await server(t)
  const clock = fakeClock()
  const store = new KeyStore({ baseUrl: s.baseUrl, now: clock.now, keyTtl: 60, maxStale: 120, errorTtl: 10 })
  const d = validDelivery()
  const run = (): Promise<Result<unknown[]>> => verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  t.equal((await run()).error, null)
  s.behave(() => ({ status: 503, body: 'down' }))
  await clock.advance(61)
  t.equal((await run()).error, null, 'stale key served while down (61 s)')
  t.equal(s.keyFetches(), 2)
  t.equal((await run()).error, null, 'and again without a new fetch within errorTtl')
  t.equal(s.keyFetches(), 2)
  await clock.advance(100)
  t.equal((await run()).error, null, 'still within keyTtl + maxStale (161 s)')
  t.equal(s.keyFetches(), 3, 'looked again after errorTtl')
  await clock.advance(30)
  assertRejected(t, await run(), 'key_unavailable', 503)
  t.equal(s.keyFetches(), 4)
  // and the endpoint coming back heals it (after errorTtl)
  s.behave(keys)
  await clock.advance(11)
  t.equal((await run()).error, null, 'recovered')
  t.equal(s.keyFetches(), 5)
})

t.test('a stale key is not served after a 404 (key revoked)', async (t) => {
  const s = await server(t)
  const clock = fakeClock()
  const store = new KeyStore({ baseUrl: s.baseUrl, now: clock.now, keyTtl: 60, maxStale: 3600 })
  const d = validDelivery()
  const run = (): Promise<Result<unknown[]>> => verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  t.equal((await run()).error, null)
  s.behave(() => ({ status: 404, body: '{}' }))
  await clock.advance(61)
  assertRejected(t, await run(), 'unknown_key', 401)
})

t.test('clear() forgets keys and failures; stats count', async (t) => {
  const s = await server(t)
  const store = new KeyStore({ baseUrl: s.baseUrl })
  const d = validDelivery()
  await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  t.ok(store.peek('mckey'), 'peek returns the cached key')
  t.equal(store.peek('other'), undefined)
  store.clear()
  t.equal(store.peek('mckey'), undefined)
  await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  t.equal(s.keyFetches(), 2)
  t.equal(store.stats().keys, 1)
  t.equal(store.baseUrl, s.baseUrl)
  // publicKey short-circuits the store entirely
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store, publicKey: TEST_PUBLIC_KEY })).error, null)
  t.equal(s.keyFetches(), 2)
})

t.test('KeyStore options are validated with TypeErrors naming the option', async (t) => {
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ baseUrl: 'http://example.com' }, /baseUrl/],
    [{ keyTtl: 0 }, /keyTtl/],
    [{ maxStale: -1 }, /maxStale/],
    [{ unknownKeyTtl: Number.NaN }, /unknownKeyTtl/],
    [{ errorTtl: 'x' }, /errorTtl/],
    [{ fetchTimeout: -5 }, /fetchTimeout/],
    [{ fetchesPerMinute: 1.5 }, /fetchesPerMinute/],
    [{ maxConcurrentFetches: 0 }, /maxConcurrentFetches/],
    [{ maxKeys: Infinity }, /maxKeys/],
    [{ maxFailures: 0 }, /maxFailures/],
    [{ fetch: 'x' }, /fetch/],
    [{ now: 5 }, /now/],
  ]
  for (const [opts, re] of bad) t.throws(() => new KeyStore(opts as never), { name: 'TypeError', message: re }, JSON.stringify(opts))
  t.throws(() => new KeyStore(null as never), TypeError)
  t.doesNotThrow(() => new KeyStore({ maxStale: 0 }))
})
