import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Test } from 'tap'

// The one loopback stand-in for the MailChannels API, shared by the client, CLI and batches-route
// tests: the batch listing with X-Api-Key, real filtering and the API's 400 {"errors":[...]}
// shape, the public-key endpoint, the webhook lifecycle (enroll 201 / 409, list, delete 204,
// validate, resend, as the API reference describes them), switchable failure modes, and a
// record of every request (with its time and body). `useFakeApi(t)` gives a test file one fake,
// put back to its starting state before each test.

export interface FakeBatch {
  batch_id: number
  created_at: string
  customer_handle: string
  duration?: { unit: string, value: number }
  event_count: number
  status: string
  status_code: number | null
  webhook: string
}

export interface RecordedRequest {
  method: string
  /** The raw request target, e.g. `/tx/v1/webhook-batch?statuses=4xx%2C5xx`. */
  url: string
  /** The raw query string (without `?`). */
  query: string
  headers: IncomingHttpHeaders
  /** The request body as received so far (complete once the request ended). */
  body: string
  /** `performance.now()` when the request arrived. */
  at: number
  /** Settles when the connection that carried the request closes (the client left, or the fake closed it). */
  socketClosed: Promise<void>
}

/** A one-shot behaviour replacing the normal answer of the next request. */
export type Behaviour = (req: IncomingMessage, res: ServerResponse) => void

export interface FakeApi {
  url: string
  port: number
  requests: RecordedRequest[]
  /** Batch-listing requests only (not resends). */
  batchRequests (): RecordedRequest[]
  batches: FakeBatch[]
  keys: Map<string, string>
  /** Enrolled endpoints, in enrolment order. */
  webhooks: string[]
  /** What validate reports per endpoint (default: passed, 200 `ok`). */
  validateAnswers: Map<string, { status: number, body: string } | null>
  /** What a resend reports as the endpoint's answer, per batch id (default 200; `null`: no answer). */
  resendAnswers: Map<number, number | null>
  /** Behaviours consumed in order by the next requests (any path). */
  queue: Behaviour[]
  /** A behaviour for every request while set. */
  always: Behaviour | null
  /** The normal answer (listing, public key), for behaviours that delay or wrap it. */
  answer: Behaviour
  /** Back to the starting state: no requests recorded, no behaviours, the sample batches, no keys, endpoints or set answers. */
  reset (): void
  close (): Promise<void>
}

export const FAKE_API_KEY = 'mc-test-key-9f8e7d6c5b4a'
/** The fake's "now": with neither date filter it lists the 3 days before this. */
export const FAKE_NOW = Date.parse('2026-01-20T00:00:00Z')

const STATUSES = new Set(['1xx', '2xx', '3xx', '4xx', '5xx', 'no_response'])
const DATE = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}Z)?$/

/** 12 batches from 2026-01-18T00:00Z, one every 4 hours, rotating statuses and two webhooks. */
export function sampleBatches (): FakeBatch[] {
  const statuses = ['2xx_response', '4xx_response', '5xx_response', 'no_response']
  const codes = [200, 404, 503, null]
  const start = Date.parse('2026-01-18T00:00:00Z')
  return Array.from({ length: 12 }, (_, i) => ({
    batch_id: 1000 + i,
    created_at: new Date(start + i * 4 * 3600_000).toISOString(),
    customer_handle: 'acme',
    duration: { unit: 'milliseconds', value: 10 * i },
    event_count: i + 1,
    status: statuses[i % 4]!,
    status_code: codes[i % 4]!,
    webhook: i % 2 === 0 ? 'https://hooks.example.com/a' : 'https://hooks.example.com/b?token=t',
  }))
}

