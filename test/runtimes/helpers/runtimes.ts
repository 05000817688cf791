// Starts real JavaScript runtimes (workerd, Deno, Bun, Vercel's edge-runtime) with a bundled
// Fetch-API worker and talks to them over loopback. Every child is bounded in time and killed
// at teardown; a runtime whose binary cannot start is reported as unavailable (its tests skip
// and say why), never silently passed.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as esbuild from 'esbuild'

export const ROOT = fileURLToPath(new URL('../../../', import.meta.url))
const require = createRequire(import.meta.url)

/** How long a runtime may take to start listening. */
const START_TIMEOUT = 20_000
/** Every child is killed after this long, whatever happens. */
const LIFETIME = 120_000

export type RuntimeName = 'workerd' | 'deno' | 'bun' | 'edge-runtime'

/** A running runtime serving the worker. */
export interface RuntimeServer {
  name: RuntimeName
  /** `http://127.0.0.1:<port>` */
  url: string
  /** What the runtime printed (for failure messages). */
  output: () => string
  close: () => Promise<void>
}

/** A worker module: `export default { fetch (request, env) }`, configured through `env`. */
export interface WorkerSource {
  /** Entry file (TypeScript or JavaScript), relative to the repository root or absolute. */
  entry: string
  /** JSON-serialisable values handed to the worker as `env`. */
  env?: Record<string, unknown>
  /**
   * Bundle the library from its TypeScript sources (the web crypto port's source through the
   * `mcwh-web-source` condition) instead of the built `dist/` a user's bundler would take.
   * @default false
   */
  fromSource?: boolean
  /** Replacements at bundle time (esbuild `define`), as Next.js inlines `process.env.*`. */
  define?: Record<string, string>
  /** workerd only: the compatibility date (a wrangler.toml's). @default WORKERD_COMPATIBILITY_DATE */
  compatibilityDate?: string
}

const kids = new Set<ChildProcess>()
const killKids = (): void => { for (const c of kids) c.kill('SIGKILL') }
process.once('exit', killKids)
// A test process ended by a signal (tap's timeout sends SIGTERM) takes its runtimes with it.
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    killKids()
    process.kill(process.pid, signal)
  })
}

function packageDir (name: string): string | null {
  try {
    return path.dirname(require.resolve(`${name}/package.json`))
  } catch {
    return null
  }
}

/** Fetches the pinned runtimes on demand (see the script); none is a dependency of the project. */
export const WITH_RUNTIME = path.join(ROOT, 'scripts', 'with-runtime.sh')
/** A first run installs the runtime's package from the registry (about 100 MB). */
const INSTALL_TIMEOUT = 300_000

const binaries = new Map<Exclude<RuntimeName, 'edge-runtime'>, { bin: string | null, error: string }>()

function locate (name: Exclude<RuntimeName, 'edge-runtime'>): { bin: string | null, error: string } {
  let found = binaries.get(name)
  if (found === undefined) {
    const r = spawnSync('bash', [WITH_RUNTIME, '--which', name], { timeout: INSTALL_TIMEOUT, encoding: 'utf8' })
    const bin = r.status === 0 ? r.stdout.trim() : ''
    found = bin !== '' && existsSync(bin)
      ? { bin, error: '' }
      : { bin: null, error: (r.error?.message ?? r.stderr ?? `exit ${r.status}`).trim().split('\n').slice(-3).join(' ') }
    binaries.set(name, found)
  }
  return found
}

/**
 * The binary of a runtime, at the version scripts/with-runtime.sh pins, installed by that script
 * into its cache outside the project on first use; null when it cannot be had here.
 */
export function runtimeBinary (name: Exclude<RuntimeName, 'edge-runtime'>): string | null {
  return locate(name).bin
}

const availability = new Map<RuntimeName, string | null>()

