// Each runtime example run as its folder's README.md says, against the local sandbox: the README's
// sandbox command (this clone's built CLI), its build steps, then its command line for the example
// (Deno, Bun and workerd as scripts/with-runtime.sh provides them, Node through npx tsx), with
// MAILCHANNELS_BASE_URL pointed at that sandbox. The example is enrolled at the README's target
// path, as `mailchannels-webhooks enroll <url> --sandbox` does; the sandbox's sender delivers to
// it. The sandbox must report the delivery accepted, the example must print a line for each
// verified event, and a tampered delivery must be refused.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { serve } from '@hono/node-server'
import t, { type Test } from 'tap'
import { WEBHOOK_EVENT_TYPES } from '../../src/events/types.js'
import { ROOT, runtimeBinary, startEdgeRuntime, unavailableReason, type RuntimeName } from '../runtimes/helpers/runtimes.js'
import { readmeFlows, runStep, startSandboxCli, startServe, waitForOutput, type ReadmeFlow, type RunningSandbox } from './helpers/readme-flow.js'

t.before(() => {
  // `npm test` builds first; when run alone, build once (the examples import the package by name,
  // and the READMEs run the built CLI).
  if (!['cli.js', 'web/index.js', 'hono/index.js', 'crypto/web.js'].every((f) => existsSync(path.join(ROOT, 'dist', f)))) {
    execFileSync(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'pipe' })
  }
})

const received = (output: string): string[] => output.match(/^received [a-z-]+ event$/gm) ?? []
/** The sandbox's last attempt lines (not its header, which holds its API key). */
const attempts = (output: string, last = 8): string => (output.match(/^batch .*$/gm) ?? []).slice(-last).join('\n')

async function sandboxFor (t: Test, cwd: string, flow: ReadmeFlow): Promise<RunningSandbox> {
  t.equal(flow.serve.env.MAILCHANNELS_BASE_URL, `http://127.0.0.1:${flow.sandboxPort}`, 'the example takes its key from the sandbox the README starts')
  const sandbox = await startSandboxCli(t, cwd, flow.sandbox)
  t.equal(flow.serve.env.MAILCHANNELS_CUSTOMER_HANDLE, sandbox.customerHandle, 'and accepts the customer handle the sandbox prints')
  return sandbox
}

/** The status the example's README says the sandbox prints for each delivery ("The sandbox prints `204 accepted`"). */
function readmeStatus (folder: string): string | undefined {
  return /The sandbox prints `(\d{3}) accepted`/.exec(readFileSync(path.join(ROOT, 'examples', folder, 'README.md'), 'utf8'))?.[1]
}

/**
 * Enrolls `target` in the sandbox, then waits for its sender's deliveries; `printed` reads the
 * example's event lines. The sandbox's attempt lines show the status the README says they do.
 */
