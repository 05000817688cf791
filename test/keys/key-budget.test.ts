// The key-fetch budget favours what real traffic looks like (row E1 in test/README.md; a flood of random key
// ids must not lock out a real key id that is not cached yet: cold start, or a rotation to a new
// id). Everything runs on a simulated clock against a real loopback key API.
import crypto from 'node:crypto'
import t, { type Test } from 'tap'
import { KeyStore, verifyWebhook, type Result } from '../../src/index.js'
import { serveKeys, startKeyServer, type KeyServer } from '../helpers/key-server.js'
import { B0, p0, signRaw, TEST_PUBLIC_KEY } from '../helpers/sign.js'

const REAL = 'mc-2026-rotated'
const BUDGET = 10 // fetchesPerMinute, the default
const ZERO_SIG = `sig_1=:${Buffer.alloc(64).toString('base64')}:`

interface Sim {
  server: KeyServer
  store: KeyStore
  /** Simulated milliseconds. */
  clock: { ms: number }
  start: number
  /** A real delivery, freshly signed now (MailChannels re-signs every retry). */
  real: () => Promise<Result<unknown[]>>
  /** A one-off random key id: correct digest, fresh created, zero signature. */
  oneOff: (keyId?: string) => Promise<Result<unknown[]>>
  /** Fetches the budget allows by now: a full bucket plus the refill. */
  budgetBound: () => number
}

async function sim (t: Test, options: { fetchesPerMinute?: number } = {}): Promise<Sim> {
  const server = await startKeyServer(serveKeys({ [REAL]: TEST_PUBLIC_KEY }))
  t.teardown(() => server.close())
  const start = 1_800_000_000_000
  const clock = { ms: start }
  const store = new KeyStore({ baseUrl: server.baseUrl, now: () => clock.ms, ...options })
  const nowS = (): number => Math.floor(clock.ms / 1000)
  const budget = options.fetchesPerMinute ?? BUDGET
  return {
    server,
    store,
    clock,
    start,
    real: () => {
      const d = signRaw({ params: p0(nowS(), REAL), body: B0 })
      return verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store, now: clock.ms })
    },
    oneOff: (keyId = `k${crypto.randomBytes(8).toString('hex')}`) => {
      const d = signRaw({ params: p0(nowS(), keyId), body: B0 })
      return verifyWebhook({ payload: d.body, headers: { ...d.headers, signature: ZERO_SIG }, keyStore: store, now: clock.ms })
    },
    budgetBound: () => budget + Math.floor(((clock.ms - start) * budget) / 60_000),
  }
}

/**
 * Runs a flood for `seconds` simulated seconds at `rate` requests per second; from `realFrom`
 * on, a real delivery about every 30 s (just after a flood request). Returns when the real delivery
 * was first accepted (ms after its first attempt), or null.
 */
async function run (t: Test, s: Sim, o: { rate: number, seconds: number, realFrom: number, flood: (i: number) => Promise<Result<unknown[]>> }): Promise<number | null> {
  const step = 1000 / o.rate
  // Jittered flood times (a seeded generator, so runs repeat): with evenly spaced requests the
  // bucket's refills would land exactly on request times, and floating-point ties would decide.
  let seed = 20260521
  const jitter = (): number => { seed = (seed * 1103515245 + 12345) % 2147483648; return 0.5 + seed / 2147483648 }
  s.clock.ms = s.start + step * jitter()
  let firstAttempt: number | null = null
  let acceptedAfter: number | null = null
  let nextReal = s.start + o.realFrom * 1000
  const end = s.start + o.seconds * 1000
  const floodTypes = new Set<string>()
  for (let i = 0; s.clock.ms < end; i++) {
    const r = await o.flood(i)
    floodTypes.add(r.error?.type ?? 'accepted')
    if (s.clock.ms >= nextReal) {
      // 1 ms after a flood request: whoever comes first after the bucket refills takes the
      // token, so a real delivery just behind a flood request is what a first-come bucket loses.
      s.clock.ms += 1
      firstAttempt ??= s.clock.ms
      const real = await s.real()
      if (real.error === null && acceptedAfter === null) acceptedAfter = s.clock.ms - firstAttempt
      if (acceptedAfter !== null && real.error !== null) t.fail(`a real delivery was refused after the key was fetched: ${real.error.type}`)
      nextReal += 30_000
    }
    s.clock.ms += step * jitter()
    if (s.server.keyFetches() > s.budgetBound()) {
      t.fail(`${s.server.keyFetches()} fetches exceed the budget bound ${s.budgetBound()} at ${(s.clock.ms - s.start) / 1000} s`)
      break
    }
  }
  t.strictSame([...floodTypes].filter((x) => x !== 'unknown_key' && x !== 'key_unavailable'), [], 'the flood only ever gets 401 unknown_key or 503 key_unavailable')
  return acceptedAfter
}

