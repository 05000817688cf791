// One conformance set for the fetch handler, run against a server in any runtime (Node, workerd,
// Deno, Bun, edge-runtime). The server serves test/runtimes/fixtures/conformance-worker.ts (or
// its Hono twin) with the env built here; deliveries are signed in this process and the key
// server is a real loopback server counting its fetches.
import net from 'node:net'
import type { Test } from 'tap'
import { generateSigningKeyPair, signWebhook, type SignedWebhook, type WireEvent } from '../../../src/testing/index.js'
import { serveKeys, startKeyServer, type KeyServer } from '../../helpers/key-server.js'
import { STARTERS, unavailableReason, type RuntimeName } from './runtimes.js'

export const CUSTOMER = 'acct_conformance'
export const FETCHED_KEY_ID = 'conformance-key'
export const BODY_LIMIT = 64 * 1024
const REQUEST_TIMEOUT = 15_000
/** Most bytes the oversized-body case streams (the body never ends). */
const STREAM_CAP = 512 * BODY_LIMIT

export interface ConformanceEnv {
  PUBLIC_KEY: string
  BASE_URL: string
  CUSTOMER: string
  BODY_LIMIT: number
}

export interface ConformanceTarget {
  /** `http://127.0.0.1:<port>` of a server serving the conformance worker with `env`. */
  url: string
  /** The web handler answers 405 to other methods; the Hono middleware leaves routing to the app. */
  answersMethodNotAllowed: boolean
}

/** What a suite needs before its server starts: keys and a key server. */
export interface ConformanceFixture {
  env: ConformanceEnv
  keyServer: KeyServer
  sign: (events: WireEvent[], options?: { created?: number, keyId?: string, wrongKey?: boolean }) => SignedWebhook
}

/** Keys, a loopback key server serving the key under FETCHED_KEY_ID, and the env for the worker. Closed at teardown. */
export async function conformanceFixture (t: Test): Promise<ConformanceFixture> {
  const keys = generateSigningKeyPair()
  const other = generateSigningKeyPair()
  const keyServer = await startKeyServer(serveKeys({ [FETCHED_KEY_ID]: keys.publicKey }))
  t.teardown(() => keyServer.close())
  return {
    env: { PUBLIC_KEY: keys.publicKey, BASE_URL: keyServer.baseUrl, CUSTOMER, BODY_LIMIT },
    keyServer,
    sign: (events, o = {}) => signWebhook({ events, privateKey: (o.wrongKey === true ? other : keys).privateKey, created: o.created, keyId: o.keyId }),
  }
}

const now = (): number => Math.floor(Date.now() / 1000)
let serial = 0
/** A delivered event, unique per call (so two deliveries never share a signature). */
const event = (extra: Record<string, unknown> = {}): WireEvent => ({ event: 'delivered', customer_handle: CUSTOMER, timestamp: now(), request_id: `req-${++serial}`, ...extra })

async function post (url: string, signed: SignedWebhook, body: Uint8Array = signed.body): Promise<{ status: number, headers: Headers, json: Record<string, unknown> }> {
  const res = await fetch(url, { method: 'POST', headers: signed.headers, body, signal: AbortSignal.timeout(REQUEST_TIMEOUT) })
  const text = await res.text()
  let json: Record<string, unknown>
  try { json = JSON.parse(text) as Record<string, unknown> } catch { json = { text } }
  return { status: res.status, headers: res.headers, json }
}

/**
 * Streams a chunked body (no Content-Length) that never ends until the server answers: an answer
 * proves it stopped reading at the limit (a server waiting for the whole body times out). On a
 * raw socket, because a runtime may close the connection right after answering, which makes
 * Node's HTTP client report the failed write (EPIPE) instead of the answer.
 */