async function deliverAndCheck (t: Test, sandbox: RunningSandbox, target: string, printed: () => string[], folder: string): Promise<void> {
  const status = readmeStatus(folder)
  t.ok(status !== undefined, `examples/${folder}/README.md says what the sandbox prints for each delivery`)
  const headers = { 'x-api-key': sandbox.apiKey }
  const enrolled = await fetch(`${sandbox.url}/tx/v1/webhook?endpoint=${encodeURIComponent(target)}`, { method: 'POST', headers, signal: AbortSignal.timeout(15_000) })
  t.equal(enrolled.status, 201, `the example's endpoint is enrolled (${target})`)
  const accepted = await waitForOutput(sandbox.output, (out) => /attempt \d+\s+2\d\d accepted/.test(out), 30_000)
  t.ok(accepted, `the sandbox reports its delivery accepted; its last attempts:\n${attempts(sandbox.output())}`)
  // The sandbox's batches carry one event of each type.
  const all = (): boolean => WEBHOOK_EVENT_TYPES.every((type) => printed().includes(`received ${type} event`))
  t.ok(await waitForOutput(() => printed().join('\n'), all), `a line for each verified event: ${printed().join(', ')}`)
  t.notMatch(attempts(sandbox.output(), Infinity), /\b(rejected|failed|no response)\b/, 'no attempt refused or unanswered')
  const shown = [...new Set((attempts(sandbox.output(), Infinity).match(/\b2\d\d accepted\b/g) ?? []))]
  t.strictSame(shown, [`${status} accepted`], `the sandbox printed what examples/${folder}/README.md says`)
  const res = await fetch(`${sandbox.url}/sandbox/deliver?tamper=body`, { method: 'POST', headers, signal: AbortSignal.timeout(15_000) })
  const tampered = await res.json() as { status_code: number | null }
  t.equal(tampered.status_code, 401, 'a tampered delivery is refused')
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
    const cwd = path.join(ROOT, 'examples', folder)
    const sandbox = await sandboxFor(t, cwd, flow)
    // A user with the runtime installed has it on PATH; scripts/with-runtime.sh puts it there too.
    const pathPrefix = runtime === null ? [] : [path.dirname(runtimeBinary(runtime)!)]
    for (const step of flow.steps) runStep(t, cwd, step, pathPrefix)
    // workerd takes its port from workerd.capnp (8000): made free here, and reported on a control fd.
    const extra = runtime === 'workerd' ? ['--socket-addr=http=127.0.0.1:0', '--control-fd=3'] : []
    const example = await startServe(t, cwd, flow.serve, { MAILCHANNELS_BASE_URL: sandbox.url, PORT: '0' }, pathPrefix, extra)
    await deliverAndCheck(t, sandbox, `${example.url}${flow.targetPath}`, () => received(example.output()), folder)
  })
}

const FOLDERS: Array<[folder: string, name: string, flows: number]> = [
  ['deno', 'Deno (examples/deno)', 1],
  ['bun', 'Bun (examples/bun)', 1],
  ['cloudflare-worker', 'Cloudflare Worker in workerd (examples/cloudflare-worker)', 1],
  ['hono', 'Hono (examples/hono)', 2],
  ['nestjs', 'NestJS on Express and on Fastify (examples/nestjs)', 2],
]

for (const [folder, name, count] of FOLDERS) {
  const flows = readmeFlows(folder)
  t.equal(flows.length, count, `examples/${folder}/README.md shows ${count} way(s) to run it against the sandbox`)
  for (const flow of flows) flowTest(folder, flow, name)
}

// Next.js is not installed here: the route module is loaded as `next build` loads it, then served
// as `next dev` serves it, on Node and in Vercel's edge-runtime, with the README's variables.
const NEXT_CWD = path.join(ROOT, 'examples', 'nextjs')

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

  const sandbox = await sandboxFor(t, NEXT_CWD, flow!)
  Object.assign(process.env, flow!.serve.env, { MAILCHANNELS_BASE_URL: sandbox.url })
  const logs = t.capture(console, 'log')
  const server = serve({ fetch: (request: Request) => request.method === 'POST' ? route.POST(request) : new Response(null, { status: 405 }), hostname: '127.0.0.1', port: 0 })
  await new Promise<void>((resolve) => server.once('listening', () => resolve()))
  t.teardown(() => new Promise<void>((resolve) => { server.close(() => resolve()) }))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${flow!.targetPath}`
  await deliverAndCheck(t, sandbox, url, () => received(logs.calls.map((c) => String(c.args[0])).join('\n')), 'nextjs')
})

t.test('Next.js route (examples/nextjs) in Vercel\'s edge-runtime', { skip: unavailableReason('edge-runtime') ?? false }, async (t) => {
  const [flow] = readmeFlows('nextjs')
  const sandbox = await sandboxFor(t, NEXT_CWD, flow!)
  const env = { MAILCHANNELS_PUBLIC_KEY: '', ...flow!.serve.env, MAILCHANNELS_BASE_URL: sandbox.url }
  const define = Object.fromEntries(Object.entries(env).map(([k, v]) => [`process.env.${k}`, JSON.stringify(v)]))
  const logs = t.capture(console, 'log')
  const server = await startEdgeRuntime({ entry: 'test/examples/helpers/nextjs-route-worker.ts', define })
  t.teardown(() => server.close())
  await deliverAndCheck(t, sandbox, `${server.url}${flow!.targetPath}`, () => received(logs.calls.map((c) => String(c.args[0])).join('\n')), 'nextjs')
})
