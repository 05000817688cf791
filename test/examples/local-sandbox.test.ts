// Each runtime example run as its folder's README.md says, against the local sandbox: the README's
// build steps, then its command line for the example (Deno, Bun and workerd as
// scripts/with-runtime.sh provides them, Node through npx tsx), with MAILCHANNELS_BASE_URL pointed
// at a sandbox this test starts; the sandbox delivers a batch, signed as MailChannels signs it,
// to the README's target path. The example must answer 2xx and print one line per verified event,
// and must refuse a tampered delivery without handling any of its events.
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { serve } from '@hono/node-server'
import t, { type Test } from 'tap'
import { createSandbox, type Sandbox } from '../../src/testing/index.js'
import { ROOT, runtimeBinary, startEdgeRuntime, unavailableReason, type RuntimeName } from '../runtimes/helpers/runtimes.js'
import { readmeFlows, runStep, startServe, waitForOutput, type ReadmeFlow } from './helpers/readme-flow.js'

const received = (output: string): string[] => output.match(/^received [a-z-]+ event$/gm) ?? []

async function sandboxFor (t: Test, flow: ReadmeFlow): Promise<Sandbox> {
  t.equal(flow.serve.env.MAILCHANNELS_BASE_URL, `http://127.0.0.1:${flow.sandboxPort}`, 'the example takes its key from the sandbox the README starts')
  // One attempt per delivery: a failure shows at once instead of being retried.
  const sandbox = await createSandbox({ port: 0, customerHandle: flow.serve.env.MAILCHANNELS_CUSTOMER_HANDLE, maxAttempts: 1 })
  t.teardown(() => sandbox.close())
  return sandbox
}

/** The sandbox delivers a batch, then a tampered one; `printed` reads the example's event lines. */
async function deliverAndCheck (t: Test, sandbox: Sandbox, target: string, printed: () => string[]): Promise<void> {
  const batch = await sandbox.deliver(undefined, { target })
  t.equal(batch.status, '2xx_response', `the example accepts the sandbox's delivery (answered ${batch.status_code})`)
  await waitForOutput(() => printed().join('\n'), () => printed().length >= batch.event_count)
  const lines = printed()
  t.equal(lines.length, batch.event_count, `one line per verified event (${batch.event_count})`)
  t.ok(lines.includes('received delivered event') && lines.includes('received click event'), 'the events as sent')
  const bad = await sandbox.deliver(undefined, { target, tamper: 'body' })
  t.equal(bad.status_code, 401, 'a tampered delivery is refused')
  t.equal(printed().length, batch.event_count, 'and none of its events is handled')
}

function runtimeOf (flow: ReadmeFlow): Exclude<RuntimeName, 'edge-runtime'> | null {
  const words = flow.serve.argv
  if (words.includes('workerd')) return 'workerd'
  if (words[0] === 'deno' || words[0] === 'bun') return words[0]
  return null
}

function flowTest (folder: string, flow: ReadmeFlow, name: string): void {
  const runtime = runtimeOf(flow)
  const skip = runtime === null ? false : (unavailableReason(runtime) ?? false)
  t.test(`${name}: ${flow.serve.argv.join(' ')}`, { skip }, async (t) => {
    const sandbox = await sandboxFor(t, flow)
    const cwd = path.join(ROOT, 'examples', folder)
    // A user with the runtime installed has it on PATH; scripts/with-runtime.sh puts it there too.
    const pathPrefix = runtime === null ? [] : [path.dirname(runtimeBinary(runtime)!)]
    for (const step of flow.steps) runStep(t, cwd, step, pathPrefix)
    // workerd takes its port from workerd.capnp (8000): made free here, and reported on a control fd.
    const extra = runtime === 'workerd' ? ['--socket-addr=http=127.0.0.1:0', '--control-fd=3'] : []
    const example = await startServe(t, cwd, flow.serve, { MAILCHANNELS_BASE_URL: sandbox.baseUrl, PORT: '0' }, pathPrefix, extra)
    await deliverAndCheck(t, sandbox, `${example.url}${flow.targetPath}`, () => received(example.output()))
  })
}

const FOLDERS: Array<[folder: string, name: string, flows: number]> = [
  ['deno', 'Deno (examples/deno)', 1],
  ['bun', 'Bun (examples/bun)', 1],
  ['cloudflare-worker', 'Cloudflare Worker in workerd (examples/cloudflare-worker)', 1],
  ['hono', 'Hono (examples/hono)', 2],
]

for (const [folder, name, count] of FOLDERS) {
  const flows = readmeFlows(folder)
  t.equal(flows.length, count, `examples/${folder}/README.md shows ${count} way(s) to run it against the sandbox`)
  for (const flow of flows) flowTest(folder, flow, name)
}

// Next.js is not installed here: the route module is loaded as `next build` loads it, then served
// as `next dev` serves it, on Node and in Vercel's edge-runtime, with the README's variables.
t.test('Next.js route (examples/nextjs) on the Node.js runtime', async (t) => {
  const [flow] = readmeFlows('nextjs')
  t.ok(flow !== undefined, 'examples/nextjs/README.md shows how to run it against the sandbox')
  const names = ['MAILCHANNELS_CUSTOMER_HANDLE', 'MAILCHANNELS_PUBLIC_KEY', 'MAILCHANNELS_BASE_URL']
  const saved = names.map((n) => process.env[n])
  for (const n of names) delete process.env[n]
  t.teardown(() => { names.forEach((n, i) => { if (saved[i] === undefined) delete process.env[n]; else process.env[n] = saved[i] }) })
  // `next build` loads the module to collect page data, with the variables unset.
  const route = await import('../../examples/nextjs/app/api/mailchannels/route.js')
  t.type(route.POST, 'function', 'the module loads with no variables set')

  const sandbox = await sandboxFor(t, flow!)
  Object.assign(process.env, flow!.serve.env, { MAILCHANNELS_BASE_URL: sandbox.baseUrl })
  const logs = t.capture(console, 'log')
  const server = serve({ fetch: (request: Request) => request.method === 'POST' ? route.POST(request) : new Response(null, { status: 405 }), hostname: '127.0.0.1', port: 0 })
  await new Promise<void>((resolve) => server.once('listening', () => resolve()))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${flow!.targetPath}`
  await deliverAndCheck(t, sandbox, url, () => received(logs.calls.map((c) => String(c.args[0])).join('\n')))
})

t.test('Next.js route (examples/nextjs) in Vercel\'s edge-runtime', { skip: unavailableReason('edge-runtime') ?? false }, async (t) => {
  const [flow] = readmeFlows('nextjs')
  const sandbox = await sandboxFor(t, flow!)
  const env = { MAILCHANNELS_PUBLIC_KEY: '', ...flow!.serve.env, MAILCHANNELS_BASE_URL: sandbox.baseUrl }
  const define = Object.fromEntries(Object.entries(env).map(([k, v]) => [`process.env.${k}`, JSON.stringify(v)]))
  const logs = t.capture(console, 'log')
  const server = await startEdgeRuntime({ entry: 'test/examples/helpers/nextjs-route-worker.ts', define })
  t.teardown(() => server.close())
  await deliverAndCheck(t, sandbox, `${server.url}${flow!.targetPath}`, () => received(logs.calls.map((c) => String(c.args[0])).join('\n')))
})