/** Null when the runtime can start here; otherwise why not (the reason its tests skip). */
export function unavailableReason (name: RuntimeName): string | null {
  if (availability.has(name)) return availability.get(name)!
  let reason: string | null = null
  if (name === 'edge-runtime') {
    if (packageDir('edge-runtime') === null) reason = 'the edge-runtime package is not installed'
  } else {
    const bin = runtimeBinary(name)
    if (bin === null) {
      reason = `no ${name} binary for ${process.platform}-${process.arch} (scripts/with-runtime.sh: ${locate(name).error})`
    } else {
      const r = spawnSync(bin, ['--version'], { timeout: 15_000, encoding: 'utf8', env: runtimeEnv(tmpdir()) })
      if (r.error !== undefined || r.status !== 0) reason = `${name} cannot start on this machine (${r.error?.message ?? `exit ${r.status}: ${(r.stderr ?? '').trim().slice(0, 200)}`})`
    }
  }
  availability.set(name, reason)
  return reason
}

/** An environment for the runtimes: no update checks, their caches in our temp dir. */
function runtimeEnv (dir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: dir, TMPDIR: dir, NO_COLOR: '1' }
  env.DENO_DIR = path.join(dir, 'deno-dir')
  env.DENO_NO_UPDATE_CHECK = '1'
  env.DENO_NO_PROMPT = '1'
  env.BUN_INSTALL_CACHE_DIR = path.join(dir, 'bun-cache')
  env.BUN_RUNTIME_TRANSPILER_CACHE_PATH = '0'
  env.DO_NOT_TRACK = '1'
  return env
}

/** Bundles `source` (stdin contents resolved from `resolveDir`) into one file with no imports. */
export async function bundle (contents: string, options: { conditions: string[], format: 'esm' | 'iife', platform?: 'neutral' | 'browser', resolveDir?: string, define?: Record<string, string>, ignoreSideEffectsField?: boolean }): Promise<string> {
  const result = await esbuild.build({
    stdin: { contents, resolveDir: options.resolveDir ?? ROOT, loader: 'ts', sourcefile: 'entry.ts' },
    bundle: true,
    write: false,
    format: options.format,
    platform: options.platform ?? 'neutral',
    conditions: options.conditions,
    mainFields: ['browser', 'module', 'main'],
    target: 'es2022',
    logLevel: 'silent',
    define: options.define ?? {},
    // The repository's package.json says "sideEffects": false (true of the library): a program
    // imported only for its effects (an example that serves) must be kept all the same.
    ignoreAnnotations: options.ignoreSideEffectsField ?? false,
    // A node: import left in the bundle fails at load time in runtimes without Node APIs, as it would for a user.
    external: ['node:*'],
  })
  return result.outputFiles[0]!.text
}

const WORKER_CONDITIONS = ['workerd', 'worker', 'browser']

function conditions (worker: WorkerSource, list: string[]): string[] {
  return worker.fromSource === true ? ['mcwh-web-source', ...list] : list
}

function workerImport (entry: string): string {
  const file = path.isAbsolute(entry) ? entry : path.join(ROOT, entry)
  return JSON.stringify(file)
}

/** The port of a listen line: workerd's control-fd JSON (and our wrappers'), or a "Listening on http://host:port" text line. */
function listenPort (line: string): number | undefined {
  if (line.startsWith('{')) {
    try {
      const o = JSON.parse(line) as Record<string, unknown>
      return o.event === 'listen' && typeof o.port === 'number' ? o.port : undefined
    } catch {
      return undefined
    }
  }
  const m = /Listening on https?:\/\/[^\s/]*:(\d+)/.exec(line)
  return m === null ? undefined : Number(m[1])
}

