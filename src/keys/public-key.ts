import { base64Decode, fromKeyObject, importRawEd25519 } from '#crypto'
import { ED25519_SPKI_PREFIX, isWeakEd25519Point } from '../crypto/ed25519-point.js'
import type { VerifyKey } from '../crypto/types.js'

export { ED25519_SPKI_PREFIX, isWeakEd25519Point }

// Algorithm OIDs of SPKI keys that are not Ed25519, as DER (tag 06, length, value) in hex, to say what was served instead.
const OTHER_KEY_TYPES: Array<[oid: string, name: string]> = [
  ['06032b656e', 'x25519'], ['06032b6571', 'ed448'], ['06032b656f', 'x448'],
  ['06092a864886f70d010101', 'rsa'], ['06092a864886f70d01010a', 'rsa-pss'], ['06072a8648ce3d0201', 'ec'], ['06072a8648ce380401', 'dsa'],
]

/** Why a key was refused (never echoes the key). */
export class KeyRejectedError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'KeyRejectedError'
  }
}

/** The raw 32-byte point of an Ed25519 SPKI DER, or a refusal saying what the DER is instead. */
function ed25519Point (der: Uint8Array, pass: string): Uint8Array {
  if (der.length === 44 && ED25519_SPKI_PREFIX.every((b, i) => der[i] === b)) return der.subarray(12)
  // A DER SEQUENCE holding an AlgorithmIdentifier: name the algorithm when it is a known one.
  const hexDer = Array.from(der.subarray(0, 64), (b) => b.toString(16).padStart(2, '0')).join('')
  if (der[0] === 0x30) {
    for (const [oid, name] of OTHER_KEY_TYPES) if (hexDer.includes(oid)) throw new KeyRejectedError(`the key is ${name}, not Ed25519`)
  }
  throw new KeyRejectedError(`the key is not a valid SPKI public key (${der.length} bytes): ${pass}`)
}

const PEM = /^\s*-----BEGIN PUBLIC KEY-----\r?\n?([A-Za-z0-9+/=\s]*)-----END PUBLIC KEY-----\s*$/
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/
/** Line breaks written as the two characters `\n` (or `\r\n`), as a .env file or a JSON string holds a PEM. */
const ESCAPED_NEWLINE = /\\r\\n|\\n/

/** What to pass instead, said after every refusal of a key's shape. */
const WHAT_TO_PASS = 'pass the key as MailChannels serves it: a PEM (-----BEGIN PUBLIC KEY-----) or its base64 SPKI DER (which starts MCowBQYDK2VwAyEA)'
const WHAT_TO_PASS_LENIENT = `${WHAT_TO_PASS}, or a raw 32-byte Ed25519 key as base64 or 64 hex digits`

/** How `importEd25519PublicKey` reads its input. */
export interface ImportEd25519Options {
  /**
   * Also take the shapes people paste into configuration: a raw 32-byte Ed25519 key (base64 or
   * 64 hex digits) and a PEM whose line breaks are written `\n`. Off for keys served by the API,
   * which are always SPKI.
   * @default false
   */
  lenient?: boolean
}

function hexDecode (hex: string): Uint8Array {
  return Uint8Array.from(hex.match(/../g)!, (b) => Number.parseInt(b, 16))
}

/** The refusal of a raw 32-byte key where an SPKI key is required (the key is never echoed). */
function rawRefused (encoding: string): KeyRejectedError {
  return new KeyRejectedError(`the key is a raw 32-byte Ed25519 key (${encoding}), not an SPKI public key: ${WHAT_TO_PASS}`)
}

/**
 * Turns key material as MailChannels serves it (base64 SPKI DER, or PEM) into an Ed25519
 * key ready to verify with, refusing anything else: other key types (RSA, X25519, P-256...),
 * garbage, and small-order or non-canonical points. With `lenient`, a raw 32-byte key (base64
 * or hex) and a PEM with `\n`-escaped line breaks are taken too; without it they are refused
 * saying what they are. Throws `KeyRejectedError`, whose message never holds the key.
 */
export function importEd25519PublicKey (material: string, options: ImportEd25519Options = {}): VerifyKey {
  if (typeof material !== 'string' || material.length === 0 || material.length > 4096) {
    throw new KeyRejectedError('the key is not a non-empty string of reasonable length')
  }
  const lenient = options.lenient === true
  const pass = lenient ? WHAT_TO_PASS_LENIENT : WHAT_TO_PASS
  let raw: Uint8Array
  if (material.includes('-----BEGIN')) {
    const blocks = material.match(/-----BEGIN /g)?.length ?? 0
    if (blocks !== 1) throw new KeyRejectedError('the PEM holds more than one block')
    // Only SPKI is a served key (not a private key or a certificate).
    if (!material.includes('-----BEGIN PUBLIC KEY-----')) throw new KeyRejectedError('the PEM is not a PUBLIC KEY (SPKI) block')
    let pem = material
    if (ESCAPED_NEWLINE.test(pem)) { // (not /g: test() would keep a lastIndex)
      if (!lenient) throw new KeyRejectedError(`the PEM's line breaks are written as \\n (as a .env file holds them), not as line breaks: ${WHAT_TO_PASS}, with real line breaks`)
      pem = pem.replace(new RegExp(ESCAPED_NEWLINE, 'g'), '\n')
    }
    const m = PEM.exec(pem)
    if (m === null) throw new KeyRejectedError(`the PEM's body is not base64: ${pass}`)
    const b64 = m[1]!.replace(/\s+/g, '')
    if (!BASE64.test(b64)) throw new KeyRejectedError(`the PEM's body is not base64: ${pass}`)
    raw = ed25519Point(base64Decode(b64), pass)
  } else {
    const text = material.replace(/\s+/g, '')
    if (/^[0-9a-fA-F]{64}$/.test(text)) {
      // 64 hex digits: 32 bytes. No base64 SPKI key is all hex digits (it starts "MCow").
      if (!lenient) throw rawRefused('64 hex digits')
      raw = hexDecode(text)
    } else {
      if (!BASE64.test(text)) throw new KeyRejectedError(`the key is neither PEM nor base64: ${pass}`)
      const der = base64Decode(text)
      if (der.length === 32) {
        if (!lenient) throw rawRefused('base64')
        raw = der
      } else {
        raw = ed25519Point(der, pass)
      }
    }
  }
  if (isWeakEd25519Point(raw)) {
    throw new KeyRejectedError('the key is a small-order or non-canonical Ed25519 point, with which forged signatures verify')
  }
  return importRawEd25519(raw)
}

/**
 * A key object given as the `publicKey` option: a `CryptoKey` (or, on Node, a `KeyObject`)
 * holding an Ed25519 public key that is not a small-order or non-canonical point.
 * Throws `KeyRejectedError`.
 */
export function importEd25519KeyObject (material: object): VerifyKey {
  const imported = fromKeyObject(material)
  if (imported === undefined) throw new KeyRejectedError('the key is not an Ed25519 public key')
  if (imported.raw !== null && isWeakEd25519Point(imported.raw)) {
    throw new KeyRejectedError('the key is a small-order or non-canonical Ed25519 point, with which forged signatures verify')
  }
  return imported.key
}
