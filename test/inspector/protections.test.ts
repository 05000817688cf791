import crypto from 'node:crypto'
import { inspect } from 'node:util'
import t, { type Test } from 'tap'
import { createSandbox, signWebhook, type Sandbox } from '../../src/testing/index.js'
import { createInspector, type Inspector } from '../../src/testing/inspector/index.js'
import { headerOf, libraryReceiver, rawRequest } from './helpers.js'

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const json = async (res: Response | Promise<Response>): Promise<any> => await (await res).json()

// The inspector pages must not weaken the sandbox's rules: loopback Host only, the run's key
// for data and actions, no other web origin, nothing relayed by a proxy.

async function sandboxFor (t: Test): Promise<Sandbox> {
  const sandbox = await createSandbox({ retryDelay: 5, maxAttempts: 1, deliveryTimeout: 3000 })
  t.teardown(() => sandbox.close())
  return sandbox
}

async function inspectorFor (t: Test, sandbox: Sandbox): Promise<Inspector> {
  const inspector = await createInspector({ baseUrl: sandbox.baseUrl, customerHandles: [sandbox.customerHandle] })
  t.teardown(() => inspector.close())
  return inspector
}

const PAGE_PATHS = ['/', '/inspector/app.js', '/inspector/app.css', '/inspector/icon.svg']
const API_PATHS = ['/inspector/api/info', '/inspector/api/attempts', '/inspector/api/attempts/1', '/inspector/api/stream']

t.test('sandbox: the page, its files and its API answer only requests addressed to a loopback host', async (t) => {
  const sandbox = await sandboxFor(t)
  const key = `X-Api-Key: ${sandbox.apiKey}`
  for (const host of ['evil.example', `evil.example:${new URL(sandbox.baseUrl).port}`, '127.0.0.1.evil.example', '192.168.1.10']) {
    for (const path of [...PAGE_PATHS, ...API_PATHS]) {
      const res = await rawRequest(sandbox.baseUrl, 'GET', path, [`Host: ${host}`, key])
      t.equal(res.status, 421, `${host} ${path}`)
      t.notMatch(res.body, '<html', 'no page')
    }
  }
  const page = await rawRequest(sandbox.baseUrl, 'GET', '/', [`Host: 127.0.0.1:${new URL(sandbox.baseUrl).port}`])
  t.equal(page.status, 200, 'served to a loopback Host')
  t.match(headerOf(page.head, 'content-type'), /^text\/html/)
})

t.test('the page holds no secret and no inline script; its policy allows only its own files', async (t) => {
  const sandbox = await sandboxFor(t)
  const inspector = await inspectorFor(t, sandbox)
  for (const origin of [sandbox.baseUrl, inspector.url]) {
    const res = await rawRequest(origin, 'GET', '/', ['Host: localhost'])
    t.equal(res.status, 200)
    t.notMatch(res.body, sandbox.apiKey, 'not the sandbox key')
    t.notMatch(res.body, inspector.apiKey, 'not the inspector key')
    const scripts = res.body.match(/<script[^>]*>/g) ?? []
    t.same(scripts, ['<script src="/inspector/app.js" defer>'], 'one script, from a file')
    t.notMatch(res.body, /\son[a-z]+=/i, 'no inline event handler')
    t.notMatch(res.body, /style=/i, 'no inline style')
    const csp = headerOf(res.head, 'content-security-policy') ?? ''
    t.match(csp, "default-src 'none'")
    t.match(csp, "script-src 'self'")
    t.notMatch(csp, 'unsafe-inline')
    t.match(csp, "frame-ancestors 'none'")
    t.equal(headerOf(res.head, 'x-frame-options'), 'DENY')
    t.equal(headerOf(res.head, 'x-content-type-options'), 'nosniff')
    t.equal(headerOf(res.head, 'referrer-policy'), 'no-referrer')
    const js = await rawRequest(origin, 'GET', '/inspector/app.js', ['Host: 127.0.0.1'])
    t.equal(js.status, 200)
    t.match(headerOf(js.head, 'content-type'), /^text\/javascript/)
    t.notMatch(js.body, /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/, 'the script never parses text as markup or code')
  }
})