export async function startFakeApi (options: { apiKey?: string } = {}): Promise<FakeApi> {
  const apiKey = options.apiKey ?? FAKE_API_KEY
  const sockets = new Set<Socket>()
  const records = new WeakMap<IncomingMessage, RecordedRequest>()
  const api: FakeApi = {
    url: '',
    port: 0,
    requests: [],
    batchRequests: () => api.requests.filter((r) => /^\/tx\/v1\/webhook-batch(\?|$)/.test(r.url)),
    batches: sampleBatches(),
    keys: new Map(),
    webhooks: [],
    validateAnswers: new Map(),
    resendAnswers: new Map(),
    queue: [],
    always: null,
    answer: (req, res) => normal(req, res, req.url ?? '/'),
    reset: () => {
      api.requests.length = 0
      api.queue.length = 0
      api.always = null
      api.batches = sampleBatches()
      api.keys.clear()
      api.webhooks.length = 0
      api.validateAnswers.clear()
      api.resendAnswers.clear()
    },
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
  const closedSockets = new WeakMap<object, Promise<void>>()
  const server = http.createServer((req, res) => {
    const url = req.url ?? '/'
    const q = url.indexOf('?')
    const socket = req.socket
    // One 'close' listener per socket, whatever number of requests it carries (keep-alive).
    let socketClosed = closedSockets.get(socket)
    if (socketClosed === undefined) {
      socketClosed = socket.destroyed ? Promise.resolve() : new Promise<void>((resolve) => socket.once('close', () => resolve()))
      closedSockets.set(socket, socketClosed)
    }
    const record: RecordedRequest = { method: req.method ?? '', url, query: q === -1 ? '' : url.slice(q + 1), headers: { ...req.headers }, body: '', at: performance.now(), socketClosed }
    req.setEncoding('utf8')
    req.on('data', (chunk: string) => { record.body += chunk })
    api.requests.push(record)
    records.set(req, record)
    const behaviour = api.queue.shift() ?? api.always
    if (behaviour !== null) {
      behaviour(req, res)
      return
    }
    normal(req, res, url)
  })
  server.on('connection', (s) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })

  function normal (req: IncomingMessage, res: ServerResponse, url: string): void {
    const parsed = new URL(url, 'http://fake.test')
    if (req.method === 'GET' && parsed.pathname === '/tx/v1/webhook/public-key') {
      const id = parsed.searchParams.get('id') ?? ''
      const key = api.keys.get(id)
      if (key === undefined) return json(res, 404, { errors: ['Key not found'] })
      return json(res, 200, { id, key })
    }
    if (req.method === 'GET' && parsed.pathname === '/tx/v1/webhook-batch') {
      if (req.headers['x-api-key'] !== apiKey) return json(res, 401, { errors: ['Unauthorized: a valid X-Api-Key header is required.'] })
      const errors: string[] = []
      const p = parsed.searchParams
      for (const k of new Set(p.keys())) {
        if (!['created_after', 'created_before', 'statuses', 'webhook', 'limit', 'offset'].includes(k)) errors.push(`${k}: unknown parameter`)
        if (p.getAll(k).length > 1) errors.push(`${k}: given more than once`)
      }
      const after = p.get('created_after')
      const before = p.get('created_before')
      if (after !== null && !DATE.test(after)) errors.push('created_after: bad format')
      if (before !== null && !DATE.test(before)) errors.push('created_before: bad format')
      const statuses = p.get('statuses')?.split(',') ?? null
      if (statuses !== null && !statuses.every((s) => STATUSES.has(s))) errors.push('statuses: invalid value')
      const limit = p.has('limit') ? Number(p.get('limit')) : 500
      const offset = p.has('offset') ? Number(p.get('offset')) : 0
      if (!Number.isInteger(limit) || limit < 1 || limit > 500) errors.push('limit: must be between 1 and 500')
      if (!Number.isInteger(offset) || offset < 0) errors.push('offset: must be >= 0')
      if (errors.length > 0) return json(res, 400, { errors })
      let afterMs = after === null ? null : Date.parse(after)
      const beforeMs = before === null ? null : Date.parse(before)
      if (afterMs === null && beforeMs === null) afterMs = FAKE_NOW - 3 * 86400_000
      const webhook = p.get('webhook')
      const list = api.batches
        .filter((b) => afterMs === null || Date.parse(b.created_at) >= afterMs)
        .filter((b) => beforeMs === null || Date.parse(b.created_at) < beforeMs)
        .filter((b) => statuses === null || statuses.some((s) => (s === 'no_response' ? s : `${s}_response`) === b.status))
        .filter((b) => webhook === null || b.webhook === webhook)
      return json(res, 200, { webhook_batches: list.slice(offset, offset + limit) })
    }
    if (parsed.pathname === '/tx/v1/webhook' || parsed.pathname === '/tx/v1/webhook/validate' || /^\/tx\/v1\/webhook-batch\/[^/]+\/resend$/.test(parsed.pathname)) {
      if (req.headers['x-api-key'] !== apiKey) return json(res, 401, { errors: ['Unauthorized: a valid X-Api-Key header is required.'] })
      return lifecycle(req, res, parsed)
    }
    json(res, 404, { errors: ['Not found'] })
  }

  function lifecycle (req: IncomingMessage, res: ServerResponse, parsed: URL): void {
    const route = `${req.method} ${parsed.pathname.replace(/webhook-batch\/[^/]+\//, 'webhook-batch/{id}/')}`
    if (route === 'POST /tx/v1/webhook') {
      const endpoint = parsed.searchParams.get('endpoint')
      if (endpoint === null || endpoint === '' || endpoint.length > 8000) return json(res, 400, { errors: ['endpoint: required, at most 8000 characters'] })
      if (api.webhooks.includes(endpoint)) return json(res, 409, { errors: ["There's already a webhook endpoint for this customer"] })
      api.webhooks.push(endpoint)
      res.writeHead(201).end()
      return
    }
    if (route === 'GET /tx/v1/webhook') return json(res, 200, api.webhooks.map((webhook) => ({ webhook })))
    if (route === 'DELETE /tx/v1/webhook') {
      api.webhooks.length = 0
      res.writeHead(204).end()
      return
    }
    if (route === 'POST /tx/v1/webhook/validate') {
      const answer = (): void => {
        const text = records.get(req)?.body ?? ''
        let body: unknown = {}
        try {
          body = text === '' ? {} : JSON.parse(text)
        } catch {
          return json(res, 400, { errors: ['Bad Request: the body is not JSON'] })
        }
        const requestId = (body as { request_id?: unknown }).request_id
        if (requestId !== undefined && (typeof requestId !== 'string' || requestId.length > 28)) return json(res, 400, { errors: ['request_id: at most 28 characters'] })
        if (api.webhooks.length === 0) return json(res, 404, { errors: ['No webhooks found for the account'] })
        const results = api.webhooks.map((webhook) => {
          const answer = api.validateAnswers.has(webhook) ? api.validateAnswers.get(webhook)! : { status: 200, body: 'ok' }
          return { result: answer !== null && answer.status >= 200 && answer.status < 300 ? 'passed' : 'failed', webhook, response: answer }
        })
        json(res, 200, { all_passed: results.every((r) => r.result === 'passed'), results })
      }
      if (req.readableEnded) answer()
      else req.once('end', answer)
      return
    }
    if (route === 'POST /tx/v1/webhook-batch/{id}/resend') {
      const raw = /webhook-batch\/([^/]+)\/resend$/.exec(parsed.pathname)![1]!
      if (!/^\d{1,15}$/.test(raw)) return json(res, 400, { errors: ['batch_id: must be an integer'] })
      const batch = api.batches.find((b) => b.batch_id === Number(raw))
      const handle = req.headers['x-customer-handle']
      if (batch === undefined || (handle !== undefined && handle !== batch.customer_handle)) return json(res, 404, { errors: ['Batch not found'] })
      const code = api.resendAnswers.has(batch.batch_id) ? api.resendAnswers.get(batch.batch_id)! : 200
      return json(res, 200, {
        batch_id: batch.batch_id,
        customer_handle: batch.customer_handle,
        webhook: batch.webhook,
        created_at: new Date(FAKE_NOW).toISOString(),
        event_count: batch.event_count,
        duration_in_ms: code === null ? null : 12,
        status_code: code,
      })
    }
    json(res, 405, { errors: ['Method not allowed'] })
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  api.port = (server.address() as AddressInfo).port
  api.url = `http://127.0.0.1:${api.port}`
  return api
}

/**
 * One fake for the tests of `t`: started before the first, `reset` before each, closed at
 * teardown. Read `fake.api` in tests and hooks; before `t.before` has run there is none yet.
 */
export function useFakeApi (t: Test, options: { apiKey?: string } = {}): { readonly api: FakeApi } {
  let started: FakeApi | undefined
  t.before(async () => { started = await startFakeApi(options) })
  t.beforeEach(() => { started?.reset() })
  t.teardown(() => started?.close())
  return {
    get api (): FakeApi {
      if (started === undefined) throw new Error('useFakeApi: the fake API starts in t.before; read .api from a test or a hook')
      return started
    },
  }
}

export function json (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers })
  res.end(text)
}

