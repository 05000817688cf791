// The two crypto ports (`#crypto`: node.ts on Node, web.ts elsewhere) must agree on every
// answer, so a delivery verifies, hashes and decodes the same on every runtime.
import crypto from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import * as node from '../../src/crypto/node.js'
import * as web from '../../src/crypto/web.js'
import type { VerifyKey } from '../../src/crypto/types.js'

const bytes = fc.uint8Array({ maxLength: 300 })

t.test('hashes, encodings and comparisons agree', async (t) => {
  fc.assert(fc.property(bytes, fc.string({ unit: 'grapheme', maxLength: 100 }), (data, text) => {
    for (const alg of ['sha256', 'sha512'] as const) {
      const want = crypto.hash(alg, data, 'buffer')
      if (!want.equals(web.hash(alg, data)) || !want.equals(node.hash(alg, data))) return false
      if (!Buffer.from(web.hash(alg, text)).equals(crypto.hash(alg, text, 'buffer'))) return false
      const text64 = want.toString('base64url')
      if (web.hashBase64url(alg, data) !== text64 || node.hashBase64url(alg, data) !== text64) return false
      if (web.hashBase64url(alg, text) !== node.hashBase64url(alg, text)) return false
    }
    const b64 = Buffer.from(data).toString('base64')
    return web.base64url(data) === node.base64url(data) &&
      Buffer.from(web.base64Decode(b64)).equals(Buffer.from(node.base64Decode(b64))) &&
      web.utf8(data) === node.utf8(data) &&
      web.timingSafeEqual(data, Uint8Array.from(data)) && node.timingSafeEqual(data, Uint8Array.from(data)) &&
      (data.length === 0 || (!web.timingSafeEqual(data, data.map((b) => b ^ 1)) && !node.timingSafeEqual(data, data.map((b) => b ^ 1)))) &&
      !web.timingSafeEqual(data, new Uint8Array(data.length + 1))
  }), { numRuns: 300 })
  const latin = String.fromCharCode(...Array.from({ length: 256 }, (_, i) => i))
  t.same(Buffer.from(web.latin1(latin)), Buffer.from(node.latin1(latin)), 'latin1 over all 256 code points')
  t.equal(web.utf8(Buffer.from([0xc3, 0x28])), undefined, 'invalid UTF-8 is refused (web)')
  t.equal(node.utf8(Buffer.from([0xc3, 0x28])), undefined, 'invalid UTF-8 is refused (node)')
  t.equal(web.utf8(Buffer.from('h\u00e9llo \u{1f600}')), 'h\u00e9llo \u{1f600}')
})

t.test('digest (the verify path\'s hash): synchronous on Node, WebCrypto\'s promise on the web port, the same bytes', async (t) => {
  await fc.assert(fc.asyncProperty(bytes, async (data) => {
    for (const alg of ['sha256', 'sha512'] as const) {
      const want = crypto.hash(alg, data, 'buffer')
      const fromNode = node.digest(alg, data)
      const fromWeb = web.digest(alg, data)
      if (!(fromNode instanceof Uint8Array) || !(fromWeb instanceof Promise)) return false
      if (!want.equals(fromNode) || !want.equals(await fromWeb)) return false
    }
    return true
  }), { numRuns: 100 })
})

t.test('Ed25519 verify agrees, and keys compare by value', async (t) => {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519')
  const raw = publicKey.export({ format: 'der', type: 'spki' }).subarray(12)
  const other = crypto.generateKeyPairSync('ed25519').publicKey.export({ format: 'der', type: 'spki' }).subarray(12)
  const ports = { node, web } as const
  for (const [name, port] of Object.entries(ports)) {
    const key: VerifyKey = port.importRawEd25519(raw)
    t.ok(port.sameKey(key, port.importRawEd25519(raw)), `${name}: the same bytes are the same key`)
    t.notOk(port.sameKey(key, port.importRawEd25519(other)), `${name}: other bytes are another key`)
    for (let i = 0; i < 20; i++) {
      const msg = crypto.randomBytes(i * 7)
      const sig = crypto.sign(null, msg, privateKey)
      t.equal(await port.verify(key, msg, sig), true, `${name}: valid`)
      t.equal(await port.verifyOffThread(key, msg, sig), true, `${name}: valid off thread`)
      const bad = Buffer.from(sig)
      bad[i % 64] = bad[i % 64]! ^ 1
      t.equal(await port.verify(key, msg, bad), false, `${name}: a flipped bit fails`)
      t.equal(await port.verify(key, msg, sig.subarray(1)), false, `${name}: a short signature fails, never throws`)
    }
  }
  t.equal(typeof node.verify(node.importRawEd25519(raw), Buffer.from('x'), new Uint8Array(64)), 'boolean', 'the Node port answers synchronously')
})
