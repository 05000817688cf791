// The receivers take every `verify` option as it is: src/receiver/options.ts passes them through
// to `resolveVerifyConfig` in one object, and knows their names from `VERIFY_OPTIONS`
// (src/verify/options.ts), which the compiler keeps complete. The tables below are typed by
// `VerifyConfig`, so an option added there fails to compile here until it has a row.
import t from 'tap'
import { KeyStore } from '../../src/keys/key-store.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import { createWebhookPipeline, keyStoreFactory, rejectUnknownOptions, resolveBodyLimit, resolveReceiverOptions, type WebhookErrorBody, type WebhookPort } from '../../src/receiver/index.js'
import { tooLargeMessage } from '../../src/receiver/transport.js'
import { VERIFY_OPTIONS, type VerifyConfig } from '../../src/verify/options.js'
import { verifyWebhookRequest } from '../../src/web/index.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { noopLogger } from '../../src/logger.js'

const KEYS = generateSigningKeyPair()
const base = { publicKey: KEYS.publicKey, customerHandles: ['acct_1'] }
const resolve = (options: object) => resolveReceiverOptions({ ...base, ...options } as never, keyStoreFactory(noopLogger), () => new MemoryReplayStore())

/** A port that answers what the pipeline decided: the refusal's code and message, or `accepted`. */
const PORT: WebhookPort<SignedWebhook, { kind: string, error?: { type: string, message: string } }> = {
  headers: (d) => d.headers,
  readBody: (d) => d.body,
  reply: (_d, reply) => ({ kind: 'rejected', error: { type: (reply.body as WebhookErrorBody).code, message: (reply.body as WebhookErrorBody).message } }),
  run: () => ({ kind: 'accepted' }),
}
const pipeline = (options: object) => createWebhookPipeline({ ...base, ...options } as never, PORT)

/** The receivers' own option, not passed to verify (`logger` is the adapter's). */
type PassedThrough = Exclude<keyof VerifyConfig, 'logger'>

/** A bad value of every verify option: the receivers refuse it, naming the option, so it reached `resolveVerifyConfig`. */
const BAD: Record<PassedThrough, unknown> = {
  publicKey: 'garbage',
  cache: 'yes',
  baseUrl: 'http://example.com',
  customerHandles: [],
  maxAge: -1,
  clockSkew: -1,
  maxEvents: 0,
  keyIds: ['bad id'],
  keyStore: {},
}

t.test('every verify option reaches verification through the receivers (a bad value is refused, naming it)', async (t) => {
  for (const [option, value] of Object.entries(BAD)) {
    // The key options are checked without the fixed key, which would make a key store needless.
    const options = option === 'baseUrl' || option === 'keyStore' || option === 'keyIds' ? { publicKey: undefined, [option]: value } : { [option]: value }
    t.throws(() => resolve(options), { name: 'TypeError', message: new RegExp(option) }, option)
  }
})

t.test('every verify option is a known receiver option, and nothing else slips through', async (t) => {
  const names = Object.keys(VERIFY_OPTIONS)
  t.same(names.sort(), [...Object.keys(BAD), 'logger'].sort(), 'VERIFY_OPTIONS lists each VerifyConfig option')
  for (const name of names) t.doesNotThrow(() => { rejectUnknownOptions({ [name]: undefined }) }, name)
  t.throws(() => { rejectUnknownOptions({ maxage: 300 }) }, { name: 'TypeError', message: 'maxage is not a known option' })
})

t.test('good verify values take effect in the receiver (maxEvents, customerHandles, maxAge)', async (t) => {
  const events = ['delivered', 'open'].map((event, i) => ({ event, customer_handle: 'acct_1', timestamp: 1700000000 + i, request_id: `req-${i}`, email: 'a@example.net' }))
  const d = signWebhook({ privateKey: KEYS.privateKey, events })
  const outcome = async (options: object) => await pipeline({ replay: false, verifyOnThreadPool: false, ...options }).handle(d)
  t.equal((await outcome({})).kind, 'accepted')
  t.match(await outcome({ maxEvents: 1 }), { kind: 'rejected', error: { type: 'payload_too_large', message: /maxEvents/ } })
  t.match(await outcome({ customerHandles: ['acct_2'] }), { kind: 'rejected', error: { type: 'customer_not_allowed' } })
  const old = signWebhook({ privateKey: KEYS.privateKey, events, created: Math.floor(Date.now() / 1000) - 120 })
  const aged = async (maxAge: number) => await pipeline({ replay: false, maxAge }).handle(old)
  t.equal((await aged(300)).kind, 'accepted')
  t.match(await aged(60), { kind: 'rejected', error: { type: 'signature_expired' } })
  const store = new KeyStore({ baseUrl: 'http://127.0.0.1:1' })
  t.equal(resolve({ publicKey: undefined, keyStore: store }).config.keyStore, store, 'a keyStore given is the one used')
})

t.test('bodyLimit: one validation for the receivers and verifyWebhookRequest, one 413 message', async (t) => {
  for (const bad of [0, -1, 1.5, '1024', Number.NaN, Infinity, null]) {
    t.throws(() => resolveBodyLimit(bad), { name: 'TypeError', message: 'bodyLimit must be a positive integer number of bytes' }, String(bad))
    t.throws(() => resolve({ bodyLimit: bad }), { name: 'TypeError', message: 'bodyLimit must be a positive integer number of bytes' })
    const r = await verifyWebhookRequest(new Request('http://x/', { method: 'POST', body: '[]' }), { ...base, bodyLimit: bad as number })
    t.equal(r.error?.message, 'bodyLimit must be a positive integer number of bytes')
  }
  t.equal(resolveBodyLimit(undefined), 1024 * 1024, 'the default: 1 MiB')
  const r = await verifyWebhookRequest(new Request('http://x/', { method: 'POST', body: 'x'.repeat(65) }), { ...base, bodyLimit: 64 })
  t.same(r.error && { type: r.error.type, message: r.error.message }, { type: 'payload_too_large', message: tooLargeMessage(64) })
})