// Failure modes.

/** Answers `status` with `body` (an object is sent as JSON, a string as is). */
export function reply (status: number, body: unknown, headers: Record<string, string> = {}): Behaviour {
  return (_req, res) => {
    if (typeof body === 'string') {
      res.writeHead(status, { 'content-type': 'text/plain', ...headers })
      res.end(body)
    } else {
      json(res, status, body, headers)
    }
  }
}

/** Accepts the request and never answers. */
export const hang: Behaviour = () => {}

/** Runs `then` after `ms` unless the client has left by then (a slow upstream). */
export function delayed (ms: number, then: Behaviour): Behaviour {
  return (req, res) => {
    const timer = setTimeout(() => { if (!res.destroyed) then(req, res) }, ms)
    res.once('close', () => clearTimeout(timer))
  }
}

/** Holds every answer until `release()` is called (then answers normally through `then`). */
export function gate (then: Behaviour): { behaviour: Behaviour, release (): void } {
  const held: Array<() => void> = []
  let open = false
  return {
    behaviour: (req, res) => {
      if (open) then(req, res)
      else held.push(() => { if (!res.destroyed) then(req, res) })
    },
    release: () => {
      open = true
      for (const h of held.splice(0)) h()
    },
  }
}

/** Answers 400 quoting the X-Api-Key header exactly as received (an upstream that echoes credentials). */
export const echoApiKey: Behaviour = (req, res) => {
  json(res, 400, { errors: [`invalid key: ${String(req.headers['x-api-key'])}`], received: req.headers['x-api-key'] ?? null })
}

