// Runs an example the way its folder's README.md says: the README's `sh` blocks are read, the
// sandbox started with the README's command line (on a free port), the build steps run, the
// example started with the README's command line (its MAILCHANNELS_BASE_URL pointed at that
// sandbox instead of port 8787, its own port made free), and enrolled at the README's
// `--target` path.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import type { Test } from 'tap'
import { ROOT } from '../../runtimes/helpers/runtimes.js'

/** One command line of a README: leading `NAME=value` words and the command's words. */
export interface CommandLine {
  env: Record<string, string>
  argv: string[]
  text: string
}

/** One `sh` block: the build steps, the command that serves the example and the sandbox's. */
export interface ReadmeFlow {
  steps: CommandLine[]
  serve: CommandLine
  sandbox: CommandLine
  /** The path of the sandbox's `--target`, e.g. `/webhooks/mailchannels`. */
  targetPath: string
  /** The port of the sandbox's `--port`, which the example's `MAILCHANNELS_BASE_URL` names. */
  sandboxPort: string
}

function parseLine (text: string): CommandLine {
  const words = text.trim().split(/\s+/)
  const env: Record<string, string> = {}
  while (words.length > 0 && /^[A-Z_][A-Z0-9_]*=/.test(words[0]!)) {
    const word = words.shift()!
    const eq = word.indexOf('=')
    env[word.slice(0, eq)] = word.slice(eq + 1)
  }
  return { env, argv: words, text: text.trim() }
}

/** The flows of `examples/<folder>/README.md`, one per `sh` block that starts the sandbox. */
export function readmeFlows (folder: string): ReadmeFlow[] {
  const readme = readFileSync(path.join(ROOT, 'examples', folder, 'README.md'), 'utf8')
  const flows: ReadmeFlow[] = []
  for (const block of readme.matchAll(/^```sh\n([\s\S]*?)^```/gm)) {
    const lines = block[1]!.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#')).map(parseLine)
    const sandboxAt = lines.findIndex((l) => l.argv.includes('sandbox') && l.argv.includes('--target'))
    const serveAt = lines.findIndex((l) => l.env.MAILCHANNELS_BASE_URL !== undefined)
    if (sandboxAt === -1 || serveAt === -1) continue
    const sandbox = lines[sandboxAt]!
    const target = new URL(sandbox.argv[sandbox.argv.indexOf('--target') + 1]!)
    flows.push({
      steps: lines.slice(0, serveAt),
      serve: lines[serveAt]!,
      sandbox,
      targetPath: target.pathname,
      sandboxPort: sandbox.argv[sandbox.argv.indexOf('--port') + 1]!,
    })
  }
  return flows
}

/** The environment of a terminal: this process's, less what tap adds for its own children. */
function terminalEnv (extra: Record<string, string>, pathPrefix: string[]): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra, NO_COLOR: '1' }
  delete env.NODE_OPTIONS
  for (const k of Object.keys(env)) if (k.startsWith('TAP')) delete env[k]
  env.PATH = [...pathPrefix, process.env.PATH ?? ''].join(path.delimiter)
  return env
}

/** Runs a README's build step in the example's folder, bounded in time. */
export function runStep (t: Test, cwd: string, line: CommandLine, pathPrefix: string[]): void {
  const r = spawnSync(line.argv[0]!, line.argv.slice(1), { cwd, env: terminalEnv(line.env, pathPrefix), encoding: 'utf8', timeout: 120_000 })
  t.equal(r.status, 0, `${line.text}: ${r.error?.message ?? ''}${r.stderr ?? ''}`)
}

export interface RunningProcess {
  /** What it printed (stdout and stderr). */
  output: () => string
  child: ChildProcess
  /** Resolves when it has ended. */
  exited: Promise<number | null>
}

export interface RunningExample extends RunningProcess {
  /** `http://127.0.0.1:<port>` */
  url: string
}

/** Every child is killed after this long, whatever happens. */
const LIFETIME = 120_000
/** How long a program may take to start listening. */
const START_TIMEOUT = 60_000

/**
 * Starts `argv` as a terminal would, in its own process group (npx and tsx start children of
 * their own), which is killed at teardown and after LIFETIME whatever happens. Runtime caches
 * (Deno's, Bun's) and the sandbox's state file go to a scratch folder removed at teardown.
 */