function streamOversized (url: string, signed: SignedWebhook): Promise<{ status: number, json: Record<string, unknown>, sent: number }> {
  const { hostname, port, pathname } = new URL(url)
  return new Promise((resolve, reject) => {
    let sent = 0
    let received = ''
    let finished = false
    const chunk = Buffer.concat([Buffer.from(`4000\r\n`), Buffer.alloc(0x4000, 0x20), Buffer.from('\r\n')])
    const socket = net.connect(Number(port), hostname)
    const finish = (err: Error | null): void => {
      if (finished) return
      finished = true
      clearTimeout(timer)
      socket.destroy()
      const head = /^HTTP\/1\.1 (\d{3})/.exec(received)
      const json = /\{.*\}/s.exec(received.slice(received.indexOf('\r\n\r\n')))
      if (head !== null && json !== null) {
        try {
          resolve({ status: Number(head[1]), json: JSON.parse(json[0]) as Record<string, unknown>, sent })
          return
        } catch {}
      }
      reject(err ?? new Error(`no complete answer after streaming ${sent} bytes: ${JSON.stringify(received.slice(0, 300))}`))
    }
    const timer = setTimeout(() => { finish(new Error(`no answer after streaming ${sent} bytes`)) }, REQUEST_TIMEOUT)
    socket.setEncoding('latin1')
    socket.on('data', (d: string) => {
      received += d
      // Done once the JSON body has arrived (the reply is small: one chunk).
      if (/\r\n\r\n[^]*\}/.test(received)) finish(null)
    })
    // A runtime closing the connection after answering: whatever was received decides.
    socket.on('error', () => { setTimeout(() => finish(null), 50) })
    socket.on('close', () => finish(null))
    const head = [`POST ${pathname} HTTP/1.1`, `host: ${hostname}:${port}`, 'transfer-encoding: chunked', ...Object.entries(signed.headers).map(([k, v]) => `${k}: ${v}`)].join('\r\n')
    socket.write(`${head}\r\n\r\n`)
    const pump = (): void => {
      // Paced, capped at STREAM_CAP bytes, never ended.
      if (finished || received !== '' || sent >= STREAM_CAP) return
      sent += 0x4000
      if (socket.write(chunk)) setTimeout(pump, 1)
      else socket.once('drain', pump)
    }
    pump()
  })
}

export const KEY_FETCH_CASE = 'key fetched from the loopback key server once, then served from the cache'

