// Workers cold start, measured in workerd: the time from spawning workerd with a freshly bundled
// Worker to the first verified response, median of several runs. The Worker calls
// verifyWebhookRequest and its signing key is fetched, as in production, on that first request
// (from a key server on loopback). A trivial Worker that answers without the library is timed
// the same way, alternated with it: the difference is what the library adds to a cold start.
//
//   node bench/cold-start.mjs [--runs 9] [--source] [--baseline <package folder>]
//
// --baseline adds the same Worker bundled from another build: a folder holding that build's
// package.json and dist/ (and node_modules, e.g. a symbolic link to this one's).
// Bundled as bench/bundle-size.mjs bundles (esbuild, browser, workerd/worker/browser, minified),
// from dist/ (build first) or, with --source, from src/. workerd is the version
// scripts/with-runtime.sh pins, fetched into its cache on first use.
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { bundle } from './bundle-size.mjs'
import { CUSTOMER_HANDLE, KEY_ID, contentDigest, makeBody, makeKeyPair, signedHeaders } from './lib/fixtures.mjs'

const ROOT = fileURLToPath(new URL('../', import.meta.url))
const { values: o } = parseArgs({ options: { runs: { type: 'string', default: '9' }, source: { type: 'boolean', default: false }, baseline: { type: 'string' } } })
const runs = Number(o.runs)
/** Every workerd is killed after this long, whatever happens. */
const LIFETIME_MS = 30_000

const which = spawnSync('bash', [path.join(ROOT, 'scripts/with-runtime.sh'), '--which', 'workerd'], { encoding: 'utf8', timeout: 300_000 })
const bin = which.stdout.trim()
if (which.status !== 0 || bin === '') throw new Error(`no workerd binary: ${which.stderr}`)
const version = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim()

const keys = makeKeyPair()
const keyServer = http.createServer((req, res) => {
  res.setHeader('content-type', 'application/json')
  res.end(JSON.stringify({ id: KEY_ID, key: keys.spkiB64 }))
})
await new Promise((resolve) => keyServer.listen(0, '127.0.0.1', resolve))
const baseUrl = `http://127.0.0.1:${keyServer.address().port}`

const VERIFY_WORKER = `import { verifyWebhookRequest } from 'mailchannels-webhooks/web'
export default {
  async fetch (request, env) {
    const { data, error } = await verifyWebhookRequest(request, { customerHandles: [env.CUSTOMER], baseUrl: env.BASE_URL })
    return error === null ? Response.json({ events: data.length }) : Response.json(error, { status: error.statusCode })
  },
}`
const TRIVIAL_WORKER = `export default {
  async fetch (request) { return Response.json({ bytes: (await request.arrayBuffer()).byteLength }) },
}`

const workers = {
  'verifyWebhookRequest (key fetched on the first request)': (await bundle(VERIFY_WORKER, { source: o.source })).text,
  'trivial Worker (no library)': (await bundle(TRIVIAL_WORKER)).text,
}
if (o.baseline !== undefined) workers['verifyWebhookRequest, baseline build'] = (await bundle(VERIFY_WORKER, { root: path.resolve(o.baseline) })).text

function config (env) {
  const bindings = Object.entries(env).map(([k, v]) => `(name = ${JSON.stringify(k)}, text = ${JSON.stringify(v)})`).join(', ')
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .mainWorker), (name = "loopback", network = (allow = ["local", "private"])) ],
  sockets = [ (name = "http", address = "127.0.0.1:0", http = (), service = "main") ],
);
const mainWorker :Workerd.Worker = (
  modules = [ (name = "worker.js", esModule = embed "worker.js") ],
  compatibilityDate = "2026-08-01",
  bindings = [ ${bindings} ],
  globalOutbound = "loopback",
);
`
}

/** One cold start: ms from spawn to the listen event, and to the first response (which must be a 200). */
async function coldStart (code) {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcw-cold-'))
  writeFileSync(path.join(dir, 'worker.js'), code)
  writeFileSync(path.join(dir, 'config.capnp'), config({ CUSTOMER: CUSTOMER_HANDLE, BASE_URL: baseUrl }))
  const body = makeBody(1)
  const headers = signedHeaders(contentDigest(body), keys.privateKey)
  const started = performance.now()
  const child = spawn(bin, ['serve', 'config.capnp', '--control-fd=3'], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH, HOME: dir } })
  const killer = setTimeout(() => child.kill('SIGKILL'), LIFETIME_MS)
  let stderr = ''
  child.stderr.on('data', (d) => { stderr += d })
  try {
    const port = await new Promise((resolve, reject) => {
      let buf = ''
      child.stdio[3].on('data', (d) => {
        buf += d
        for (const line of buf.split('\n')) {
          try { const m = JSON.parse(line); if (m.event === 'listen') resolve(m.port) } catch {}
        }
      })
      child.once('exit', (c) => reject(new Error(`workerd exited (${c}): ${stderr}`)))
    })
    const listening = performance.now()
    const res = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', headers, body })
    const text = await res.text()
    const answered = performance.now()
    if (res.status !== 200) throw new Error(`first response ${res.status}: ${text}`)
    return { listen: listening - started, total: answered - started }
  } finally {
    clearTimeout(killer)
    child.kill('SIGKILL')
    await new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null) ? resolve() : child.once('exit', resolve))
    rmSync(dir, { recursive: true, force: true })
  }
}

const median = (xs) => { const s = xs.slice().sort((a, b) => a - b); return s[s.length >> 1] }
const samples = Object.fromEntries(Object.keys(workers).map((k) => [k, []]))
await coldStart(workers['trivial Worker (no library)']) // first spawn warms the page cache
for (let i = 0; i < runs; i++) {
  for (const [name, code] of i % 2 === 0 ? Object.entries(workers) : Object.entries(workers).reverse()) samples[name].push(await coldStart(code))
}
keyServer.close()

const lines = [`workerd ${version}, ${runs} runs each, alternated; median ms from spawn (loadavg ${(await import('node:os')).loadavg().map((x) => x.toFixed(1)).join(' ')})`, '',
  '| Worker | bundle (minified) | to listening | to first verified response | first request alone |', '|---|---:|---:|---:|---:|']
for (const [name, s] of Object.entries(samples)) {
  const size = (Buffer.byteLength(workers[name]) / 1000).toFixed(1) + ' KB'
  lines.push(`| ${name} | ${size} | ${median(s.map((x) => x.listen)).toFixed(1)} | ${median(s.map((x) => x.total)).toFixed(1)} | ${median(s.map((x) => x.total - x.listen)).toFixed(1)} |`)
}
process.stdout.write(lines.join('\n') + '\n')
