import t from 'tap'
import net from 'node:net'
import { createSandbox } from '../../src/testing/index.js'
import { api, testSandbox } from './helpers/sandbox.js'

// Sandbox exposure (docs/security.md, "The sandbox"). A DNS-rebinding page reaches the sandbox under
// its own host name; a well-known API key and an unbounded key map made that worth doing.

/** Sends one raw HTTP/1.1 request with exactly the given Host line and returns status and body. */
async function rawRequest (baseUrl: string, method: string, path: string, host: string | null, extra: string[] = []): Promise<{ status: number, body: string, head: string }> {
  const { port } = new URL(baseUrl)
  const socket = net.connect(Number(port), '127.0.0.1')
  const lines = [`${method} ${path} HTTP/1.1`, ...(host === null ? [] : [`Host: ${host}`]), ...extra, 'Connection: close', '', '']
  socket.end(lines.join('\r\n'))
  const chunks: Buffer[] = []
  for await (const chunk of socket) chunks.push(chunk as Buffer)
  const text = Buffer.concat(chunks).toString('latin1')
  const [head = '', body = ''] = text.split('\r\n\r\n')
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]), body, head }
}

t.test('a request addressed to another host is refused (DNS rebinding)', async (t) => {
  const sandbox = await testSandbox(t)
  const key = `X-Api-Key: ${sandbox.apiKey}`
  const keyIdBefore = sandbox.keyId
  for (const host of ['evil.example', 'evil.example:80', `attacker.example:${new URL(sandbox.baseUrl).port}`, '127.0.0.1.evil.example', 'localhost.evil.example', '192.168.1.10', '0.0.0.0', '[::2]', '128.0.0.1', '127.0.0.256', 'localhost:99999', 'localhost:', 'user@127.0.0.1', '127.0.0.1, evil.example']) {
    for (const [method, path] of [['GET', '/tx/v1/webhook-batch'], ['POST', '/sandbox/rotate-key'], ['GET', `/tx/v1/webhook/public-key?id=${sandbox.keyId}`], ['POST', '/sandbox/deliver']] as const) {
      const res = await rawRequest(sandbox.baseUrl, method, path, host, [key])
      // Node itself answers 400 to a Host line it cannot parse; either way nothing is served.
      t.ok(res.status === 421 || res.status === 400, `${host} ${method} ${path}: ${res.status}`)
      if (res.status === 421) {
        t.match(JSON.parse(res.body), { errors: [/only to requests addressed to a loopback host/] }, 'a clear JSON message')
      }
    }
  }
  t.equal(sandbox.stats.batchListRequests, 0, 'no listing was served')
  t.equal(sandbox.stats.publicKeyRequests, 0, 'no key was served')
  t.equal(sandbox.keyId, keyIdBefore, 'no rotation happened')
  t.equal(sandbox.batches.length, 0, 'nothing was delivered')
  const missing = await rawRequest(sandbox.baseUrl, 'GET', '/tx/v1/webhook-batch', null, [key])
  t.ok(missing.status === 421 || missing.status === 400, `no Host at all: ${missing.status}`)
})

t.test('loopback Host values are served, with or without a port', async (t) => {
  const sandbox = await testSandbox(t)
  const { port } = new URL(sandbox.baseUrl)
  for (const host of ['127.0.0.1', `127.0.0.1:${port}`, '127.1.2.3', `127.255.255.254:${port}`, 'localhost', `LocalHost:${port}`, '[::1]', `[::1]:${port}`]) {
    const res = await rawRequest(sandbox.baseUrl, 'GET', '/tx/v1/webhook-batch', host, [`X-Api-Key: ${sandbox.apiKey}`])
    t.equal(res.status, 200, host)
  }
  t.equal(sandbox.stats.batchListRequests, 8)
})

t.test('a random API key per run; the old fixed default no longer works', async (t) => {
  const a = await createSandbox()
  t.teardown(() => a.close())
  const b = await createSandbox()
  t.teardown(() => b.close())
  t.not(a.apiKey, 'sandbox-api-key')
  t.not(a.apiKey, b.apiKey, 'each run has its own')
  t.match(a.apiKey, /^[A-Za-z0-9_-]{32}$/, '192 random bits, base64url')
  t.equal((await api(a, '/tx/v1/webhook-batch', 'sandbox-api-key')).status, 401, 'the old well-known key is refused')
  t.equal((await api(a, '/tx/v1/webhook-batch', b.apiKey)).status, 401, 'another run\'s key is refused')
  t.equal((await api(a, '/tx/v1/webhook-batch')).status, 200)
  const chosen = await testSandbox(t, { apiKey: 'my-own-key' })
  t.equal(chosen.apiKey, 'my-own-key', 'a key can still be given')
  t.equal((await api(chosen, '/tx/v1/webhook-batch', 'my-own-key')).status, 200)
})

t.test('a given API key must be usable with the API client: no spaces or control characters', async (t) => {
  for (const apiKey of ['key\n', ' key', 'my key', 'k\u00e9y']) {
    await t.rejects(createSandbox({ apiKey }), { name: 'TypeError', message: 'apiKey must be printable ASCII without spaces or control characters' }, JSON.stringify(apiKey))
  }
})

t.test('the API key never shows up in inspect output or JSON', async (t) => {
  const sandbox = await testSandbox(t)
  const { inspect } = await import('node:util')
  t.notMatch(inspect(sandbox, { depth: 5, getters: true }), sandbox.apiKey)
  t.notMatch(JSON.stringify(sandbox), sandbox.apiKey)
})

t.test('served keys are capped: rotations keep the last maxKeys', async (t) => {
  const sandbox = await testSandbox(t)
  const ids = [sandbox.keyId]
  for (let i = 0; i < 15; i++) {
    const res = await api(sandbox, '/sandbox/rotate-key', sandbox.apiKey, 'POST')
    t.equal(res.status, 200)
    ids.push(res.body.id)
  }
  t.equal(new Set(ids).size, 16, 'every rotation has a new key id')
  const served = await Promise.all(ids.map(async (id) => (await api(sandbox, `/tx/v1/webhook/public-key?id=${id}`, null)).status))
  t.same(served, [...Array(11).fill(404), 200, 200, 200, 200, 200], 'the default keeps 5 keys: the current one and 4 before it')

  const three = await testSandbox(t, { maxKeys: 3 })
  const first = three.keyId
  for (let i = 0; i < 13; i++) three.rotateKey()
  t.equal((await api(three, `/tx/v1/webhook/public-key?id=${first}`, null)).status, 404)
  t.equal((await api(three, `/tx/v1/webhook/public-key?id=${three.keyId}`, null)).status, 200)
  await t.rejects(createSandbox({ maxKeys: 0 }), { name: 'TypeError', message: 'maxKeys must be an integer from 1 to 100' })
})

t.test('each run signs under a fresh random key id', async (t) => {
  const a = await testSandbox(t)
  const b = await testSandbox(t)
  t.match(a.keyId, /^sandbox-[0-9a-f]{16}$/)
  t.not(a.keyId, b.keyId, 'a restarted sandbox never reuses a key id a receiver may have cached')
  t.equal((await api(b, `/tx/v1/webhook/public-key?id=${a.keyId}`, null)).status, 404)
})