/** Reads lines from streams until one announces the port. */
function waitForPort (child: ChildProcess, streams: NodeJS.ReadableStream[], output: () => string): Promise<number> {
  return new Promise((resolve, reject) => {
    const bufs = new Map<NodeJS.ReadableStream, string>()
    const timer = setTimeout(() => { done(new Error(`no listen line within ${START_TIMEOUT} ms; output:\n${output()}`)) }, START_TIMEOUT)
    const onExit = (code: number | null): void => { done(new Error(`exited (${code}) before listening; output:\n${output()}`)) }
    const listeners = streams.map((stream) => {
      const onData = (chunk: Buffer): void => {
        let buf = (bufs.get(stream) ?? '') + chunk.toString()
        let nl: number
        while ((nl = buf.indexOf('\n')) !== -1) {
          const port = listenPort(buf.slice(0, nl).trim())
          buf = buf.slice(nl + 1)
          if (port !== undefined) { done(null, port); return }
        }
        bufs.set(stream, buf)
      }
      stream.on('data', onData)
      return { stream, onData }
    })
    function done (err: Error | null, port?: number): void {
      clearTimeout(timer)
      for (const l of listeners) l.stream.removeListener('data', l.onData)
      child.removeListener('exit', onExit)
      if (err !== null) reject(err)
      else resolve(port!)
    }
    child.on('exit', onExit)
  })
}

async function startChild (name: RuntimeName, bin: string, args: string[], dir: string, portFd: 'output' | 3, env: Record<string, string> = {}): Promise<RuntimeServer> {
  const stdio: Array<'ignore' | 'pipe'> = ['ignore', 'pipe', 'pipe']
  if (portFd === 3) stdio.push('pipe')
  const child = spawn(bin, args, { cwd: dir, env: { ...runtimeEnv(dir), ...env }, stdio })
  kids.add(child)
  let output = ''
  child.stdout!.on('data', (c: Buffer) => { if (output.length < 64_000) output += c.toString() })
  child.stderr!.on('data', (c: Buffer) => { if (output.length < 64_000) output += c.toString() })
  const killer = setTimeout(() => child.kill('SIGKILL'), LIFETIME)
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve()
    else child.once('exit', () => resolve())
  })
  void exited.then(() => { clearTimeout(killer); kids.delete(child) })
  const close = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    const streams = portFd === 3 ? [child.stdio[3] as NodeJS.ReadableStream] : [child.stdout!, child.stderr!]
    const port = await waitForPort(child, streams, () => output)
    return { name, url: `http://127.0.0.1:${port}`, output: () => output, close }
  } catch (err) {
    await close()
    throw new Error(`${name}: ${(err as Error).message}`)
  }
}

/**
 * The newest compatibility date at which workerd still runs a worker without Node APIs unless
 * `nodejs_compat` is set (from 2026-09 on, Node APIs are on by default): the tests prove the
 * library needs none of them.
 */
export const WORKERD_COMPATIBILITY_DATE = '2026-08-01'

/** workerd without nodejs_compat, with outbound access to loopback (the key server). */
export async function startWorkerd (worker: WorkerSource): Promise<RuntimeServer> {
  const bin = runtimeBinary('workerd')!
  const code = await bundle(`export { default } from ${workerImport(worker.entry)}`, { conditions: conditions(worker, WORKER_CONDITIONS), format: 'esm', define: worker.define })
  const dir = mkdtempSync(path.join(tmpdir(), 'mcw-workerd-'))
  writeFileSync(path.join(dir, 'worker.js'), code)
  const env = worker.env ?? {}
  const bindings = Object.entries(env).map(([k, v]) => `(name = ${JSON.stringify(k)}, json = ${JSON.stringify(JSON.stringify(v))})`).join(', ')
  writeFileSync(path.join(dir, 'config.capnp'), `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .mainWorker),
    (name = "loopback", network = (allow = ["local", "private"])),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:0", http = (), service = "main") ],
);
const mainWorker :Workerd.Worker = (
  modules = [ (name = "worker.js", esModule = embed "worker.js") ],
  compatibilityDate = "${worker.compatibilityDate ?? WORKERD_COMPATIBILITY_DATE}",
  bindings = [ ${bindings} ],
  globalOutbound = "loopback",
);
`)
  return startChild('workerd', bin, ['serve', 'config.capnp', '--control-fd=3'], dir, 3)
}

/** The listen line the Deno and Bun wrappers print (the same shape workerd writes to its control fd). */
const LISTEN = 'console.log(JSON.stringify({ event: "listen", port }))'

