// Key-fetch failures are logged with where (URL, key id), why (cause, HTTP status) and for how
// long the failure is remembered (retryInSeconds), never with a secret; and the key fetch
// never follows a redirect, with `redirect: 'manual'` (what Cloudflare workerd accepts).
import t, { type Test } from 'tap'
import { KeyStore, verifyWebhook, type Logger, type Result } from '../../src/index.js'
import { assertRejected } from '../helpers/assert.js'
import { fakeClock } from '../helpers/clock.js'
import { closedPort, serveKeys, startKeyServer, type KeyBehaviour, type KeyServer } from '../helpers/key-server.js'
import { TEST_PUBLIC_KEY, TEST_PUBLIC_KEY_PEM, validDelivery } from '../helpers/sign.js'

interface Line { level: string, obj: Record<string, unknown>, msg: string | undefined }

function capture (): Logger & { lines: Line[] } {
  const lines: Line[] = []
  const at = (level: string) => (obj: object, msg?: string): void => { lines.push({ level, obj: { ...obj } as Record<string, unknown>, msg }) }
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}

async function server (t: Test, behaviour: KeyBehaviour): Promise<KeyServer> {
  const s = await startKeyServer(behaviour)
  t.teardown(() => s.close())
  return s
}

const d = validDelivery()
const SECRETS = [d.headers.signature.slice(8, 60), 'acct_1', 's@example.com']

/** One verify through a fresh store; returns the result and the store's log lines. */
async function once (baseUrl: string, extra: Partial<ConstructorParameters<typeof KeyStore>[0]> = {}): Promise<{ r: Result<unknown[]>, lines: Line[] }> {
  const logger = capture()
  const store = new KeyStore({ baseUrl, logger, ...extra })
  const r = await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })
  return { r, lines: logger.lines }
}

function assertLine (t: Test, lines: Line[], expected: Record<string, unknown>): void {
  t.equal(lines.length, 1, 'one log line')
  const line = lines[0]!
  t.equal(line.level, 'warn')
  t.match(line.obj, expected, JSON.stringify(line.obj))
  t.equal(typeof line.obj.retryInSeconds, 'number')
  t.match(line.msg, new RegExp(`next try in ${String(line.obj.retryInSeconds)} s`), String(line.msg))
  const text = JSON.stringify(lines)
  for (const secret of SECRETS) t.notOk(text.includes(secret), 'no signature or body content in the log')
}

const keyUrl = (baseUrl: string, id = 'mckey'): string => `${baseUrl}/tx/v1/webhook/public-key?id=${id}`

t.test('connection refused: cause connection_refused, the URL, retry after errorTtl', async (t) => {
  const base = `http://127.0.0.1:${await closedPort()}`
  const { r, lines } = await once(base, { errorTtl: 45 })
  assertRejected(t, r, 'key_unavailable', 503)
  assertLine(t, lines, { url: keyUrl(base), keyId: 'mckey', cause: 'connection_refused', retryInSeconds: 45 })
  t.notOk('status' in lines[0]!.obj, 'no HTTP status when nothing answered')
})

t.test('timeout: cause timeout', async (t) => {
  const s = await server(t, () => 'hang')
  const { r, lines } = await once(s.baseUrl, { fetchTimeout: 200 })
  assertRejected(t, r, 'key_unavailable', 503)
  assertLine(t, lines, { url: keyUrl(s.baseUrl), cause: 'timeout', retryInSeconds: 30 })
})

t.test('connection reset: cause connection_reset', async (t) => {
  const s = await server(t, () => 'destroy')
  const { lines } = await once(s.baseUrl)
  assertLine(t, lines, { cause: 'connection_reset' })
})

t.test('HTTP 503: cause http_status with the status', async (t) => {
  const s = await server(t, () => ({ status: 503, body: 'down' }))
  const { lines } = await once(s.baseUrl)
  assertLine(t, lines, { url: keyUrl(s.baseUrl), cause: 'http_status', status: 503, retryInSeconds: 30 })
})

t.test('HTTP 404: cause not_found, remembered for unknownKeyTtl', async (t) => {
  const s = await server(t, serveKeys({}))
  const { r, lines } = await once(s.baseUrl, { unknownKeyTtl: 120 })
  assertRejected(t, r, 'unknown_key', 401)
  assertLine(t, lines, { cause: 'not_found', status: 404, retryInSeconds: 120 })
})

t.test('a redirect: cause redirect with the status; the target receives nothing', async (t) => {
  const target = await server(t, serveKeys({ mckey: TEST_PUBLIC_KEY }))
  const s = await server(t, () => ({ status: 302, headers: { location: keyUrl(target.baseUrl) } }))
  const { r, lines } = await once(s.baseUrl)
  assertRejected(t, r, 'key_unavailable', 503)
  assertLine(t, lines, { cause: 'redirect', status: 302 })
  t.equal(target.requests.length, 0)
})

