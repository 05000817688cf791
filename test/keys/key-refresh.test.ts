// A key rotated under the same key id: when a signature
// fails with a cached key, the store fetches the key again, at most once per cooldown per
// key id and within the global budget, so forged signatures cannot flood the endpoint.
import t, { type Test } from 'tap'
import { KeyStore, verifyWebhook, type Result } from '../../src/index.js'
import { generateSigningKeyPair, signWebhook, type SigningKeyPair } from '../../src/testing/index.js'
import { assertRejected } from '../helpers/assert.js'
import { fakeClock } from '../helpers/clock.js'
import { serveKeys, startKeyServer, type KeyServer } from '../helpers/key-server.js'

const body = '[{"event":"delivered","customer_handle":"acct_1","timestamp":1700000000}]'

async function setup (t: Test, first: SigningKeyPair) {
  const s: KeyServer = await startKeyServer(serveKeys({ mckey: first.publicKey }))
  t.teardown(() => s.close())
  const clock = fakeClock()
  const store = new KeyStore({ baseUrl: s.baseUrl, now: clock.now })
  const verify = (keys: SigningKeyPair): Promise<Result<unknown[]>> => {
    const d = signWebhook({ payload: body, privateKey: keys.privateKey, keyId: 'mckey' })
    return verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  }
  return { s, clock, store, verify }
}

t.test('a key rotated under the same id is picked up with one refetch', async (t) => {
  const a = generateSigningKeyPair()
  const b = generateSigningKeyPair()
  const { s, clock, verify } = await setup(t, a)
  t.equal((await verify(a)).error, null)
  t.equal(s.keyFetches(), 1)
  s.behave(serveKeys({ mckey: b.publicKey }))
  await clock.advance(31)
  const results = await Promise.all(Array.from({ length: 10 }, () => verify(b)))
  t.equal(results.filter((r) => r.error === null).length, 10, 'deliveries signed with the new key verify')
  t.equal(s.keyFetches(), 2, 'one refetch for 10 concurrent deliveries')
  t.equal((await verify(b)).error, null)
  assertRejected(t, await verify(a), 'signature_invalid', 401)
  t.equal(s.keyFetches(), 2, 'the old key is gone, and the fresh key is not refetched')
})

t.test('forged signatures cause at most one refetch per cooldown', async (t) => {
  const a = generateSigningKeyPair()
  const forger = generateSigningKeyPair()
  const { s, clock, verify } = await setup(t, a)
  t.equal((await verify(a)).error, null)
  const flood = async (): Promise<void> => {
    const results = await Promise.all(Array.from({ length: 50 }, () => verify(forger)))
    t.ok(results.every((r) => r.error?.type === 'signature_invalid'), 'every forgery is signature_invalid')
  }
  await flood()
  t.equal(s.keyFetches(), 1, 'no refetch for a key younger than the cooldown')
  await clock.advance(31)
  await flood()
  t.equal(s.keyFetches(), 2, 'one refetch after the cooldown (same key: nothing changes)')
  await flood()
  await clock.advance(10)
  await flood()
  t.equal(s.keyFetches(), 2, 'none within the next cooldown')
  t.equal((await verify(a)).error, null, 'the real key still verifies')
})

t.test('a failing refresh keeps the cached key', async (t) => {
  const a = generateSigningKeyPair()
  const forger = generateSigningKeyPair()
  const { s, clock, verify } = await setup(t, a)
  t.equal((await verify(a)).error, null)
  s.behave(() => ({ status: 503, body: 'down' }))
  await clock.advance(31)
  assertRejected(t, await verify(forger), 'signature_invalid', 401)
  t.equal(s.keyFetches(), 2, 'the refresh was tried')
  t.equal((await verify(a)).error, null, 'and the cached key still serves')
})

t.test('refreshCooldown is validated', async (t) => {
  t.throws(() => new KeyStore({ refreshCooldown: 0 }), /refreshCooldown/)
})

t.test('a flood of unknown key ids does not starve the refresh of the real key (E1)', async (t) => {
  const a = generateSigningKeyPair()
  const { s, clock, store, verify } = await setup(t, a)
  t.equal((await verify(a)).error, null)
  // Spend the whole budget on random key ids (correct digest, zero signature).
  for (let i = 0; i < 30; i++) {
    const d = signWebhook({ payload: body, privateKey: a.privateKey, keyId: `k${i}x` })
    const r = await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
    t.ok(r.error?.type === 'unknown_key' || r.error?.type === 'key_unavailable')
  }
  t.ok(store.stats().budgetRejections > 0, 'the budget is spent')
  await clock.advance(3601) // past keyTtl: the real key must be refetched
  const fetchesBefore = s.keyFetches()
  t.equal((await verify(a)).error, null, 'the real key is still refreshed and verifies')
  t.equal(s.keyFetches(), fetchesBefore + 1)
})

t.test('clear() during a fetch gives key_unavailable, not an untyped error', async (t) => {
  const a = generateSigningKeyPair()
  // clear() runs once the key server holds the request: the fetch is in flight, whatever the machine's load.
  let arrived!: () => void
  const requested = new Promise<void>((resolve) => { arrived = resolve })
  const s = await startKeyServer(async (id) => {
    arrived()
    await new Promise((resolve) => setTimeout(resolve, 100))
    return serveKeys({ mckey: a.publicKey })(id, undefined as never)
  })
  t.teardown(() => s.close())
  const store = new KeyStore({ baseUrl: s.baseUrl })
  const d = signWebhook({ payload: body, privateKey: a.privateKey, keyId: 'mckey' })
  const pending = verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  await requested
  store.clear()
  assertRejected(t, await pending, 'key_unavailable', 503)
})

t.test('a key whose fetch ignores the abort and answers after clear() is not kept', async (t) => {
  const a = generateSigningKeyPair()
  const s = await startKeyServer(serveKeys({ mckey: a.publicKey }))
  t.teardown(() => s.close())
  // A fetch of one's own that does not honour the signal: the key arrives after clear() has run.
  let release!: () => void
  const held = new Promise<void>((resolve) => { release = resolve })
  let started!: () => void
  const requested = new Promise<void>((resolve) => { started = resolve })
  const fetch: typeof globalThis.fetch = async (input) => {
    started()
    const res = await globalThis.fetch(input)
    await held
    return res
  }
  const store = new KeyStore({ baseUrl: s.baseUrl, fetch })
  const pending = store.get('mckey').then(() => 'resolved', (err: { type?: string }) => err.type)
  await requested
  store.clear()
  release()
  t.equal(await pending, 'key_unavailable', 'the lookup that was in flight fails, typed')
  t.equal(store.peek('mckey'), undefined, 'the key fetched before clear() is not cached after it')
  t.equal(store.stats().keys, 0)
})
