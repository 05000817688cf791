import type { VerifyKey } from '../crypto/types.js'
import type { KeyFetchCause } from '../diagnostics/types.js'
import { fetchErrorCause } from '../diagnostics/key-fetch.js'
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

/** The URL of the public-key endpoint for `keyId`: `<baseUrl>/tx/v1/webhook/public-key?id=<keyId>`. */
export function publicKeyUrl (baseUrl: string, keyId: string): URL {
  const url = new URL(`${baseUrl}/tx/v1/webhook/public-key`)
  url.searchParams.set('id', keyId)
  return url
}

// The causes are the diagnostics message's vocabulary (keys/ imports diagnostics/, never the reverse).
export type { KeyFetchCause }

/**
 * A failed key fetch: a `VerificationError` (`unknown_key` or `key_unavailable`, with a
 * message safe to return to the sender) that also says, for the log, where and why.
 */
export interface KeyFetchError extends VerificationError {
  /** The URL fetched (the base URL carries no credentials, the query only the key id). */
  readonly url: string
  readonly reason: KeyFetchCause
  /** The HTTP status, when the endpoint answered. */
  readonly status: number | undefined
  /** What went wrong, for the log. */
  readonly detail: string
}

/** A `KeyFetchError`: a `VerificationError` with the log's fields (no class of its own: less of a Worker bundle). */
function keyFetchError (type: 'unknown_key' | 'key_unavailable', message: string, url: string, reason: KeyFetchCause, detail: string, status?: number): KeyFetchError {
  return Object.assign(new VerificationError(type, message, type === 'key_unavailable' ? 30 : undefined), { url, reason, status, detail })
}

/**
 * Fetches and validates one signing key. Sends no API key (the endpoint is public) and follows
 * no redirect (a redirect could send the fetch elsewhere): `redirect: 'manual'` (what every runtime accepts: Cloudflare workerd
 * refuses `'error'`), and any 3xx, or an opaque redirect (status 0), is a failed fetch.
 * 404 and 400 mean `unknown_key`; anything else that is not a valid Ed25519 key with the
 * requested id means `key_unavailable`. Throws `KeyFetchError`.
 */
export async function fetchPublicKey (keyId: string, { baseUrl, fetch, signal }: FetchPublicKeyOptions): Promise<VerifyKey> {
  const url = publicKeyUrl(baseUrl, keyId)
  const href = url.href
  const unavailable = (reason: KeyFetchCause, why: string, status?: number): KeyFetchError =>
    keyFetchError('key_unavailable', `The signing key could not be fetched: ${why}. MailChannels will retry the delivery.`, href, reason, why, status)
  let res: Response
  try {
    res = await fetch(url, { headers: { accept: 'application/json' }, redirect: 'manual', signal })
  } catch (err) {
    const [reason, why] = signal.aborted ? [abortCause(signal)] : fetchErrorCause(err)
    throw unavailable(reason, why ?? NETWORK_WHY[reason] ?? 'the public-key endpoint could not be reached')
  }
  if (res.status !== 200 || res.redirected) {
    await res.body?.cancel().catch(() => {})
    const status = res.status
    if (res.type === 'opaqueredirect' || (status >= 300 && status < 400) || res.redirected) {
      throw unavailable('redirect', `the public-key endpoint answered with a redirect (HTTP ${status}), which is never followed`, status)
    }
    if (status === 404 || status === 400) {
      throw keyFetchError('unknown_key', `MailChannels does not know the signing key "${keyId}".`, href, 'not_found', `the public-key endpoint answered HTTP ${status}`, status)
    }
    throw unavailable('http_status', `the public-key endpoint answered HTTP ${status}`, status)
  }
  let text: string
  try {
    text = await readCapped(res, MAX_KEY_RESPONSE_BYTES)
  } catch (err) {
    if (err instanceof RangeError) throw unavailable('too_large', `the public-key response is larger than ${MAX_KEY_RESPONSE_BYTES} bytes`, 200)
    const reason = signal.aborted ? abortCause(signal) : 'connection_reset'
    throw unavailable(reason, 'the public-key response could not be read', 200)
  }
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    throw unavailable('invalid_response', 'the public-key response is not JSON', 200)
  }
  const rec = body as { id?: unknown, key?: unknown } | null
  if (typeof rec !== 'object' || rec === null || typeof rec.id !== 'string' || typeof rec.key !== 'string') {
    throw unavailable('invalid_response', 'the public-key response is not {"id", "key"}', 200)
  }
  if (rec.id !== keyId) throw unavailable('invalid_response', 'the public-key response is for a different key id', 200)
  try {
    return importEd25519PublicKey(rec.key)
  } catch (err) {
    throw unavailable('invalid_key', err instanceof KeyRejectedError ? `the served key was refused: ${err.message}` : 'the served key was refused', 200)
  }
}

// What the log says per cause; the causes only Node's errors reveal (dns, tls...) are worded by
// the Node #diagnostics port (src/diagnostics/network-cause.ts), so a Worker bundle leaves them out.
const NETWORK_WHY: Partial<Record<KeyFetchCause, string>> = {
  timeout: 'the public-key endpoint did not answer in time',
  aborted: 'the fetch was cancelled',
  connection_reset: 'the connection to the public-key endpoint was reset',
}

function abortCause (signal: AbortSignal): KeyFetchCause {
  return (signal.reason as Error | undefined)?.name === 'TimeoutError' ? 'timeout' : 'aborted'
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
  return new Blob(chunks).text()
}
