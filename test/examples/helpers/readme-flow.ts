// Runs an example the way its folder's README.md says: the README's `sh` blocks are read, their
// build steps run, the example started with the README's own command line (its environment
// variables pointed at a sandbox the test owns instead of port 8787, its port made free), and
// the sandbox's delivery is aimed at the README's `--target` path.
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

export interface RunningExample {
  /** `http://127.0.0.1:<port>` */
  url: string
  /** What the example printed (stdout and stderr). */
  output: () => string
  child: ChildProcess
  /** Resolves when the example (its whole process group) has ended. */
  exited: Promise<number | null>
}

/** Every child is killed after this long, whatever happens. */
const LIFETIME = 120_000
/** How long an example may take to start listening. */
const START_TIMEOUT = 60_000

/**
 * Starts the README's serve command in the example's folder with `env` on top of the README's
 * own variables. The command runs in its own process group (npx and tsx start children of their
 * own), which is killed at teardown. Its port comes from a "Listening on http://host:port" line
 * or, for workerd, from the control fd (`--control-fd=3`).
 */
export async function startServe (t: Test, cwd: string, line: CommandLine, env: Record<string, string>, pathPrefix: string[], extraArgs: string[] = []): Promise<RunningExample> {
  const useFd = extraArgs.includes('--control-fd=3')
  const scratch = mkdtempSync(path.join(tmpdir(), 'mcw-example-'))
  const child = spawn(line.argv[0]!, [...line.argv.slice(1), ...extraArgs], {
    cwd,
    env: terminalEnv({ ...line.env, ...env, DENO_DIR: path.join(scratch, 'deno'), DENO_NO_UPDATE_CHECK: '1', DENO_NO_PROMPT: '1', BUN_INSTALL_CACHE_DIR: path.join(scratch, 'bun') }, pathPrefix),
    stdio: useFd ? ['ignore', 'pipe', 'pipe', 'pipe'] : ['ignore', 'pipe', 'pipe'],
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

  const port = await new Promise<number>((resolve, reject) => {
    let fdText = ''
    const timer = setTimeout(() => { finish(new Error(`no listen line within ${START_TIMEOUT} ms; output:\n${output}`)) }, START_TIMEOUT)
    const check = (): void => {
      for (const l of fdText.split('\n')) {
        try {
          const o = JSON.parse(l) as { event?: string, port?: number }
          if (o.event === 'listen' && typeof o.port === 'number') { finish(null, o.port); return }
        } catch { /* not a whole line yet */ }
      }
      const m = /Listening on https?:\/\/[^\s/]*:(\d+)/.exec(output)
      if (m !== null) finish(null, Number(m[1]))
    }
    const onFd = (c: Buffer): void => { fdText += c.toString(); check() }
    const onExit = (code: number | null): void => { finish(new Error(`exited (${code}) before listening; output:\n${output}`)) }
    if (useFd) (child.stdio[3] as NodeJS.ReadableStream).on('data', onFd)
    child.stdout!.on('data', check)
    child.stderr!.on('data', check)
    child.once('exit', onExit)
    function finish (err: Error | null, p?: number): void {
      clearTimeout(timer)
      child.stdout!.off('data', check)
      child.stderr!.off('data', check)
      child.off('exit', onExit)
      if (err !== null) reject(err)
      else resolve(p!)
    }
  })
  return { url: `http://127.0.0.1:${port}`, output: () => output, child, exited }
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
