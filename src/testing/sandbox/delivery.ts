import http from 'node:http'
import https from 'node:https'
import { performance } from 'node:perf_hooks'
import { parseHttpsOrLoopbackUrl } from '../../base-url.js'
import type { HeaderLine } from '../inspector/describe.js'
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
  /** Every request header, in the order sent: nothing else went on the wire. */
  requestHeaders: HeaderLine[]
  /** The response's headers as received (at most 100), when there was a response. */
  responseHeaders: HeaderLine[] | null
  /** More response body arrived than `captureBytes`. */
  bodyTruncated: boolean
}

const MAX_RESPONSE_BYTES = 64 * 1024
const MAX_RESPONSE_HEADERS = 100
export const USER_AGENT = 'mailchannels-webhooks-sandbox'

/**
 * Validates a delivery target once: `https:` anywhere, `http:` only on a loopback host,
 * so the sandbox never sends test traffic across a network in the clear. Throws a TypeError naming `option`.
 */
export function parseTarget (value: unknown, option = 'target'): string {
  return parseHttpsOrLoopbackUrl(value, option, 'must be an http: URL on a loopback host (e.g. http://127.0.0.1:3000/webhooks) or an https: URL').href
}

/** Keep-alive connections of one sandbox: destroyed when it closes. */
export interface DeliveryAgents {
  http: http.Agent
  https: https.Agent
}

export function createAgents (): DeliveryAgents {
  return { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) }
}

export function destroyAgents (agents: DeliveryAgents): void {
  agents.http.destroy()
  agents.https.destroy()
}

/**
 * POSTs one signed batch as the service does and classifies the outcome. Never throws:
 * a timeout or a refused connection is `no_response` with `statusCode: null`. Redirects are
 * not followed (a 3xx is recorded as such). The request carries exactly the headers listed in
 * `requestHeaders` (node:http adds none when host, length and connection are given), so the
 * inspector can show what the receiver got.
 */
export function postBatch (target: string, signed: SignedWebhook, timeoutMs: number, signal: AbortSignal, captureBytes = 0, agents?: DeliveryAgents): Promise<PostOutcome> {
  const started = performance.now()
  const elapsed = (): number => Math.max(0, Math.round(performance.now() - started))
  const url = new URL(target)
  const requestHeaders: HeaderLine[] = [
    ['host', url.host],
    ['content-type', signed.headers['content-type']],
    ['content-digest', signed.headers['content-digest']],
    ['signature-input', signed.headers['signature-input']],
    ['signature', signed.headers.signature],
    ['user-agent', USER_AGENT],
    ['content-length', String(signed.body.length)],
    ['connection', 'keep-alive'],
  ]
  const https_ = url.protocol === 'https:'
  return new Promise<PostOutcome>((resolve) => {
    let settled = false
    let timedOut = false
    let durationMs = 0
    const finish = (outcome: Omit<PostOutcome, 'requestHeaders'>): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      signal.removeEventListener('abort', onAbort)
      resolve({ ...outcome, requestHeaders })
    }
    const noResponse = (error: string): void => finish({ status: 'no_response', statusCode: null, durationMs: elapsed(), error, body: null, responseHeaders: null, bodyTruncated: false })
    const request = (https_ ? https : http).request(url, {
      method: 'POST',
      // An array keeps the order and the names exactly as listed.
      headers: requestHeaders.flat(),
      agent: https_ ? agents?.https : agents?.http,
      setHost: false,
    })
    const timer = setTimeout(() => {
      timedOut = true
      request.destroy()
    }, timeoutMs)
    const onAbort = (): void => { request.destroy() }
    if (signal.aborted) onAbort()
    else signal.addEventListener('abort', onAbort, { once: true })
    request.on('error', (err: NodeJS.ErrnoException) => {
      if (timedOut) noResponse(`timed out after ${timeoutMs} ms`)
      else noResponse(signal.aborted ? 'AbortError' : err.code ?? err.name)
    })
    request.on('response', (response) => {
      durationMs = elapsed()
      const responseHeaders: HeaderLine[] = []
      for (let i = 0; i < response.rawHeaders.length && responseHeaders.length < MAX_RESPONSE_HEADERS; i += 2) {
        responseHeaders.push([response.rawHeaders[i]!, response.rawHeaders[i + 1]!])
      }
      const kept: Buffer[] = []
      let keptBytes = 0
      let read = 0
      let truncated = false
      const done = (): void => {
        const body = captureBytes > 0 ? Buffer.concat(kept).toString('utf8') : null
        const statusCode = response.statusCode ?? null
        finish({ status: statusCategory(statusCode), statusCode, durationMs, error: null, body, responseHeaders, bodyTruncated: truncated })
      }
      response.on('data', (chunk: Buffer) => {
        read += chunk.length
        if (keptBytes < captureBytes) {
          const part = chunk.subarray(0, captureBytes - keptBytes)
          kept.push(part)
          keptBytes += part.length
        }
        if (read > keptBytes) truncated = true
        // The status is what counts: a receiver that streams on is not read to its end.
        if (read > MAX_RESPONSE_BYTES) {
          response.destroy()
          done()
        }
      })
      response.on('end', done)
      // A body cut short does not change the status.
      response.on('error', done)
      response.on('close', done)
    })
    request.end(signed.body)
  })
}
