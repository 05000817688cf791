// One message per request to the public-key endpoint, against a loopback key server: the key
// served, unknown, the endpoint failing in each way, a timeout, and a refresh after a rotation.
import t from 'tap'
import { KeyStore, verifyWebhook } from '../../src/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { fakeClock } from '../helpers/clock.js'
import { closedPort, serveKeys, startKeyServer } from '../helpers/key-server.js'
import { record } from './helpers.js'

const body = '[{"event":"delivered","customer_handle":"acct_1","timestamp":1700000000}]'
const keys = generateSigningKeyPair()
const verify = (store: KeyStore, keyId: string, privateKey = keys.privateKey) => {
  const d = signWebhook({ payload: body, privateKey, keyId })
  return verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
}

t.test('a key served, then an unknown key id, then the endpoint failing (500)', async (t) => {
  const r = record(t)
  const server = await startKeyServer(serveKeys({ good: keys.publicKey }))
  t.teardown(() => server.close())
  const store = new KeyStore({ baseUrl: server.baseUrl })
  t.equal((await verify(store, 'good')).error, null)
  t.equal((await verify(store, 'good')).error, null, 'cached: no second fetch')
  t.equal((await verify(store, 'nope')).error?.type, 'unknown_key')
  server.behave(() => ({ status: 500, body: 'oops' }))
  t.equal((await verify(store, 'down')).error?.type, 'key_unavailable')
  t.match(r.keyFetches, [
    { outcome: 'fetched', keyId: 'good', baseUrl: server.baseUrl, refresh: false, cause: null, status: null },
    { outcome: 'unknown_key', keyId: 'nope', refresh: false, cause: 'not_found', status: 404 },
    { outcome: 'failed', keyId: 'down', refresh: false, cause: 'http_status', status: 500 },
  ])
  t.equal(r.keyFetches.length, server.keyFetches(), 'one message per request the endpoint received')
  for (const m of r.keyFetches) t.ok(m.durationMs >= 0 && Number.isFinite(m.durationMs), `durationMs (${m.durationMs})`)
  t.strictSame(Object.keys(r.keyFetches[0]!).sort(), ['baseUrl', 'cause', 'durationMs', 'keyId', 'outcome', 'refresh', 'status'])
})

t.test('network failures and a timeout: failed, with the cause and no status', async (t) => {
  const r = record(t)
  const refused = new KeyStore({ baseUrl: `http://127.0.0.1:${await closedPort()}` })
  t.equal((await verify(refused, 'a')).error?.type, 'key_unavailable')
  const server = await startKeyServer(() => 'hang')
  t.teardown(() => server.close())
  const slow = new KeyStore({ baseUrl: server.baseUrl, fetchTimeout: 150 })
  t.equal((await verify(slow, 'b')).error?.type, 'key_unavailable')
  t.match(r.keyFetches, [
    { outcome: 'failed', keyId: 'a', cause: 'connection_refused', status: null },
    { outcome: 'failed', keyId: 'b', cause: 'timeout', status: null },
  ])
  t.ok(r.keyFetches[1]!.durationMs >= 140, `the fetch lasted until its 150 ms timeout (${r.keyFetches[1]!.durationMs})`)
})

t.test('a key rotated under the same id: the refresh is a fetch of its own (refresh: true)', async (t) => {
  const r = record(t)
  const next = generateSigningKeyPair()
  const server = await startKeyServer(serveKeys({ rot: keys.publicKey }))
  t.teardown(() => server.close())
  const clock = fakeClock()
  const store = new KeyStore({ baseUrl: server.baseUrl, now: clock.now })
  t.equal((await verify(store, 'rot')).error, null)
  server.behave(serveKeys({ rot: next.publicKey }))
  await clock.advance(31)
  t.equal((await verify(store, 'rot', next.privateKey)).error, null, 'the new key verifies after one refresh')
  t.match(r.keyFetches, [
    { outcome: 'fetched', keyId: 'rot', refresh: false },
    { outcome: 'fetched', keyId: 'rot', refresh: true },
  ])
  server.behave(() => 'destroy')
  await clock.advance(31)
  t.ok((await verify(store, 'rot', keys.privateKey)).error !== null, 'the old key is refused')
  t.match(r.keyFetches[2], { outcome: 'failed', keyId: 'rot', refresh: true, cause: 'connection_reset' }, 'a failed refresh')
})
