// A handler created at module scope with `keyIds` (the natural way to write a Worker): the
// configured ids are fetched in advance, but workerd refuses any I/O outside a request. That
// refusal must not make the first deliveries of every fresh isolate fail with 503 until the
// failure expires: the ids are fetched once a request is in flight, and the deliveries verify.
// The handler's default replay store, made there as well, still recognises an exact resend.
import t from 'tap'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { serveKeys, startKeyServer } from '../helpers/key-server.js'
import { STARTERS, unavailableReason, type RuntimeName } from './helpers/runtimes.js'

const RUNTIMES: RuntimeName[] = ['workerd', 'deno', 'bun', 'edge-runtime']

for (const name of RUNTIMES) {
  t.test(`${name}: keyIds on a handler created at startup`, { skip: unavailableReason(name) ?? false }, async (t) => {
    const keys = generateSigningKeyPair()
    const keyServer = await startKeyServer(serveKeys({ 'conformance-key': keys.publicKey }))
    t.teardown(() => keyServer.close())
    const server = await STARTERS[name]({ entry: 'test/runtimes/fixtures/keyids-worker.ts', define: { KEY_SERVER: JSON.stringify(keyServer.baseUrl) }, fromSource: true })
    t.teardown(() => server.close())
    const sent = []
    for (let i = 0; i < 2; i++) {
      const signed = signWebhook({ events: [{ event: 'delivered', customer_handle: 'acct_conformance', timestamp: 1, request_id: `k${i}` }], privateKey: keys.privateKey, keyId: 'conformance-key' })
      sent.push(signed)
      const res = await fetch(server.url, { method: 'POST', headers: signed.headers, body: signed.body, signal: AbortSignal.timeout(15_000) })
      t.equal(res.status, 200, `delivery ${i + 1}: ${await res.text()}`)
    }
    t.equal(keyServer.keyFetches(), 1, 'the key is fetched once')
    // The default replay store was made at module scope too (where a Worker's clock reads 0 and
    // random values are refused): an exact resend is still recognised.
    const again = await fetch(server.url, { method: 'POST', headers: sent[0]!.headers, body: sent[0]!.body, signal: AbortSignal.timeout(15_000) })
    t.strictSame({ status: again.status, body: await again.json() }, { status: 200, body: { duplicate: true } }, 'the exact resend is a duplicate')
  })
}