t.test('sandbox: the page API and the actions need the run\'s key', async (t) => {
  const sandbox = await sandboxFor(t)
  const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: [sandbox.customerHandle] })
  sandbox.enroll(receiver.url)
  const keyId = sandbox.keyId
  for (const path of API_PATHS) {
    t.equal((await rawRequest(sandbox.baseUrl, 'GET', path, ['Host: 127.0.0.1'])).status, 401, `${path} without a key`)
    t.equal((await rawRequest(sandbox.baseUrl, 'GET', path, ['Host: 127.0.0.1', 'X-Api-Key: guess'])).status, 401, `${path} with a wrong key`)
  }
  for (const path of ['/sandbox/deliver', '/sandbox/deliver?types=delivered', '/sandbox/rotate-key', '/tx/v1/webhook-batch/1/resend', '/tx/v1/webhook?endpoint=https%3A%2F%2Fevil.example%2F']) {
    t.equal((await rawRequest(sandbox.baseUrl, 'POST', path, ['Host: 127.0.0.1'])).status, 401, `POST ${path} without a key`)
  }
  t.equal(receiver.got.length, 0, 'nothing was delivered')
  t.equal(sandbox.keyId, keyId, 'the key was not rotated')
  t.same(sandbox.endpoints, [receiver.url], 'nothing was enrolled')
  const info = await rawRequest(sandbox.baseUrl, 'GET', '/inspector/api/info', ['Host: 127.0.0.1', `X-Api-Key: ${sandbox.apiKey}`])
  t.equal(info.status, 200)
  t.notMatch(info.body, sandbox.apiKey, 'the info never echoes the key')
})

t.test('a cross-origin POST is refused even with the key; a same-origin one is served', async (t) => {
  const sandbox = await sandboxFor(t)
  const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: [sandbox.customerHandle] })
  sandbox.enroll(receiver.url)
  const { port } = new URL(sandbox.baseUrl)
  const key = `X-Api-Key: ${sandbox.apiKey}`
  const keyId = sandbox.keyId
  for (const origin of ['http://evil.example', `http://127.0.0.1:${Number(port) + 1}`, `https://127.0.0.1:${port}`, 'null', `http://localhost:${port}`]) {
    for (const path of ['/sandbox/deliver', '/sandbox/rotate-key', '/tx/v1/webhook-batch/1/resend', '/tx/v1/webhook/validate']) {
      const res = await rawRequest(sandbox.baseUrl, 'POST', path, [`Host: 127.0.0.1:${port}`, `Origin: ${origin}`, key])
      t.equal(res.status, 403, `${origin} POST ${path}`)
      t.match(JSON.parse(res.body), { errors: [/Cross-origin requests are refused/] })
    }
  }
  // A preflight is refused too: the sandbox never grants another origin anything.
  const preflight = await rawRequest(sandbox.baseUrl, 'OPTIONS', '/sandbox/deliver', [`Host: 127.0.0.1:${port}`, 'Origin: http://evil.example', 'Access-Control-Request-Method: POST', 'Access-Control-Request-Headers: x-api-key'])
  t.equal(preflight.status, 403)
  t.equal(headerOf(preflight.head, 'access-control-allow-origin'), null)
  t.equal(receiver.got.length, 0, 'nothing was delivered')
  t.equal(sandbox.keyId, keyId, 'the key was not rotated')

  const same = await rawRequest(sandbox.baseUrl, 'POST', '/sandbox/rotate-key', [`Host: 127.0.0.1:${port}`, `Origin: http://127.0.0.1:${port}`, key])
  t.equal(same.status, 200, 'the page\'s own origin may act')
  t.not(sandbox.keyId, keyId)
  const noOrigin = await rawRequest(sandbox.baseUrl, 'POST', '/sandbox/deliver?types=delivered', [`Host: 127.0.0.1:${port}`, key])
  t.equal(noOrigin.status, 200, 'no Origin (the CLI, curl) is served as before')
})