/** Runs every conformance case against one target. */
export async function runConformance (t: Test, target: ConformanceTarget, f: ConformanceFixture): Promise<void> {
  const key = `${target.url}/key`
  const fetched = `${target.url}/fetch`

  await t.test('valid delivery: 200, the typed events reach the handler', async (t) => {
    const r = await post(key, f.sign([event()]))
    t.equal(r.status, 200)
    const events = r.json.events as Array<Record<string, unknown>>
    t.equal(events.length, 1)
    t.equal(events[0]!.event, 'delivered')
    t.equal(events[0]!.customerHandle, CUSTOMER)
  })

  await t.test('tampered body: 401 digest_mismatch', async (t) => {
    const signed = f.sign([event()])
    const body = new TextEncoder().encode(new TextDecoder().decode(signed.body).replace('delivered', 'bounced'))
    const r = await post(key, signed, body)
    t.equal(r.status, 401)
    t.match(r.json, { statusCode: 401, code: 'digest_mismatch', error: 'Unauthorized' })
  })

  await t.test('signed with another key: 401 signature_invalid', async (t) => {
    const r = await post(key, f.sign([event()], { wrongKey: true }))
    t.equal(r.status, 401)
    t.match(r.json, { statusCode: 401, code: 'signature_invalid' })
  })

  await t.test('expired: 401 signature_expired', async (t) => {
    const r = await post(key, f.sign([event()], { created: now() - 600 }))
    t.equal(r.status, 401)
    t.match(r.json, { code: 'signature_expired' })
  })

  await t.test('future-dated: 401 signature_from_future', async (t) => {
    const r = await post(key, f.sign([event()], { created: now() + 600 }))
    t.equal(r.status, 401)
    t.match(r.json, { code: 'signature_from_future' })
  })

  await t.test('another customer: 403 customer_not_allowed', async (t) => {
    const r = await post(key, f.sign([event({ customer_handle: 'acct_someone_else' })]))
    t.equal(r.status, 403)
    t.match(r.json, { statusCode: 403, code: 'customer_not_allowed', error: 'Forbidden' })
  })

  await t.test('oversized streamed body (chunked, no Content-Length): 413 before the body ends', async (t) => {
    const r = await streamOversized(key, f.sign([event()]))
    t.equal(r.status, 413)
    t.match(r.json, { statusCode: 413, code: 'payload_too_large' })
    t.ok(r.sent < STREAM_CAP, `answered while the body was still streaming (${r.sent} bytes sent)`)
  })

  await t.test('replayed delivery: 200 { duplicate: true }, the handler runs once', async (t) => {
    const signed = f.sign([event()])
    const first = await post(key, signed)
    t.equal(first.status, 200)
    t.ok(Array.isArray(first.json.events), 'the first copy reaches the handler')
    const second = await post(key, signed)
    t.equal(second.status, 200)
    t.strictSame(second.json, { duplicate: true }, 'the copy does not')
  })

  await t.test(KEY_FETCH_CASE, async (t) => {
    const before = f.keyServer.keyFetches()
    const a = await post(fetched, f.sign([event()], { keyId: FETCHED_KEY_ID }))
    t.equal(a.status, 200, JSON.stringify(a.json))
    const b = await post(fetched, f.sign([event()], { keyId: FETCHED_KEY_ID }))
    t.equal(b.status, 200, JSON.stringify(b.json))
    t.equal(f.keyServer.keyFetches() - before, 1, 'one key fetch for two deliveries')
    const unknown = await post(fetched, f.sign([event()], { keyId: 'no-such-key' }))
    t.equal(unknown.status, 401)
    t.match(unknown.json, { code: 'unknown_key' })
  })

  await t.test('an unknown event type is kept, with its name and fields', async (t) => {
    const r = await post(key, f.sign([event({ event: 'brand_new_event', shiny: 1 })]))
    t.equal(r.status, 200)
    const events = r.json.events as Array<Record<string, unknown>>
    t.match(events[0], { event: 'unknown', eventName: 'brand_new_event', customerHandle: CUSTOMER, fields: { shiny: 1 } })
  })

  if (target.answersMethodNotAllowed) {
    await t.test('other methods: 405 with Allow: POST', async (t) => {
      const res = await fetch(key, { method: 'GET', signal: AbortSignal.timeout(REQUEST_TIMEOUT) })
      t.equal(res.status, 405)
      t.equal(res.headers.get('allow'), 'POST')
      t.match(await res.json(), { statusCode: 405, error: 'Method Not Allowed' })
    })
  }
}

/**
 * The conformance set in one runtime: the runtime starts once with the bundled conformance worker
 * (the library from its sources, with the runtime's own crypto), every case runs against it.
 * Skipped, with the reason, when the runtime's binary cannot start here.
 */
export function conformanceIn (t: Test, name: RuntimeName, adapter: 'web' | 'hono' = 'web'): void {
  const what = adapter === 'web' ? 'the web handler' : 'the Hono middleware'
  t.test(`the conformance set in ${name}: ${what}`, { skip: unavailableReason(name) ?? false }, async (t) => {
    const f = await conformanceFixture(t)
    const entry = `test/runtimes/fixtures/conformance-${adapter === 'web' ? 'worker' : 'hono'}.ts`
    const server = await STARTERS[name]({ entry, env: { ...f.env }, fromSource: true })
    t.teardown(() => server.close())
    await runConformance(t, { url: server.url, answersMethodNotAllowed: adapter === 'web' }, f)
    if (t.passing() === false) t.comment(server.output())
  })
}
