import { readFileSync } from 'node:fs'
import t from 'tap'
import { VerificationError } from '../../src/errors.js'
import { importEd25519PublicKey, KeyRejectedError } from '../../src/keys/public-key.js'
import { checkContentDigest, parseContentDigest } from '../../src/verify/content-digest.js'
import { verifyEd25519 } from '../../src/verify/signature.js'
import { isSmallOrder } from '../helpers/ed25519-math.js'
import { TEST_PUBLIC_KEY } from '../helpers/sign.js'

interface WycheproofTest { tcId: number, comment: string, flags: string[], msg: string, sig: string, result: 'valid' | 'invalid' | 'acceptable' }
interface WycheproofGroup { publicKey: { pk: string }, publicKeyDer: string, publicKeyPem: string, tests: WycheproofTest[] }
const file = JSON.parse(readFileSync(new URL('../fixtures/wycheproof/ed25519_test.json', import.meta.url), 'utf8')) as { numberOfTests: number, testGroups: WycheproofGroup[] }

/** What verifyEd25519 did: 'verified', 'rejected' (signature_invalid), or the unexpected error. Synchronous on Node, a promise with WebCrypto. */
async function outcome (run: () => void | Promise<void>): Promise<string> {
  try {
    await run()
    return 'verified'
  } catch (err) {
    if (err instanceof VerificationError && err.type === 'signature_invalid') return 'rejected'
    return `threw ${(err as Error)?.name}: ${(err as Error)?.message}`
  }
}

function errorType (run: () => void): string | null {
  try {
    run()
    return null
  } catch (err) {
    return err instanceof VerificationError ? err.type : String(err)
  }
}

t.test('Wycheproof ed25519_test.json through importEd25519PublicKey + verifyEd25519', async (t) => {
  let total = 0
  let valid = 0
  let invalid = 0
  let smallOrderGroups = 0
  for (const group of file.testGroups) {
    const raw = Buffer.from(group.publicKey.pk, 'hex')
    const keys = []
    for (const [form, material] of [['base64 SPKI', Buffer.from(group.publicKeyDer, 'hex').toString('base64')], ['PEM', group.publicKeyPem]] as const) {
      try {
        keys.push(importEd25519PublicKey(material))
      } catch (err) {
        t.type(err, KeyRejectedError, 'only KeyRejectedError')
        t.ok(isSmallOrder(raw), `group key ${group.publicKey.pk} (${form}) was refused, and it really is small-order`)
        smallOrderGroups++
      }
    }
    if (keys.length === 0) continue
    t.equal(keys.length, 2, 'both encodings import')
    for (const test of group.tests) {
      total++
      const msg = Buffer.from(test.msg, 'hex')
      const sig = Buffer.from(test.sig, 'hex')
      for (const key of keys) {
        const got = await outcome(() => verifyEd25519(msg, key, sig))
        const want = test.result === 'valid' ? 'verified' : 'rejected'
        if (got !== want) t.fail(`tc ${test.tcId} (${test.comment}; ${test.flags.join(',')}): expected ${want}, got ${got}`)
      }
      if (test.result === 'valid') valid++
      else invalid++
    }
  }
  t.equal(total, file.numberOfTests, `all ${file.numberOfTests} vectors ran`)
  t.equal(total, 151)
  t.ok(valid > 0 && invalid > 0, `${valid} valid verified, ${invalid} invalid rejected`)
  t.equal(smallOrderGroups, 0, 'no group key of this file is small-order, so none was refused')
  t.pass(`vectors: ${valid} valid, ${invalid} invalid, ${smallOrderGroups} small-order group keys`)
})

t.test('RFC 9421 §B.2.6 Ed25519 known answer, and the same base with a trailing LF fails', async (t) => {
  const base = [
    '"date": Tue, 20 Apr 2021 02:07:55 GMT',
    '"@method": POST',
    '"@path": /foo',
    '"@authority": example.com',
    '"content-type": application/json',
    '"content-length": 18',
    '"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
  ].join('\n')
  const sig = Buffer.from('wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==', 'base64')
  const key = importEd25519PublicKey(TEST_PUBLIC_KEY)
  t.equal(await outcome(() => verifyEd25519(Buffer.from(base), key, sig)), 'verified')
  t.equal(await outcome(() => verifyEd25519(Buffer.from(base + '\n'), key, sig)), 'rejected')
})

t.test('RFC 9530 sample digests for {"hello": "world"} through checkContentDigest', async (t) => {
  const body = Buffer.from('{"hello": "world"}')
  const sha256 = 'sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:'
  const sha512 = 'sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:'
  for (const field of [sha256, sha512, `${sha256}, ${sha512}`, `${sha512},${sha256}`]) {
    t.doesNotThrow(() => checkContentDigest(parseContentDigest(field), body), field.slice(0, 12))
    // one byte more (the trailing newline a re-serialiser adds) does not match
    t.equal(errorType(() => checkContentDigest(parseContentDigest(field), Buffer.concat([body, Buffer.from('\n')]))), 'digest_mismatch')
  }
  t.equal(errorType(() => checkContentDigest(parseContentDigest(sha256), Buffer.from('{"hello":"world"}'))), 'digest_mismatch', 're-serialised JSON does not match')
})