t.test('requests relayed by a proxy or a tunnel never get the page or its data', async (t) => {
  const sandbox = await sandboxFor(t)
  const inspector = await inspectorFor(t, sandbox)
  for (const [origin, key] of [[sandbox.baseUrl, sandbox.apiKey], [inspector.url, inspector.apiKey]] as const) {
    for (const relay of ['X-Forwarded-For: 203.0.113.9', 'Forwarded: for=203.0.113.9', 'X-Forwarded-Host: abc.example', 'X-Real-IP: 203.0.113.9', 'CF-Connecting-IP: 203.0.113.9']) {
      for (const path of ['/', '/inspector/api/attempts']) {
        const res = await rawRequest(origin, 'GET', path, ['Host: localhost', relay, `X-Api-Key: ${key}`])
        t.equal(res.status, 403, `${origin} ${relay} ${path}`)
      }
    }
  }
})

t.test('inspect: deliveries come from any Host (a tunnel); the page and its API only to loopback, with the key', async (t) => {
  const sandbox = await sandboxFor(t)
  const inspector = await inspectorFor(t, sandbox)
  const signed = sandbox.sign([{ event: 'delivered', customer_handle: sandbox.customerHandle, timestamp: Math.floor(Date.now() / 1000), email: 'a@example.com' }])
  const lines = Object.entries(signed.headers).map(([k, v]) => `${k}: ${v}`)
  const tunneled = await rawRequest(inspector.url, 'POST', '/webhooks', ['Host: quiet-river.trycloudflare.com', 'X-Forwarded-For: 203.0.113.9', ...lines], signed.body.toString())
  t.equal(tunneled.status, 204, 'a delivery through a tunnel is verified and accepted')
  t.equal(inspector.deliveries.length, 1)
  t.match(inspector.deliveries[0], { endpoint: '/webhooks', outcome: 'accepted', statusCode: 204, eventCount: 1, eventTypes: ['delivered'] })

  for (const path of [...PAGE_PATHS, ...API_PATHS]) {
    const res = await rawRequest(inspector.url, 'GET', path, ['Host: quiet-river.trycloudflare.com', `X-Api-Key: ${inspector.apiKey}`])
    t.equal(res.status, 421, `${path} through the tunnel's Host`)
  }
  for (const path of API_PATHS) {
    t.equal((await rawRequest(inspector.url, 'GET', path, ['Host: 127.0.0.1'])).status, 401, `${path} without a key`)
  }
  t.equal((await rawRequest(inspector.url, 'GET', '/inspector/api/attempts/1', ['Host: 127.0.0.1', `X-Api-Key: ${inspector.apiKey}`])).status, 200)
  t.equal((await rawRequest(inspector.url, 'POST', '/inspector/api/attempts', ['Host: 127.0.0.1', `X-Api-Key: ${inspector.apiKey}`])).status, 405, 'the API is read-only')

  // A web page cannot fill the list: browsers always send Origin on a POST; MailChannels never does.
  const fromPage = await rawRequest(inspector.url, 'POST', '/webhooks', ['Host: 127.0.0.1', 'Origin: http://evil.example', 'Content-Type: text/plain'], '[{"event":"<script>alert(1)</script>"}]')
  t.equal(fromPage.status, 403)
  t.equal(JSON.parse(fromPage.body).code, 'browser_request')
  t.equal(inspector.deliveries.length, 1, 'not recorded')

  t.notMatch(inspect(inspector, { depth: 5, getters: true }), inspector.apiKey, 'the key stays out of inspect output')
  t.notMatch(JSON.stringify(inspector), inspector.apiKey)
  t.match(inspector.pageUrl, new RegExp(`^${inspector.url}/#key=`), 'the page link carries the key in its fragment')
  t.notMatch(inspect(sandbox, { depth: 5, getters: true }), sandbox.apiKey)
  t.equal(sandbox.inspectorUrl, `${sandbox.baseUrl}/#key=${sandbox.apiKey}`)
})

