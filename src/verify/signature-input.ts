import { VerificationError } from '../errors.js'
import { base64Decode } from '#crypto'
import { KEY_ID_PATTERN, KEY_ID_RULE } from '../keys/key-id.js'
import { parseDictionaryField, type InnerList, type Item } from './structured-fields.js'

/** The signature a delivery carries, after the strict MailChannels profile was applied. */
export interface ParsedSignature {
  label: string
  keyId: string
  /** Unix seconds. */
  created: number
  /** Unix seconds, when the signer set it. */
  expires: number | undefined
  /** The `@signature-params` value: the canonical serialisation of the parsed member (RFC 9421 §2.3). */
  params: string
  /** The 64 raw signature bytes. */
  signature: Uint8Array
}

const malformed = (message: string): VerificationError => new VerificationError('malformed_header', message)
const notOne = (name: string): VerificationError => malformed(`The ${name} header must hold exactly one signature (it holds several, or the header was sent twice).`)
const mustBe = (key: string, what: string): VerificationError => malformed(`Signature-Input "${key}" must be ${what}.`)

// The form MailChannels sends, which is also the canonical serialisation: for it the
// compliant parse below would give exactly these values, so it may skip the parser.
// Anything else (other order, spaces, extra parameters...) takes the full path.
const CANONICAL_INPUT = /^([a-z*][a-z0-9_.*-]{0,63})=(\("content-digest"\);created=(0|[1-9][0-9]{0,14});alg="ed25519";keyid="([A-Za-z0-9._~-]{1,64})")$/
const CANONICAL_SIGNATURE = /^([a-z*][a-z0-9_.*-]{0,63})=:([A-Za-z0-9+/]{86}==):$/

/**
 * Applies the strict profile to `Signature-Input` and `Signature`: one member each,
 * the same label, covered components exactly `("content-digest")`, `created` an
 * Integer, `keyid` a sane String, `alg` absent or `"ed25519"`, a 64-byte signature.
 */
export function parseSignature (signatureInput: string, signatureHeader: string): ParsedSignature {
  const input = CANONICAL_INPUT.exec(signatureInput)
  const sig = CANONICAL_SIGNATURE.exec(signatureHeader)
  if (input !== null && sig !== null && input[1] === sig[1]) {
    return {
      label: input[1]!,
      keyId: input[4]!,
      created: Number(input[3]),
      expires: undefined,
      params: input[2]!,
      signature: base64Decode(sig[2]!),
    }
  }
  return parseSignatureStrict(signatureInput, signatureHeader)
}

/** The full path: the strict RFC 9651 parse, then the profile with explicit type checks. Exported for tests. */
export function parseSignatureStrict (signatureInput: string, signatureHeader: string): ParsedSignature {
  // The parser refuses repeated labels and parameters, so what it returns is all there is.
  const inputDict = parseDictionaryField(signatureInput, 'Signature-Input')
  if (inputDict.size !== 1) throw notOne('Signature-Input')
  const [label, member] = inputDict.entries().next().value as [string, Item | InnerList]

  const sigDict = parseDictionaryField(signatureHeader, 'Signature')
  if (sigDict.size !== 1) throw notOne('Signature')
  const sigMember = sigDict.get(label)
  if (sigMember === undefined) throw malformed('The Signature and Signature-Input headers use different labels.')

  if (!Array.isArray(member[0])) throw malformed('Signature-Input must list its covered components in parentheses.')
  const [items, params] = member as InnerList
  if (items.length !== 1 || items[0]![0] !== 'content-digest' || items[0]![1].size !== 0) {
    throw malformed('Signature-Input must cover exactly ("content-digest").')
  }

  let created: number | undefined
  let expires: number | undefined
  let keyId: string | undefined
  // The canonical `@signature-params` (RFC 9421 §2.3, RFC 9651 §4.1), written as the parameters
  // are checked: the profile leaves only Integers and Strings of visible ASCII (the parser refused
  // the rest), in the order received. Written here rather than with a general serializer, which is
  // most of its size in a Worker bundle; the tests sign with structured-headers' serializer, so the
  // two are checked against each other.
  let serialized = '("content-digest")'
  for (const [key, value] of params) {
    switch (key) {
      case 'created':
      case 'expires':
        if (typeof value !== 'number') throw mustBe(key, 'an Integer (Unix seconds)')
        if (key === 'created') created = value
        else expires = value
        break
      case 'keyid':
        if (typeof value !== 'string' || !KEY_ID_PATTERN.test(value)) {
          throw mustBe(key, `a String of ${KEY_ID_RULE}`)
        }
        keyId = value
        break
      case 'alg':
      case 'nonce':
      case 'tag':
        if (typeof value !== 'string') throw mustBe(key, 'a String')
        if (key === 'alg' && value !== 'ed25519') throw new VerificationError('unsupported_algorithm', 'Signature-Input "alg" must be "ed25519"; no other algorithm is accepted.')
        break
      default:
        throw malformed(`Signature-Input has a parameter this profile does not allow ("${key.slice(0, 32)}").`)
    }
    // JSON escapes a String of visible ASCII as RFC 9651 does: `"` and `\` only.
    serialized += `;${key}=${typeof value === 'number' ? value : JSON.stringify(value)}`
  }
  if (created === undefined || keyId === undefined) throw malformed(`Signature-Input has no "${created === undefined ? 'created' : 'keyid'}" parameter.`)

  const [sigValue, sigParams] = sigMember as Item
  if (!(sigValue instanceof Uint8Array) || sigParams.size !== 0) {
    throw malformed('The Signature value must be a byte sequence (:base64:) with no parameters.')
  }
  if (sigValue.byteLength !== 64) {
    // A well-formed header whose signature cannot be valid: an authentication failure, not a malformed header.
    throw new VerificationError('signature_invalid', 'The signature is not 64 bytes long, as an Ed25519 signature is.')
  }

  return {
    label,
    keyId,
    created,
    expires,
    params: serialized,
    signature: sigValue,
  }
}