function startProcess (t: Test, cwd: string, argv: string[], env: Record<string, string>, pathPrefix: string[], controlFd: boolean): RunningProcess {
  const scratch = mkdtempSync(path.join(tmpdir(), 'mcw-example-'))
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd,
    env: terminalEnv({
      ...env,
      DENO_DIR: path.join(scratch, 'deno'),
      DENO_NO_UPDATE_CHECK: '1',
      DENO_NO_PROMPT: '1',
      BUN_INSTALL_CACHE_DIR: path.join(scratch, 'bun'),
      XDG_STATE_HOME: path.join(scratch, 'state'),
    }, pathPrefix),
    stdio: controlFd ? ['ignore', 'pipe', 'pipe', 'pipe'] : ['ignore', 'pipe', 'pipe'],
    detached: true,
  })
  let output = ''
  const keep = (c: Buffer): void => { if (output.length < 256_000) output += c.toString() }
  child.stdout!.on('data', keep)
  child.stderr!.on('data', keep)
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  const killGroup = (): void => {
    try { process.kill(-child.pid!, 'SIGKILL') } catch { /* already gone */ }
  }
  const killer = setTimeout(killGroup, LIFETIME)
  void exited.then(() => clearTimeout(killer))
  t.teardown(async () => {
    clearTimeout(killer)
    killGroup()
    await exited
    rmSync(scratch, { recursive: true, force: true })
  })
  return { output: () => output, child, exited }
}

/** Resolves with the first match of `pattern` in what `run` prints (or, with `fd`, writes there), bounded in time. */
function waitForLine (run: RunningProcess, pattern: RegExp, fd = false): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    let fdText = ''
    const timer = setTimeout(() => { finish(new Error(`nothing matching ${pattern} within ${START_TIMEOUT} ms; output:\n${run.output()}`)) }, START_TIMEOUT)
    const check = (): void => {
      const m = pattern.exec(fd ? fdText : run.output())
      if (m !== null) finish(null, m)
    }
    const onFd = (c: Buffer): void => { fdText += c.toString(); check() }
    const onExit = (code: number | null): void => { finish(new Error(`exited (${code}) first; output:\n${run.output()}`)) }
    const stream = fd ? run.child.stdio[3] as NodeJS.ReadableStream : null
    stream?.on('data', onFd)
    run.child.stdout!.on('data', check)
    run.child.stderr!.on('data', check)
    run.child.once('exit', onExit)
    check()
    function finish (err: Error | null, m?: RegExpExecArray): void {
      clearTimeout(timer)
      stream?.off('data', onFd)
      run.child.stdout!.off('data', check)
      run.child.stderr!.off('data', check)
      run.child.off('exit', onExit)
      if (err !== null) reject(err)
      else resolve(m!)
    }
  })
}

/**
 * Starts the README's serve command in the example's folder with `env` on top of the README's
 * own variables. Its port comes from a "Listening on http://host:port" line or, for workerd, from
 * the control fd (`--control-fd=3` among `extraArgs`).
 */
export async function startServe (t: Test, cwd: string, line: CommandLine, env: Record<string, string>, pathPrefix: string[], extraArgs: string[] = []): Promise<RunningExample> {
  const controlFd = extraArgs.includes('--control-fd=3')
  const run = startProcess(t, cwd, [...line.argv, ...extraArgs], { ...line.env, ...env }, pathPrefix, controlFd)
  const m = controlFd
    ? await waitForLine(run, /"event":"listen".*?"port":(\d+)/, true)
    : await waitForLine(run, /Listening on https?:\/\/[^\s/]*:(\d+)/)
  return { ...run, url: `http://127.0.0.1:${m[1]}` }
}

export interface RunningSandbox extends RunningProcess {
  /** `http://127.0.0.1:<port>`, as the sandbox printed it. */
  url: string
  /** The API key it printed. */
  apiKey: string
  customerHandle: string
}

/**
 * Starts the README's sandbox command (`mailchannels-webhooks sandbox`, the built CLI of this
 * clone) on a free port instead of its `--port`, and without its `--target`: the example it
 * delivers to is started after it, on a port of its own, and enrolled through the sandbox's API
 * (as `mailchannels-webhooks enroll <url> --sandbox` does).
 */
export async function startSandboxCli (t: Test, cwd: string, line: CommandLine): Promise<RunningSandbox> {
  // `node ../../dist/cli.js sandbox ...` in a folder here; `npx mailchannels-webhooks sandbox ...`
  // in a user's project runs the same CLI, this clone's build.
  const [program, ...args] = line.argv[0] === 'node' ? line.argv.slice(1) : [path.join(ROOT, 'dist', 'cli.js'), ...line.argv.slice(2)]
  const port = args.indexOf('--port')
  if (port !== -1) args[port + 1] = '0'
  const target = args.indexOf('--target')
  if (target !== -1) args.splice(target, 2)
  const run = startProcess(t, cwd, [process.execPath, program!, ...args], line.env, [], false)
  const url = (await waitForLine(run, /sandbox listening on (http:\/\/127\.0\.0\.1:\d+)/))[1]!
  const apiKey = (await waitForLine(run, /API key\s+(\S+)/))[1]!
  const customerHandle = (await waitForLine(run, /customer handle\s+(\S+)/))[1]!
  return { ...run, url, apiKey, customerHandle }
}

/** Resolves once `test` holds for the output, or fails after `ms`. */
export async function waitForOutput (read: () => string, test: (out: string) => boolean, ms = 15_000): Promise<boolean> {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (test(read())) return true
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  return test(read())
}
