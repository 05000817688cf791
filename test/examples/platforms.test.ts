// Every platform example, run where it is meant to run, with the built package (dist/) as a user
// gets it: the Cloudflare Worker and the Hono app in workerd (without nodejs_compat), the Hono
// app on Node with @hono/node-server, the Next.js route on Node and in Vercel's edge-runtime,
// Deno.serve in Deno and Bun.serve in Bun. Each answers a signed delivery, refuses a tampered
// one and answers a resend as a duplicate.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { ROOT, startEdgeRuntime, startScript, startWorkerd, unavailableReason, type RuntimeServer } from '../runtimes/helpers/runtimes.js'
import { startExample } from './helpers/run-example.js'

const CUSTOMER = 'acct_example'
const keys = generateSigningKeyPair()
const ENV = { MAILCHANNELS_CUSTOMER_HANDLE: CUSTOMER, MAILCHANNELS_PUBLIC_KEY: keys.publicKey }

t.before(() => {
  // `npm test` builds first; when run alone, build once (the examples import the package by name).
  const dist = path.join(ROOT, 'dist')
  if (!['index.js', 'web/index.js', 'hono/index.js', 'crypto/web.js'].every((f) => existsSync(path.join(dist, f)))) {
    execFileSync(path.join(ROOT, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'pipe' })
  }
})

let n = 0
const sign = (): SignedWebhook => signWebhook({
  events: [{ event: 'delivered', customer_handle: CUSTOMER, timestamp: Math.floor(Date.now() / 1000), request_id: `ex-${++n}` }],
  privateKey: keys.privateKey,
})

async function send (url: string, signed: SignedWebhook, body: Uint8Array = signed.body): Promise<{ status: number, text: string }> {
  const res = await fetch(url, { method: 'POST', headers: signed.headers, body, signal: AbortSignal.timeout(15_000) })
  return { status: res.status, text: await res.text() }
}

/** The behaviour every example shares: handled (2xx), tampered (401), resend (200 duplicate). */
async function exercise (t: Test, url: string, handled: { status: number, body?: unknown }): Promise<void> {
  const signed = sign()
  const first = await send(url, signed)
  t.equal(first.status, handled.status, `a signed delivery is handled (${first.text})`)
  if (handled.body !== undefined) t.strictSame(JSON.parse(first.text), handled.body)
  const again = await send(url, signed)
  t.equal(again.status, 200)
  t.strictSame(JSON.parse(again.text), { duplicate: true }, 'the resend is a duplicate')
  const other = sign()
  const tampered = new Uint8Array(other.body)
  tampered[tampered.length - 3] = tampered[tampered.length - 3]! ^ 1
  const bad = await send(url, other, tampered)
  t.equal(bad.status, 401)
  t.match(JSON.parse(bad.text), { code: 'digest_mismatch' })
}

async function started (t: Test, server: Promise<RuntimeServer>): Promise<RuntimeServer> {
  const s = await server
  t.teardown(() => s.close())
  return s
}

t.test('Cloudflare Worker (examples/cloudflare-worker) in workerd, as its wrangler.toml says', { skip: unavailableReason('workerd') ?? false }, async (t) => {
  const toml = readFileSync(path.join(ROOT, 'examples/cloudflare-worker/wrangler.toml'), 'utf8')
  t.notMatch(toml.replace(/#.*$/gm, ''), /nodejs_compat/, 'no nodejs_compat flag')
  const main = /^main\s*=\s*"([^"]+)"/m.exec(toml)?.[1]
  const date = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(toml)?.[1]
  t.ok(main !== undefined && date !== undefined, 'main and compatibility_date are set')
  const server = await started(t, startWorkerd({ entry: path.join(ROOT, 'examples/cloudflare-worker', main!), env: ENV, compatibilityDate: date }))
  await exercise(t, `${server.url}/webhooks/mailchannels`, { status: 204 })
  t.equal((await fetch(`${server.url}/elsewhere`)).status, 404)
})

t.test('Hono app on Workers (examples/hono/worker.ts) in workerd', { skip: unavailableReason('workerd') ?? false }, async (t) => {
  const server = await started(t, startWorkerd({ entry: 'examples/hono/worker.ts', env: ENV }))
  await exercise(t, `${server.url}/webhooks/mailchannels`, { status: 200, body: { received: ['delivered'] } })
  t.equal(await (await fetch(`${server.url}/health`)).text(), 'ok')
})

t.test('Hono app on Node (examples/hono/node.ts) with @hono/node-server', async (t) => {
  const run = startExample(t, 'hono/node.ts', { ...ENV, PORT: '0' }, 60_000)
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setInterval(() => {
      const m = /Listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(run.stdout())
      if (m !== null) { clearInterval(timer); resolve(Number(m[1])) }
      if (run.child.exitCode !== null) { clearInterval(timer); reject(new Error(`exited: ${run.stderr()}`)) }
    }, 20)
  })
  await exercise(t, `http://127.0.0.1:${port}/webhooks/mailchannels`, { status: 200, body: { received: ['delivered'] } })
  run.child.kill('SIGTERM')
  t.equal(await run.exited, 0, 'stops on SIGTERM')
})

t.test('Next.js route (examples/nextjs/app/api/mailchannels/route.ts) on the Node.js runtime', async (t) => {
  Object.assign(process.env, ENV)
  t.teardown(() => { for (const k of Object.keys(ENV)) delete process.env[k] })
  const route = await import('../../examples/nextjs/app/api/mailchannels/route.js')
  t.type(route.POST, 'function', 'export const POST')
  const signed = sign()
  const req = (): Request => new Request('http://127.0.0.1/api/mailchannels', { method: 'POST', headers: signed.headers, body: new Uint8Array(signed.body) })
  const first = await route.POST(req())
  t.equal(first.status, 200)
  t.strictSame(await first.json(), { received: 1 })
  t.strictSame(await (await route.POST(req())).json(), { duplicate: true })
})

t.test('Next.js route in Vercel\'s edge-runtime (process.env inlined at build, as Next does)', { skip: unavailableReason('edge-runtime') ?? false }, async (t) => {
  const define = Object.fromEntries(Object.entries(ENV).map(([k, v]) => [`process.env.${k}`, JSON.stringify(v)]))
  define['process.env.MAILCHANNELS_BASE_URL'] = 'undefined' // unset: the key is ENV's
  const server = await started(t, startEdgeRuntime({ entry: 'test/examples/helpers/nextjs-route-worker.ts', define }))
  await exercise(t, `${server.url}/api/mailchannels`, { status: 200, body: { received: 1 } })
})

t.test('Deno.serve (examples/deno/main.ts) in Deno', { skip: unavailableReason('deno') ?? false }, async (t) => {
  const server = await started(t, startScript('deno', 'examples/deno/main.ts', ENV))
  await exercise(t, `${server.url}/webhooks/mailchannels`, { status: 200, body: { received: ['delivered'] } })
  t.equal((await fetch(`${server.url}/`)).status, 404)
})

t.test('Bun.serve (examples/bun/server.ts) in Bun', { skip: unavailableReason('bun') ?? false }, async (t) => {
  const server = await started(t, startScript('bun', 'examples/bun/server.ts', ENV))
  await exercise(t, `${server.url}/webhooks/mailchannels`, { status: 200, body: { received: ['delivered'] } })
  t.equal((await fetch(`${server.url}/`)).status, 404)
})
