// Zero cost when nobody listens: without a subscriber the receivers read no clock and build no
// message or settlement object, and a synchronous receive stays synchronous either way.
import diagnosticsChannel from 'node:diagnostics_channel'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { DELIVERY_DIAGNOSTICS_CHANNEL, KEY_FETCH_DIAGNOSTICS_CHANNEL, KeyStore, RECEIVE_TRACING_CHANNEL, verifyWebhook } from '../../src/index.js'
import { createWebhookPipeline, settle, type AcceptedOutcome, type WebhookPort } from '../../src/receiver/index.js'
import type { Reply } from '../../src/receiver/reply.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { createWebhookHandler } from '../../src/web/index.js'
import { serveKeys, startKeyServer } from '../helpers/key-server.js'
import { record } from './helpers.js'

const keys = generateSigningKeyPair()
const CUSTOMER = 'acct_quiet'
const silent = { debug () {}, info () {}, warn () {}, error () {} }
let n = 0
const sign = (keyId = 'quiet-key') => signWebhook({
  events: [{ event: 'delivered', customer_handle: CUSTOMER, timestamp: 1700000000, request_id: `q${++n}` }],
  privateKey: keys.privateKey,
  keyId,
})

const DIAGNOSTICS_SOURCES = path.join(fileURLToPath(new URL('../../src/diagnostics/', import.meta.url)))

/**
 * Counts the calls of `performance.now` (the Node port's clock) made from the library's
 * diagnostics code (the receiver's freshness clock and lru-cache read it too) until the test ends.
 */
function countClockReads (t: Test): () => number {
  let reads = 0
  const original = performance.now
  performance.now = function (this: typeof performance) {
    if (new Error().stack!.includes(DIAGNOSTICS_SOURCES)) reads++
    return original.call(this)
  }
  t.teardown(() => { performance.now = original })
  return () => reads
}

function nobodyListens (t: Test): void {
  t.notOk(diagnosticsChannel.hasSubscribers(DELIVERY_DIAGNOSTICS_CHANNEL), 'nobody subscribed to the delivery channel')
  t.notOk(diagnosticsChannel.hasSubscribers(KEY_FETCH_DIAGNOSTICS_CHANNEL), 'nor to the key-fetch channel')
  t.notOk(diagnosticsChannel.tracingChannel(RECEIVE_TRACING_CHANNEL).hasSubscribers, 'nor to the receive trace')
}

/** Every outcome once through the web handler, and two key fetches (one found, one unknown). */
async function everyOutcome (t: Test): Promise<void> {
  const keyServer = await startKeyServer(serveKeys({ 'quiet-key': keys.publicKey }))
  t.teardown(() => keyServer.close())
  let fail = false
  const handler = createWebhookHandler({ customerHandles: [CUSTOMER], baseUrl: keyServer.baseUrl, logger: silent, onEvents: () => { if (fail) throw new Error('no') } })
  const post = async (body: Uint8Array, headers: Record<string, string>): Promise<number> =>
    (await handler(new Request('http://127.0.0.1/hook', { method: 'POST', headers, body }))).status
  const signed = sign()
  t.equal(await post(signed.body, signed.headers), 204, 'accepted (after a key fetch)')
  t.equal(await post(signed.body, signed.headers), 200, 'duplicate')
  const tampered = new Uint8Array(signed.body)
  tampered[tampered.length - 3] = tampered[tampered.length - 3]! ^ 1
  t.equal(await post(tampered, sign().headers), 401, 'rejected')
  t.equal(await post(signed.body, { ...signed.headers, 'content-encoding': 'gzip' }), 415, 'refused before the body')
  fail = true
  const other = sign()
  t.equal(await post(other.body, other.headers), 500, 'failed')
  const unknown = sign('no-such-key')
  t.equal((await verifyWebhook({ payload: unknown.body, headers: unknown.headers, keyStore: new KeyStore({ baseUrl: keyServer.baseUrl }) })).error?.type, 'unknown_key', 'a key fetch answered 404')
}

t.test('nobody subscribed: no clock is read for any outcome or key fetch', async (t) => {
  nobodyListens(t)
  const reads = countClockReads(t)
  await everyOutcome(t)
  t.equal(reads(), 0, 'the diagnostics code never read the clock')
})

t.test('the same with a subscriber reads the clock and publishes (the check above can fail)', async (t) => {
  const r = record(t)
  const reads = countClockReads(t)
  await everyOutcome(t)
  t.ok(reads() > 0, `the diagnostics code read the clock ${reads()} times`)
  t.strictSame(r.deliveries.map((m) => m.outcome), ['accepted', 'duplicate', 'rejected', 'rejected', 'failed'])
  t.strictSame(r.keyFetches.map((m) => m.outcome), ['fetched', 'unknown_key'])
})

t.test('receive stays synchronous; a settlement object exists only when someone listens', async (t) => {
  // A port that hands back what the pipeline decided: the accepted outcome, or the reply.
  const port: WebhookPort<SignedWebhook, AcceptedOutcome | Reply> = { headers: (d) => d.headers, readBody: (d) => d.body, reply: (_d, r) => r, run: (_d, o) => o }
  const pipeline = createWebhookPipeline({ publicKey: keys.publicKey, customerHandles: [CUSTOMER], replay: false, verifyOnThreadPool: false, logger: silent }, port)
  const receive = () => pipeline.handle(sign())
  nobodyListens(t)
  const quiet = receive()
  t.notOk(quiet instanceof Promise, 'synchronous without a subscriber')
  t.match(quiet, { kind: 'accepted', claim: null }, 'nothing to settle: no replay store, nobody listening')

  for (const [what, subscribe] of [
    ['the delivery channel', (fn: (m: unknown) => void) => { diagnosticsChannel.subscribe(DELIVERY_DIAGNOSTICS_CHANNEL, fn); return () => diagnosticsChannel.unsubscribe(DELIVERY_DIAGNOSTICS_CHANNEL, fn) }],
    ['the receive trace alone', (fn: (m: unknown) => void) => {
      const tracing = diagnosticsChannel.tracingChannel(RECEIVE_TRACING_CHANNEL)
      const handlers = { start () {}, end () {}, asyncStart () {}, asyncEnd: fn, error () {} }
      tracing.subscribe(handlers)
      return () => tracing.unsubscribe(handlers)
    }],
  ] as const) {
    const seen: unknown[] = []
    const unsubscribe = subscribe((m) => { seen.push(m) })
    const observed = receive()
    t.notOk(observed instanceof Promise, `synchronous with a subscriber to ${what}`)
    if (observed instanceof Promise || !('kind' in observed)) throw new Error('expected an accepted outcome')
    t.not(observed.claim, null, `a settlement records the handler's answer for ${what}`)
    t.equal(seen.length, 0, 'nothing published before the handler answered')
    settle(observed, 204)
    t.equal(seen.length, 1, `published on ${what} when settled`)
    unsubscribe()
    t.match(receive(), { kind: 'accepted', claim: null }, 'after unsubscribing: nothing again')
  }
})