t.test('an invalid key or response: cause invalid_key / invalid_response', async (t) => {
  const rsa = (await import('node:crypto')).generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ format: 'pem', type: 'spki' }).toString()
  const bad = await server(t, () => ({ status: 200, body: JSON.stringify({ id: 'mckey', key: rsa }) }))
  assertLine(t, (await once(bad.baseUrl)).lines, { cause: 'invalid_key', status: 200 })
  const garbage = await server(t, () => ({ status: 200, body: '<html>' }))
  assertLine(t, (await once(garbage.baseUrl)).lines, { cause: 'invalid_response', status: 200 })
})

t.test('a DNS failure (as Node fetch reports it): cause dns', async (t) => {
  // A real lookup failure needs a resolver off this machine; this is the exact error shape
  // Node's fetch (undici) rejects with when getaddrinfo fails.
  const fetch = async (): Promise<Response> => {
    throw new TypeError('fetch failed', { cause: Object.assign(new Error('getaddrinfo ENOTFOUND api.example.test'), { code: 'ENOTFOUND', syscall: 'getaddrinfo' }) })
  }
  const { r, lines } = await once('https://api.example.test', { fetch })
  assertRejected(t, r, 'key_unavailable', 503)
  assertLine(t, lines, { url: keyUrl('https://api.example.test'), cause: 'dns' })
})

t.test('a stale key served while the endpoint fails: servingStaleKey, next try after errorTtl', async (t) => {
  const s = await server(t, serveKeys({ mckey: TEST_PUBLIC_KEY_PEM }))
  const clock = fakeClock()
  const logger = capture()
  const store = new KeyStore({ baseUrl: s.baseUrl, now: clock.now, keyTtl: 60, errorTtl: 20, logger })
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })).error, null)
  s.behave(() => ({ status: 500 }))
  await clock.advance(61)
  t.equal((await verifyWebhook({ payload: d.body, headers: d.headers, keyStore: store })).error, null, 'the stale key still serves')
  assertLine(t, logger.lines, { cause: 'http_status', status: 500, servingStaleKey: true, retryInSeconds: 20 })
})

t.test('budget refusals: cause budget, logged at most once per 10 s with a count', async (t) => {
  const s = await server(t, serveKeys({}))
  const logger = capture()
  const store = new KeyStore({ baseUrl: s.baseUrl, logger, fetchesPerMinute: 2 })
  for (let i = 0; i < 5; i++) {
    const k = validDelivery(undefined, undefined, `flood${i}`)
    await verifyWebhook({ payload: k.body, headers: k.headers, keyStore: store })
  }
  const budget = logger.lines.filter((l) => l.obj.cause === 'budget')
  t.equal(budget.length, 1, 'one line for the refusals')
  t.match(budget[0]!.obj, { url: keyUrl(s.baseUrl, 'flood1'), keyId: 'flood1', rejectedSinceLastLog: 1 })
  t.equal(budget[0]!.obj.retryInSeconds, 30, 'the budget refills one fetch every 30 s')
  t.match(budget[0]!.msg, /next try in 30 s/)
})

t.test('the logger option of verify receives the failures of the shared store too', async (t) => {
  const base = `http://127.0.0.1:${await closedPort()}`
  const logger = capture()
  const r = await verifyWebhook({ payload: d.body, headers: d.headers, baseUrl: base, logger })
  assertRejected(t, r, 'key_unavailable', 503)
  assertLine(t, logger.lines, { url: keyUrl(base), cause: 'connection_refused' })
})

t.test("redirect: 'manual' is what the key fetch asks for, so runtimes that refuse 'error' (Cloudflare workerd) work", async (t) => {
  const s = await server(t, serveKeys({ mckey: TEST_PUBLIC_KEY }))
  const seen: Array<RequestInit['redirect']> = []
  // As workerd does: only 'follow' and 'manual' are accepted.
  const workerdLike = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    seen.push(init?.redirect)
    if (init?.redirect !== undefined && init.redirect !== 'follow' && init.redirect !== 'manual') {
      throw new TypeError(`Invalid redirect value, must be one of "follow" or "manual" ("${init.redirect}" will be implemented in the future)`)
    }
    return globalThis.fetch(input, init)
  }
  const { r } = await once(s.baseUrl, { fetch: workerdLike })
  t.equal(r.error, null, 'the delivery verifies with a key fetched through the workerd-like fetch')
  t.strictSame(seen, ['manual'])
})

t.test('an opaque redirect (type opaqueredirect, status 0) is a failed fetch', async (t) => {
  const opaque = async (): Promise<Response> => {
    const res = new Response(null, { status: 200 })
    Object.defineProperty(res, 'type', { value: 'opaqueredirect' })
    Object.defineProperty(res, 'status', { value: 0 })
    return res
  }
  const { r, lines } = await once('https://api.example.test', { fetch: opaque })
  assertRejected(t, r, 'key_unavailable', 503)
  assertLine(t, lines, { cause: 'redirect', status: 0 })
  for (const status of [300, 303, 304]) {
    const { r: r2, lines: l2 } = await once('https://api.example.test', { fetch: async () => new Response(null, { status, headers: { location: '/x' } }) })
    assertRejected(t, r2, 'key_unavailable', 503)
    assertLine(t, l2, { cause: 'redirect', status })
  }
})