t.test('inspect: every delivery is verified by the library and recorded with its verdict', async (t) => {
  const sandbox = await sandboxFor(t)
  const inspector = await inspectorFor(t, sandbox)
  sandbox.enroll(`${inspector.url}/hooks/mc`)
  await sandbox.deliver()
  await sandbox.deliver(undefined, { tamper: 'body' })
  await sandbox.deliver(undefined, { tamper: 'expired' })
  await sandbox.deliver(undefined, { tamper: 'signature' })
  await sandbox.deliver(undefined, { tamper: 'replay' })
  await sandbox.deliver([{ event: 'delivered', customer_handle: 'someone-else', timestamp: Math.floor(Date.now() / 1000) }])
  t.same(inspector.deliveries.map((d) => [d.statusCode, d.outcome, d.reason?.type ?? null]), [
    [204, 'accepted', null],
    [401, 'rejected', 'digest_mismatch'],
    [401, 'rejected', 'signature_expired'],
    [401, 'rejected', 'signature_invalid'],
    [200, 'duplicate', null],
    [403, 'rejected', 'customer_not_allowed'],
  ])
  const detail = await json(fetch(`${inspector.url}/inspector/api/attempts/2`, { headers: { 'x-api-key': inspector.apiKey } }))
  t.equal(detail.request.url, '/hooks/mc')
  t.equal(detail.digest.matches, false, 'the tampered body no longer matches its digest')
  t.match(detail.reason.message, /does not match its Content-Digest/)
  t.match(detail.response.body, '"code":"digest_mismatch"', 'the answer as sent')

  const huge = await rawRequest(inspector.url, 'POST', '/big', ['Host: 127.0.0.1', 'Content-Type: application/json'], 'x'.repeat(100))
  t.equal(huge.status, 400, 'unsigned: missing_header')
  t.equal(inspector.deliveries.at(-1)!.reason?.type, 'missing_header')
})

t.test('inspect: a body over the limit is answered 413 and kept cut short', async (t) => {
  const inspector = await createInspector({ publicKey: crypto.generateKeyPairSync('ed25519').publicKey.export({ format: 'der', type: 'spki' }).toString('base64'), bodyLimit: 64 })
  t.teardown(() => inspector.close())
  const res = await fetch(`${inspector.url}/w`, { method: 'POST', body: 'y'.repeat(200) })
  t.equal(res.status, 413)
  t.equal((await json(res)).code, 'payload_too_large')
  t.match(inspector.deliveries[0], { statusCode: 413, outcome: 'rejected', reason: { type: 'payload_too_large' } })
  await t.rejects(createInspector({ publicKey: 'x', baseUrl: 'https://api.mailchannels.net' }), { name: 'TypeError', message: /publicKey and baseUrl cannot be given together/ })
  await t.rejects(createInspector({ publicKey: 'not a key' }), { name: 'TypeError', message: /publicKey is not usable/ })
  await t.rejects(createInspector({ baseUrl: 'http://example.com' }), { name: 'TypeError', message: /baseUrl must use https:/ })
  await t.rejects(createInspector({ customerHandles: [] }), { name: 'TypeError', message: /customerHandles must be a non-empty array/ })
})

t.test('sandbox: the detail shows exactly the headers the receiver got, the body sent and the signature base signed', async (t) => {
  const sandbox = await sandboxFor(t)
  const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: [sandbox.customerHandle] })
  sandbox.enroll(receiver.url)
  const res = await fetch(`${sandbox.baseUrl}/sandbox/deliver?types=click,delivered,click`, { method: 'POST', headers: { 'x-api-key': sandbox.apiKey } })
  t.equal(res.status, 200)
  const got = receiver.got[0]!
  t.same(JSON.parse(got.body.toString()).map((e: { event: string }) => e.event), ['click', 'delivered', 'click'], 'the chosen event types, in order')
  const list = await json(fetch(`${sandbox.baseUrl}/inspector/api/attempts`, { headers: { 'x-api-key': sandbox.apiKey } }))
  t.match(list.attempts, [{ seq: 1, batchId: 1, attempt: 1, eventCount: 3, eventTypes: ['click', 'delivered', 'click'], statusCode: 204, outcome: 'accepted', reason: null }])
  const detail = await json(fetch(`${sandbox.baseUrl}/inspector/api/attempts/1`, { headers: { 'x-api-key': sandbox.apiKey } }))
  const rawPairs: string[][] = []
  for (let i = 0; i < got.rawHeaders.length; i += 2) rawPairs.push([got.rawHeaders[i]!, got.rawHeaders[i + 1]!])
  t.same(detail.request.headers, rawPairs, 'every header line, in order, as the receiver read it')
  t.equal(detail.request.body, got.body.toString('utf8'))
  t.equal(detail.digest.matches, true)
  const input = rawPairs.find(([n]) => n === 'signature-input')![1]!
  const signature = rawPairs.find(([n]) => n === 'signature')![1]!
  const digest = rawPairs.find(([n]) => n === 'content-digest')![1]!
  t.equal(detail.signature.base, `"content-digest": ${digest}\n"@signature-params": ${input.slice(input.indexOf('=') + 1)}`)
  const key = crypto.createPublicKey({ key: Buffer.from(sandbox.publicKey, 'base64'), format: 'der', type: 'spki' })
  t.ok(crypto.verify(null, Buffer.from(detail.signature.base), key, Buffer.from(signature.split(':')[1]!, 'base64')), 'the base shown is what was signed')
  t.equal(detail.signature.keyId, sandbox.keyId)

  const bad = await fetch(`${sandbox.baseUrl}/sandbox/deliver?types=delivered,nope`, { method: 'POST', headers: { 'x-api-key': sandbox.apiKey } })
  t.equal(bad.status, 400)
  t.match((await json(bad)).errors[0], /types must be a comma-separated list/)
  t.equal((await fetch(`${sandbox.baseUrl}/inspector/api/attempts/99`, { headers: { 'x-api-key': sandbox.apiKey } })).status, 404)
})