/** `deno run` on the bundled worker behind `Deno.serve`: no remote modules, no npm, its own DENO_DIR. */
export async function startDeno (worker: WorkerSource): Promise<RuntimeServer> {
  const bin = runtimeBinary('deno')!
  const code = await bundle(`import worker from ${workerImport(worker.entry)}
const env = ${JSON.stringify(worker.env ?? {})}
Deno.serve({ hostname: '127.0.0.1', port: 0, onListen: ({ port }) => { ${LISTEN} } }, (request) => worker.fetch(request, env))
`, { conditions: conditions(worker, ['deno', ...WORKER_CONDITIONS]), format: 'esm', define: worker.define })
  const dir = mkdtempSync(path.join(tmpdir(), 'mcw-deno-'))
  writeFileSync(path.join(dir, 'main.js'), code)
  return startChild('deno', bin, ['run', '--no-remote', '--cached-only', '--no-npm', '--no-config', '--no-lock', '--allow-net=127.0.0.1', `--allow-read=${dir}`, 'main.js'], dir, 'output')
}

/** `bun run` on the bundled worker behind `Bun.serve`. */
export async function startBun (worker: WorkerSource): Promise<RuntimeServer> {
  const bin = runtimeBinary('bun')!
  const code = await bundle(`import worker from ${workerImport(worker.entry)}
const env = ${JSON.stringify(worker.env ?? {})}
const server = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: (request) => worker.fetch(request, env) })
const port = server.port
${LISTEN}
`, { conditions: conditions(worker, ['bun', ...WORKER_CONDITIONS]), format: 'esm', define: worker.define })
  const dir = mkdtempSync(path.join(tmpdir(), 'mcw-bun-'))
  writeFileSync(path.join(dir, 'main.js'), code)
  return startChild('bun', bin, ['run', '--no-install', 'main.js'], dir, 'output')
}

/** Vercel's edge-runtime (what Next.js edge routes run on), in this process, served on loopback. */
export async function startEdgeRuntime (worker: WorkerSource): Promise<RuntimeServer> {
  const { EdgeRuntime, runServer } = await import('edge-runtime')
  const code = await bundle(`import worker from ${workerImport(worker.entry)}
const env = ${JSON.stringify(worker.env ?? {})}
addEventListener('fetch', (event) => { event.respondWith(worker.fetch(event.request, env)) })
`, { conditions: conditions(worker, ['edge-light', ...WORKER_CONDITIONS]), format: 'iife', define: worker.define })
  const runtime = new EdgeRuntime({ initialCode: code })
  const server = await runServer({ runtime, host: '127.0.0.1', port: 0 })
  const url = server.url.replace(/\/$/, '').replace('localhost', '127.0.0.1')
  return { name: 'edge-runtime', url, output: () => '', close: () => server.close() }
}

/**
 * Runs a program that serves by itself (`Deno.serve`, `Bun.serve`), bundled, with `env` as its
 * environment variables and PORT=0; its port is read from its "Listening on http://host:port" line.
 */
export async function startScript (name: 'deno' | 'bun', entry: string, env: Record<string, string>): Promise<RuntimeServer> {
  const bin = runtimeBinary(name)!
  const code = await bundle(`import ${workerImport(entry)}`, { conditions: [name, ...WORKER_CONDITIONS], format: 'esm', ignoreSideEffectsField: true })
  const dir = mkdtempSync(path.join(tmpdir(), `mcw-${name}-`))
  writeFileSync(path.join(dir, 'main.js'), code)
  const vars = { ...env, PORT: '0' }
  const args = name === 'deno'
    // Any variable may be read, as the examples' READMEs run them: the environment is runtimeEnv's and the test's variables only.
    ? ['run', '--no-remote', '--cached-only', '--no-npm', '--no-config', '--no-lock', '--allow-net=127.0.0.1', '--allow-env', `--allow-read=${dir}`, 'main.js']
    : ['run', '--no-install', 'main.js']
  return startChild(name, bin, args, dir, 'output', vars)
}

export const STARTERS: Record<RuntimeName, (w: WorkerSource) => Promise<RuntimeServer>> = {
  workerd: startWorkerd,
  deno: startDeno,
  bun: startBun,
  'edge-runtime': startEdgeRuntime,
}
