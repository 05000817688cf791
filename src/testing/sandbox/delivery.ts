import { performance } from 'node:perf_hooks'
import { parseHttpsOrLoopbackUrl } from '../../base-url.js'
import type { SignedWebhook } from '../sign-webhook.js'
import { statusCategory, type SandboxBatchStatus } from './batch-query.js'

/** What one POST of a batch came to. */
export interface PostOutcome {
  status: SandboxBatchStatus
  statusCode: number | null
  durationMs: number
  /** Why there was no response (timeout, refused connection), when there was none. */
  error: string | null
  /** The start of the response body (UTF-8, lossy), when asked for with `captureBytes`; otherwise `null`. */
  body: string | null
}

const MAX_RESPONSE_BYTES = 64 * 1024

/**
 * Validates a delivery target once: `https:` anywhere, `http:` only on a loopback host,
 * so the sandbox never sends test traffic across a network in the clear. Throws a TypeError naming `option`.
 */
export function parseTarget (value: unknown, option = 'target'): string {
  return parseHttpsOrLoopbackUrl(value, option, 'must be an http: URL on a loopback host (e.g. http://127.0.0.1:3000/webhooks) or an https: URL').href
}

/**
 * Reads a response body (bounded), so a keep-alive socket can be reused, keeping its first
 * `keep` bytes.
 */
async function drain (response: Response, keep = 0): Promise<Uint8Array> {
  const kept: Uint8Array[] = []
  let keptBytes = 0
  if (response.body === null) return new Uint8Array(0)
  const reader = response.body.getReader()
  let read = 0
  try {
    while (read <= MAX_RESPONSE_BYTES) {
      const { done, value } = await reader.read()
      if (done) break
      read += value.byteLength
      if (keptBytes < keep) {
        const part = value.subarray(0, keep - keptBytes)
        kept.push(part)
        keptBytes += part.byteLength
      }
    }
    if (read > MAX_RESPONSE_BYTES) await reader.cancel()
  } catch {
    // The status is what counts; a body cut short does not change it.
  }
  return Buffer.concat(kept)
}

/**
 * POSTs one signed batch as the service does and classifies the outcome. Never throws:
 * a timeout or a refused connection is `no_response` with `statusCode: null`. Redirects are
 * not followed (a 3xx is recorded as such).
 */
export async function postBatch (target: string, signed: SignedWebhook, timeoutMs: number, signal: AbortSignal, captureBytes = 0): Promise<PostOutcome> {
  const started = performance.now()
  const elapsed = (): number => Math.max(0, Math.round(performance.now() - started))
  try {
    const response = await fetch(target, {
      method: 'POST',
      headers: { ...signed.headers, 'user-agent': 'mailchannels-webhooks-sandbox' },
      body: signed.body,
      redirect: 'manual',
      signal: AbortSignal.any([AbortSignal.timeout(timeoutMs), signal]),
    })
    const durationMs = elapsed()
    const kept = await drain(response, captureBytes)
    const body = captureBytes > 0 ? Buffer.from(kept).toString('utf8') : null
    return { status: statusCategory(response.status), statusCode: response.status, durationMs, error: null, body }
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code
    const name = (err as Error).name
    const error = name === 'TimeoutError' ? `timed out after ${timeoutMs} ms` : cause ?? name
    return { status: 'no_response', statusCode: null, durationMs: elapsed(), error, body: null }
  }
}