t.test('sandbox: the receiver\'s error body gives the reason; a spoiled delivery it accepts is flagged', async (t) => {
  const sandbox = await sandboxFor(t)
  let answer = { status: 200, body: '{}' }
  const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: [sandbox.customerHandle], override: () => answer })
  sandbox.enroll(receiver.url)
  await sandbox.deliver(undefined, { tamper: 'body' })
  answer = { status: 422, body: JSON.stringify({ statusCode: 422, code: 'x'.repeat(500), error: 'Unprocessable', message: 'm'.repeat(5000) }) }
  await sandbox.deliver()
  answer = { status: 400, body: '{"error":"not the library shape"}' }
  await sandbox.deliver()
  const list = (await json(fetch(`${sandbox.baseUrl}/inspector/api/attempts`, { headers: { 'x-api-key': sandbox.apiKey } }))).attempts
  t.match(list[0], { outcome: 'accepted', tamper: 'body', warning: /should have rejected it/ })
  t.equal(list[1].reason.type.length, 100, 'a long code is cut')
  t.equal(list[1].reason.message.length, 2000, 'a long message is cut')
  t.equal(list[2].reason, null, 'another shape gives no reason')
  t.equal(list[2].outcome, 'rejected')
})

t.test('live stream: needs the key, replays what came after ?after=, then each new attempt', async (t) => {
  const sandbox = await sandboxFor(t)
  const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: [sandbox.customerHandle] })
  sandbox.enroll(receiver.url)
  await sandbox.deliver()
  const ctl = new AbortController()
  t.teardown(() => ctl.abort())
  const res = await fetch(`${sandbox.baseUrl}/inspector/api/stream?after=0`, { headers: { 'x-api-key': sandbox.apiKey }, signal: ctl.signal })
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^text\/event-stream/)
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader()
  let text = ''
  const until = async (pattern: RegExp): Promise<void> => {
    while (!pattern.test(text)) text += (await reader.read()).value ?? ''
  }
  await until(/event: attempt\ndata: \{"seq":1,/)
  await sandbox.deliver(undefined, { tamper: 'expired' })
  await until(/"seq":2,.*"reason":\{"type":"signature_expired"/)
  sandbox.rotateKey()
  await until(/event: info\n/)
  t.pass('the stream told of the new attempt and of the rotation')

  // Bounded: a page left open holds one stream; past the limit a new one is told to wait.
  const more = await Promise.all(Array.from({ length: 15 }, async () => fetch(`${sandbox.baseUrl}/inspector/api/stream`, { headers: { 'x-api-key': sandbox.apiKey }, signal: ctl.signal })))
  t.same(more.map((r) => r.status), Array(15).fill(200))
  const over = await fetch(`${sandbox.baseUrl}/inspector/api/stream`, { headers: { 'x-api-key': sandbox.apiKey } })
  t.equal(over.status, 503)
  t.equal(over.headers.get('retry-after'), '5')
  t.equal((await fetch(`${sandbox.baseUrl}/inspector/api/stream?after=x`, { headers: { 'x-api-key': sandbox.apiKey } })).status, 400)
})
