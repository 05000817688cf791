// libsodium (the optional peer sodium-native) verifies Ed25519 on Node when it is installed: it
// must answer exactly what node:crypto answers on every vector, never throw, and make
// verifyOnThreadPool: 'auto' keep most verifies on the event loop. sodium-native is a devDependency, so the
// suite always runs with it; the node:crypto path is checked through verifyNodeCrypto.
import crypto from 'node:crypto'
import { readFileSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import t from 'tap'
import * as node from '../../src/crypto/node.js'
import { loadSodiumVerify } from '../../src/crypto/sodium.js'
import { createWebhookPipeline, type AcceptedOutcome, type WebhookPort } from '../../src/receiver/index.js'
import type { Reply } from '../../src/receiver/reply.js'
import type { SignedWebhook } from '../../src/testing/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'

interface WycheproofTest { tcId: number, comment: string, msg: string, sig: string, result: 'valid' | 'invalid' | 'acceptable' }
const file = JSON.parse(readFileSync(new URL('../fixtures/wycheproof/ed25519_test.json', import.meta.url), 'utf8')) as { testGroups: Array<{ publicKey: { pk: string }, tests: WycheproofTest[] }> }

const sodiumVerify = loadSodiumVerify()

t.test('sodium-native loads (it is a devDependency)', async (t) => {
  t.type(sodiumVerify, 'function', 'libsodium is available, so the vectors below run through it')
})

t.test('Wycheproof: libsodium and node:crypto both accept every valid vector and reject every invalid one', async (t) => {
  if (sodiumVerify === null) return t.fail('sodium-native did not load')
  let valid = 0
  let invalid = 0
  for (const group of file.testGroups) {
    const raw = Buffer.from(group.publicKey.pk, 'hex')
    const key = node.importRawEd25519(raw)
    for (const test of group.tests) {
      const msg = Buffer.from(test.msg, 'hex')
      const sig = Buffer.from(test.sig, 'hex')
      const want = test.result === 'valid'
      const bySodium = sodiumVerify(raw, msg, sig)
      const byOpenSsl = node.verifyNodeCrypto(key, msg, sig)
      const byPort = node.verify(key, msg, sig)
      if (bySodium !== want || byOpenSsl !== want || byPort !== want) {
        t.fail(`tc ${test.tcId} (${test.comment}): want ${want}, libsodium ${bySodium}, node:crypto ${byOpenSsl}, port ${String(byPort)}`)
      }
      if (want) valid++
      else invalid++
    }
  }
  t.equal(valid + invalid, 151, 'every vector ran')
  t.ok(valid > 0 && invalid > 0, `${valid} valid, ${invalid} invalid`)
})

t.test('a key given as a KeyObject verifies through libsodium too, with its raw bytes read once', async (t) => {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519')
  const imported = node.fromKeyObject(publicKey)
  if (imported === undefined) return t.fail('the KeyObject was not accepted')
  const msg = Buffer.from('"content-digest": sha-256=:x:\n"@signature-params": ()')
  const sig = crypto.sign(null, msg, privateKey)
  t.equal(node.verify(imported.key, msg, sig), true, 'valid')
  const flipped = Buffer.from(msg)
  flipped[3] = flipped[3]! ^ 1
  t.equal(node.verify(imported.key, flipped, sig), false, 'another message fails')
})

t.test('wrong lengths and a broken or missing addon never throw', async (t) => {
  if (sodiumVerify === null) return t.fail('sodium-native did not load')
  const raw = crypto.randomBytes(32)
  t.equal(sodiumVerify(raw, Buffer.from('x'), new Uint8Array(63)), false, 'a 63-byte signature is invalid')
  t.equal(sodiumVerify(raw, Buffer.from('x'), new Uint8Array(65)), false, 'a 65-byte signature is invalid')
  t.equal(sodiumVerify(raw.subarray(1), Buffer.from('x'), new Uint8Array(64)), false, 'a 31-byte key verifies nothing')
  t.equal(loadSodiumVerify(() => { throw new Error('Cannot find module') }), null, 'not installed: node:crypto')
  t.equal(loadSodiumVerify(() => ({})), null, 'an addon without the function: node:crypto')
  t.equal(loadSodiumVerify(() => ({ crypto_sign_verify_detached: () => true, crypto_sign_PUBLICKEYBYTES: 33, crypto_sign_BYTES: 64 })), null, 'an addon with other sizes: node:crypto')
  const throwing = loadSodiumVerify(() => ({ crypto_sign_verify_detached: () => { throw new Error('boom') }, crypto_sign_PUBLICKEYBYTES: 32, crypto_sign_BYTES: 64 }))
  t.equal(throwing?.(raw, Buffer.from('x'), new Uint8Array(64)), false, 'an addon that throws answers false')
  const truthy = loadSodiumVerify(() => ({ crypto_sign_verify_detached: () => 1, crypto_sign_PUBLICKEYBYTES: 32, crypto_sign_BYTES: 64 }))
  t.equal(truthy?.(raw, Buffer.from('x'), new Uint8Array(64)), false, 'only a literal true passes')
})

t.test("verifyOnThreadPool: 'auto' keeps at most two verifies per other CPU on the pool, the rest on the event loop; true and false as said", async (t) => {
  const slots = node.offThreadSlots()
  t.equal(slots, 2 * (availableParallelism() - 1), 'with libsodium: two per other CPU (none on one CPU)')
  const keys = generateSigningKeyPair()
  const silent = { debug () {}, info () {}, warn () {}, error () {} }
  let n = 0
  const delivery = () => signWebhook({ events: [{ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000, request_id: `s${++n}` }], privateKey: keys.privateKey, keyId: 'k' })
  // A port that hands back what the pipeline decided: the accepted outcome (kind 'accepted'), or the reply.
  const port: WebhookPort<SignedWebhook, AcceptedOutcome | Reply> = { headers: (d) => d.headers, readBody: (d) => d.body, reply: (_d, r) => r, run: (_d, o) => o }
  const receiverWith = (setting?: boolean | 'auto') => createWebhookPipeline({ publicKey: keys.publicKey, customerHandles: ['acct_1'], replay: false, logger: silent, ...(setting === undefined ? {} : { verifyOnThreadPool: setting }) }, port)

  for (const setting of ['auto', undefined] as const) {
    const receiver = receiverWith(setting)
    const outcomes = []
    for (let i = 0; i <= slots + 1; i++) outcomes.push(receiver.handle(delivery()))
    const onPool = outcomes.map((o) => o instanceof Promise)
    t.strictSame(onPool, [...Array(slots).fill(true), false, false], `${String(setting ?? 'default')}: the first ${slots} on the pool (a promise), then the event loop (synchronous)`)
    for (const o of await Promise.all(outcomes)) t.match(o, { kind: 'accepted' })
    const again = receiver.handle(delivery())
    t.equal(again instanceof Promise, slots > 0, 'once they answered, the pool takes verifies again')
    await again
  }
  for (const [setting, onPool] of [[true, true], [false, false]] as const) {
    const receiver = receiverWith(setting)
    const outcomes = Array.from({ length: slots + 3 }, () => receiver.handle(delivery()))
    t.ok(outcomes.every((o) => (o instanceof Promise) === onPool), `${setting}: ${onPool ? 'always the pool' : 'always the event loop'}`)
    for (const o of await Promise.all(outcomes)) t.match(o, { kind: 'accepted' })
  }
})
