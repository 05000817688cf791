import type { KeyObject } from 'node:crypto'
import { VerificationError } from '../errors.js'
import { importEd25519PublicKey, KeyRejectedError } from './public-key.js'

/** The public-key endpoint answers a few hundred bytes; more is garbage or an attack. */
export const MAX_KEY_RESPONSE_BYTES = 16 * 1024

export interface FetchPublicKeyOptions {
  /** Base URL as returned by `parseBaseUrl`. */
  baseUrl: string
  fetch: typeof globalThis.fetch
  signal: AbortSignal
}

/** The URL of the public-key endpoint for `keyId` (wire-format.md §1.4). */
export function publicKeyUrl (baseUrl: string, keyId: string): URL {
  const url = new URL(`${baseUrl}/tx/v1/webhook/public-key`)
  url.searchParams.set('id', keyId)
  return url
}

/**
 * Fetches and validates one signing key. Sends no API key and follows no redirect
 * (threat-model T9, T11). 404 and 400 mean `unknown_key`; anything else that is not a
 * valid Ed25519 key with the requested id means `key_unavailable`.
 */
export async function fetchPublicKey (keyId: string, { baseUrl, fetch, signal }: FetchPublicKeyOptions): Promise<KeyObject> {
  let res: Response
  try {
    res = await fetch(publicKeyUrl(baseUrl, keyId), { headers: { accept: 'application/json' }, redirect: 'error', signal })
  } catch (err) {
    const timedOut = signal.aborted || (err as Error)?.name === 'TimeoutError' || (err as Error)?.name === 'AbortError'
    throw unavailable(timedOut ? 'the public-key endpoint did not answer in time' : 'the public-key endpoint could not be reached')
  }
  if (res.status === 404 || res.status === 400) {
    await res.body?.cancel().catch(() => {})
    throw new VerificationError('unknown_key', `MailChannels does not know the signing key "${keyId}".`)
  }
  if (res.status !== 200) {
    await res.body?.cancel().catch(() => {})
    throw unavailable(`the public-key endpoint answered HTTP ${res.status}`)
  }
  let text: string
  try {
    text = await readCapped(res, MAX_KEY_RESPONSE_BYTES)
  } catch {
    throw unavailable('the public-key response could not be read, or was too large')
  }
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    throw unavailable('the public-key response is not JSON')
  }
  const rec = body as { id?: unknown, key?: unknown } | null
  if (typeof rec !== 'object' || rec === null || typeof rec.id !== 'string' || typeof rec.key !== 'string') {
    throw unavailable('the public-key response is not {"id", "key"}')
  }
  if (rec.id !== keyId) throw unavailable('the public-key response is for a different key id')
  try {
    return importEd25519PublicKey(rec.key)
  } catch (err) {
    throw unavailable(err instanceof KeyRejectedError ? `the served key was refused: ${err.message}` : 'the served key was refused')
  }
}

function unavailable (why: string): VerificationError {
  return new VerificationError('key_unavailable', `The signing key could not be fetched: ${why}. MailChannels will retry the delivery.`, 30)
}

/** Reads a response body as UTF-8, refusing more than `limit` bytes. */
export async function readCapped (res: Response, limit: number): Promise<string> {
  const declared = Number(res.headers.get('content-length'))
  if (declared > limit) {
    await res.body?.cancel().catch(() => {})
    throw new RangeError('response too large')
  }
  if (res.body === null) return ''
  const chunks: Uint8Array[] = []
  let size = 0
  const reader = res.body.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > limit) {
      await reader.cancel().catch(() => {})
      throw new RangeError('response too large')
    }
    chunks.push(value)
  }
  return Buffer.concat(chunks).toString('utf8')
}