/** Sends headers and part of a body, then destroys the socket. */
export const resetMidBody: Behaviour = (_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' })
  res.write('{"webhook_batches":[{"batch_id":1,')
  setTimeout(() => res.socket?.destroy(), 20)
}

/** Redirects to `location`. */
export function redirect (location: string, status = 302): Behaviour {
  return (_req, res) => {
    res.writeHead(status, { location })
    res.end()
  }
}

/** Streams `bytes` of JSON-looking filler without a content-length, stopping when the client leaves. */
export function huge (bytes: number): Behaviour {
  return (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    const chunk = Buffer.alloc(64 * 1024, 0x20)
    let sent = 0
    res.write('{"webhook_batches":[')
    const pump = (): void => {
      while (sent < bytes && !res.destroyed) {
        sent += chunk.length
        if (!res.write(chunk)) {
          res.once('drain', pump)
          return
        }
      }
      if (!res.destroyed) res.end(']}')
    }
    res.on('close', () => { sent = bytes })
    pump()
  }
}

/** A second server that records anything it receives (the target of a hostile redirect). */
export async function startStealServer (): Promise<{ url: string, hits: string[], close (): Promise<void> }> {
  const hits: string[] = []
  const server = http.createServer((req, res) => {
    hits.push(`${req.method} ${req.url} ${JSON.stringify(req.headers)}`)
    res.end('stolen')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/steal`,
    hits,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}