for (const rate of [1, 10]) {
  t.test(`E1 one-off random key ids at ${rate}/s: an uncached real key id retried every 30 s is accepted within two minutes, fetches within the budget`, async (t) => {
    const s = await sim(t)
    // The flood runs for a minute first, so the bucket is drained when the real id appears.
    const after = await run(t, s, { rate, seconds: 60 + 150, realFrom: 60, flood: () => s.oneOff() })
    t.not(after, null, 'the real delivery was accepted')
    t.ok(after !== null && after <= 120_000, `accepted ${after === null ? 'never' : `${Math.round(after / 1000)} s`} after its first attempt (at most 120 s)`)
    t.ok(s.server.keyFetches() <= s.budgetBound(), `${s.server.keyFetches()} fetches <= budget bound ${s.budgetBound()}`)
    t.equal(s.server.requests.filter((r) => r.url.endsWith(`id=${REAL}`)).length, 1, 'the real key id was fetched once')
    t.ok(s.store.stats().budgetRejections > 0, 'the flood met the budget')
  })
}

/** Key ids for request i of a flood at `rate`/s in which every id is sent `times` times, 6 s apart. */
function repeated (rate: number, times: number): (i: number) => string {
  const perBlock = 6 * rate
  return (i) => `k${Math.floor(i / (perBlock * times))}x${i % perBlock}`
}

for (const [rate, times] of [[1, 2], [10, 2], [10, 3]] as const) {
  t.test(`E1 random key ids each sent ${times} times, 6 s apart, at ${rate}/s: the real key id still wins within two minutes`, async (t) => {
    const s = await sim(t)
    const ids = repeated(rate, times)
    const after = await run(t, s, { rate, seconds: 60 + 150, realFrom: 60, flood: (i) => s.oneOff(ids(i)) })
    t.ok(after !== null && after <= 120_000, `accepted ${after === null ? 'never' : `${Math.round(after / 1000)} s`} after its first attempt (at most 120 s)`)
    t.ok(s.server.keyFetches() <= s.budgetBound(), `${s.server.keyFetches()} fetches <= budget bound ${s.budgetBound()}`)
  })
}

t.test('E1 an idle store still fetches a first-seen key id at once (cold start without a flood)', async (t) => {
  const s = await sim(t)
  t.equal((await s.real()).error, null, 'the very first delivery is accepted')
  t.equal(s.server.keyFetches(), 1)
})

t.test('keyIds: the listed ids are fetched once, ahead of the first delivery and outside the budget', async (t) => {
  const s = await sim(t)
  // A flood has drained the bucket before the receiver is configured.
  for (let i = 0; i < 30; i++) await s.oneOff()
  const fetchesBefore = s.server.keyFetches()
  const d = signRaw({ params: p0(Math.floor(s.clock.ms / 1000), REAL), body: B0 })
  const options = { keyStore: s.store, keyIds: [REAL, 'mc-next'], now: s.clock.ms }
  const r = await verifyWebhook({ ...options, payload: d.body, headers: d.headers })
  t.equal(r.error, null, 'the first delivery with a listed id is accepted despite the spent budget')
  await s.store.prefetch([REAL, 'mc-next'])
  const urls = s.server.requests.slice(fetchesBefore).map((q) => q.url).sort()
  t.strictSame(urls, [`/tx/v1/webhook/public-key?id=${REAL}`, '/tx/v1/webhook/public-key?id=mc-next'], 'one fetch per listed id (single flight with the delivery)')
  for (let i = 0; i < 5; i++) t.equal((await verifyWebhook({ ...options, payload: d.body, headers: d.headers })).error, null)
  t.equal(s.server.keyFetches(), fetchesBefore + 2, 'no further fetch: each id is warmed once per store')
  t.throws(() => s.store.prefetch(['bad id']), TypeError)
})

t.test('a failed advance fetch of keyIds is not remembered: the first delivery fetches again (Workers refuse I/O outside a request)', async (t) => {
  const server = await startKeyServer(serveKeys({ [REAL]: TEST_PUBLIC_KEY }))
  t.teardown(() => server.close())
  let refuse = true
  // What workerd does to a fetch started while the module loads, outside any request.
  const fetchOutsideRequest: typeof fetch = async (input, init) => {
    if (refuse) throw new Error('Disallowed operation called within global scope.')
    return await fetch(input, init)
  }
  const clock = { ms: 1_800_000_000_000 }
  const store = new KeyStore({ baseUrl: server.baseUrl, fetch: fetchOutsideRequest, now: () => clock.ms })
  await store.prefetch([REAL])
  t.equal(server.keyFetches(), 0, 'the advance fetch never left the isolate')
  refuse = false
  const d = signRaw({ params: p0(Math.floor(clock.ms / 1000), REAL), body: B0 })
  const r = await verifyWebhook({ keyStore: store, keyIds: [REAL], now: clock.ms, payload: d.body, headers: d.headers })
  t.equal(r.error, null, 'the first delivery is accepted, not answered key_unavailable for errorTtl')
  t.equal(server.keyFetches(), 1)
})
