import crypto, { type KeyObject } from 'node:crypto'
import { parseDictionary, serializeInnerList, type InnerList } from 'structured-headers'

/** RFC 9421 §B.1.4 test-key-ed25519: the key the bad-input tests (test/README.md) sign with. */
export const TEST_PRIVATE_KEY_PEM = '-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF\n-----END PRIVATE KEY-----\n'
export const TEST_PRIVATE_KEY: KeyObject = crypto.createPrivateKey(TEST_PRIVATE_KEY_PEM)
export const TEST_PUBLIC_KEY = 'MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs='
export const TEST_PUBLIC_KEY_PEM = crypto.createPublicKey(TEST_PRIVATE_KEY).export({ format: 'pem', type: 'spki' }).toString()

/** B0, the body the bad-input tests start from (115 bytes), and its digest D0. */
export const B0 = '[{"email":"s@example.com","customer_handle":"acct_1","timestamp":1700000000,"event":"delivered","request_id":"r1"}]'
export const D0 = 'sha-256=:xi8L48+r/T6PxlGOh2/1239mkIv+r/1GcIPus7M2piQ=:'

export const nowSeconds = (): number => Math.floor(Date.now() / 1000)

export function sha256Digest (body: string | Uint8Array): string {
  return `sha-256=:${crypto.hash('sha256', body, 'base64')}:`
}

/** The `@signature-params` value the verifier rebuilds: the canonical re-serialisation, or the raw text when it does not parse. */
export function canonicalParams (params: string, label = 'sig_1'): string {
  try {
    const dict = parseDictionary(`${label}=${params}`)
    const member = dict.get(label)
    if (member !== undefined && Array.isArray(member[0])) return serializeInnerList(member as InnerList)
  } catch {}
  return params
}

export interface SignRawOptions {
  /** The Signature-Input member value after `label=`, exactly as it goes on the wire. */
  params: string
  body: string | Uint8Array
  /** Content-Digest field value. Default: sha-256 of the body. */
  contentDigest?: string
  label?: string
  key?: KeyObject
  /** What to sign as `@signature-params`. Default: `canonicalParams(params)`. */
  signedParams?: string
}

export interface RawDelivery {
  body: Buffer
  headers: { 'content-digest': string, 'signature-input': string, signature: string }
  /** The raw signature bytes. */
  sig: Buffer
}

/** Signs an arbitrary Signature-Input params string over body + Content-Digest (the "re-signed" fixtures). */
export function signRaw (o: SignRawOptions): RawDelivery {
  const label = o.label ?? 'sig_1'
  const body = Buffer.from(typeof o.body === 'string' ? Buffer.from(o.body, 'utf8') : o.body)
  const contentDigest = o.contentDigest ?? sha256Digest(body)
  const signed = o.signedParams ?? canonicalParams(o.params, label)
  const base = `"content-digest": ${contentDigest}\n"@signature-params": ${signed}`
  const sig = crypto.sign(null, Buffer.from(base, 'utf8'), o.key ?? TEST_PRIVATE_KEY)
  return {
    body,
    headers: {
      'content-digest': contentDigest,
      'signature-input': `${label}=${o.params}`,
      signature: `${label}=:${sig.toString('base64')}:`,
    },
    sig,
  }
}

/** P0 with a given created / keyid. */
export function p0 (created: number = nowSeconds(), keyId = 'mckey'): string {
  return `("content-digest");created=${created};alg="ed25519";keyid="${keyId}"`
}

/** A valid delivery of B0 (or another body), signed with the test key. */
export function validDelivery (body: string | Uint8Array = B0, created: number = nowSeconds(), keyId = 'mckey'): RawDelivery {
  return signRaw({ params: p0(created, keyId), body })
}
