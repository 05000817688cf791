// The key shapes people paste into configuration: a raw 32-byte Ed25519 key (base64 or hex, as
// other tools print it) and a PEM whose line breaks are written `\n` (as a .env file holds it).
// Given as the `publicKey` option they verify like the SPKI key they stand for; served by the
// key API (always SPKI) they are refused saying what they are. Every refusal says what to pass
// and never holds the key.
import crypto from 'node:crypto'
import t, { type Test } from 'tap'
import { verifyWebhook } from '../../src/index.js'
import { importEd25519PublicKey, KeyRejectedError } from '../../src/keys/public-key.js'
import { TEST_PUBLIC_KEY, TEST_PUBLIC_KEY_PEM, validDelivery } from '../helpers/sign.js'

const raw = Buffer.from(TEST_PUBLIC_KEY, 'base64').subarray(12)
const RAW_BASE64 = raw.toString('base64')
const RAW_HEX = raw.toString('hex')
const ESCAPED_PEM = TEST_PUBLIC_KEY_PEM.trim().replaceAll('\n', '\\n') // what `KEY="-----BEGIN...\n...\n-----END..."` reads as
const ESCAPED_PEM_CRLF = TEST_PUBLIC_KEY_PEM.trim().replaceAll('\n', '\\r\\n')
/** The key's bytes in every encoding a message could leak them in. */
const LEAKS = [RAW_BASE64.slice(0, 16), RAW_HEX.slice(0, 16), RAW_HEX.slice(0, 16).toUpperCase(), TEST_PUBLIC_KEY.slice(16, 32)]

function noKeyIn (t: Test, message: string | undefined): void {
  for (const leak of LEAKS) t.notOk(message?.includes(leak), `the message holds no key material (${leak.slice(0, 4)}...)`)
}

t.test('given as the publicKey option, the pasted shapes verify as the SPKI key does', async (t) => {
  const d = validDelivery()
  for (const [name, publicKey] of [
    ['raw 32 bytes, base64', RAW_BASE64],
    ['raw 32 bytes, hex', RAW_HEX],
    ['raw 32 bytes, upper-case hex', RAW_HEX.toUpperCase()],
    ['PEM with \\n escapes', ESCAPED_PEM],
    ['PEM with \\r\\n escapes', ESCAPED_PEM_CRLF],
  ] as const) {
    const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey })
    t.equal(r.error, null, `${name}: verified`)
    t.equal(r.data?.length, 1, `${name}: the event`)
  }
})

t.test('a pasted key of the wrong key pair still fails the signature, not the options', async (t) => {
  const d = validDelivery()
  const other = crypto.generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x!
  const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: Buffer.from(other, 'base64url').toString('hex') })
  t.equal(r.error?.type, 'signature_invalid')
})

t.test('a raw small-order point is refused as its SPKI form is', async (t) => {
  const identity = Buffer.concat([Buffer.from([1]), Buffer.alloc(31)])
  for (const publicKey of [identity.toString('base64'), identity.toString('hex')]) {
    const d = validDelivery()
    const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey })
    t.equal(r.error?.type, 'validation_error')
    t.match(r.error?.message, /^publicKey is not usable: the key is a small-order or non-canonical Ed25519 point/)
  }
})

t.test('served by the key API (strict): the raw and escaped shapes are refused, saying what they are and what to pass', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['raw base64', RAW_BASE64, /^the key is a raw 32-byte Ed25519 key \(base64\), not an SPKI public key: pass the key as MailChannels serves it: a PEM \(-----BEGIN PUBLIC KEY-----\) or its base64 SPKI DER/],
    ['raw hex', RAW_HEX, /^the key is a raw 32-byte Ed25519 key \(64 hex digits\), not an SPKI public key: pass/],
    ['escaped PEM', ESCAPED_PEM, /^the PEM's line breaks are written as \\n \(as a \.env file holds them\), not as line breaks: pass .* with real line breaks$/],
  ]
  for (const [name, material, message] of cases) {
    const err = t.throws(() => importEd25519PublicKey(material)) as Error
    t.ok(err instanceof KeyRejectedError, `${name}: KeyRejectedError`)
    t.match(err.message, message, name)
    noKeyIn(t, err.message)
  }
})

t.test('refusals of the publicKey option say what to pass, and never hold the key', async (t) => {
  const d = validDelivery()
  const cases: Array<[string, string, RegExp]> = [
    // 31 bytes: a raw key cut short
    ['31 bytes of base64', raw.subarray(1).toString('base64'), /^publicKey is not usable: the key is not a valid SPKI public key \(31 bytes\): pass the key as MailChannels serves it: .*, or a raw 32-byte Ed25519 key as base64 or 64 hex digits$/],
    ['62 hex digits', RAW_HEX.slice(2), /^publicKey is not usable: the key is not a valid SPKI public key \(\d+ bytes\): pass /],
    ['base64url', raw.toString('base64url').replace(/[A-Za-z0-9]/, '-'), /^publicKey is not usable: the key is neither PEM nor base64: pass /],
    ['a PEM with a broken body', TEST_PUBLIC_KEY_PEM.replace('MCow', 'MC!w'), /^publicKey is not usable: the PEM's body is not base64: pass /],
  ]
  for (const [name, publicKey, message] of cases) {
    const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey })
    t.equal(r.error?.type, 'validation_error', name)
    t.match(r.error?.message, message, name)
    noKeyIn(t, r.error?.message)
  }
})
