import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { progressed } from '../../helpers/hang-deadline.js'

// The CLI as users run it: the built bin (dist/cli.js, package.json "bin") in a child process.

export const ROOT = fileURLToPath(new URL('../../../', import.meta.url))
export const BIN = path.join(ROOT, 'dist', 'cli.js')

/** The newest modification time under `dir` (files ending in .ts). */
function newest (dir: string): number {
  let latest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith('.ts')) latest = Math.max(latest, statSync(path.join(entry.parentPath, entry.name)).mtimeMs)
  }
  return latest
}

/**
 * Makes sure dist/cli.js exists and is not older than the sources it is built from (`npm test`
 * builds first; a lone run of this file may not have). Builds with tsc, without clearing dist/
 * (other tests may be reading it), as test/package/exports.test.ts does.
 */
export function ensureBuilt (): void {
  const sources = Math.max(newest(path.join(ROOT, 'src', 'cli')), newest(path.join(ROOT, 'src', 'client')), newest(path.join(ROOT, 'src', 'testing')), statSync(path.join(ROOT, 'src', 'cli.ts')).mtimeMs, statSync(path.join(ROOT, 'src', 'terminal-text.ts')).mtimeMs)
  if (existsSync(BIN) && statSync(BIN).mtimeMs >= sources) return
  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
  try {
    execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'pipe' })
  } catch {
    // Type errors elsewhere in a work in progress still emit; what counts is the file below.
  }
  if (!existsSync(BIN)) throw new Error('dist/cli.js could not be built: run npm run build')
}

// tap sets FORCE_COLOR and NODE_OPTIONS (its loaders); a user's shell has neither. The key and
// the state directory are given by each test, never inherited. A command given no state
// directory gets one private to this test process, not ~/.local/state: that one is shared by
// the test files running side by side and by the developer's own sandbox.
let fallbackState: string | undefined
function privateStateHome (): string {
  if (fallbackState === undefined) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'mcw-cli-state-'))
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }))
    fallbackState = dir
  }
  return fallbackState
}
const INHERITED_ENV = Object.fromEntries(Object.entries(process.env).filter(([k]) => !['FORCE_COLOR', 'NODE_OPTIONS', 'NO_COLOR', 'MAILCHANNELS_API_KEY', 'XDG_STATE_HOME'].includes(k))) as Record<string, string>
/** The environment of a command: the inherited one, a private state directory, then `env`. */
const childEnv = (env: Record<string, string>): Record<string, string> => ({ ...INHERITED_ENV, XDG_STATE_HOME: privateStateHome(), ...env })

export interface Run { code: number | null, stdout: string, stderr: string }

/** A private state directory (where `sandbox` keeps its key) for one test file, removed at teardown. */
export function stateDir (t: Test): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mcw-cli-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/**
 * How long one command may run before it is taken for hung and killed. A deadline for hangs
 * only: most commands here take well under a second on an idle machine, and tens of seconds on
 * one starved of CPU (one that lists 601 pages took over 90 s at a load average of 30). Each
 * command started also restarts the test file's own timeout (`progressed()`, 300 s in .taprc),
 * so a file of many commands is failed for a command that hangs, never for being slow in a busy
 * suite.
 */
export const COMMAND_DEADLINE_MS = 240_000

/** What a killed command adds to its stderr, so the assertion that fails says why. */
const killedNote = (): string => `\n[test helper: killed after ${COMMAND_DEADLINE_MS / 1000} s without exiting]\n`

/** Runs `mailchannels-webhooks <args>`; killed after COMMAND_DEADLINE_MS at most. */
export async function runCli (args: string[], env: Record<string, string> = {}): Promise<Run> {
  progressed()
  const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: childEnv(env) })
  let killed = false
  const killer = setTimeout(() => { killed = true; child.kill('SIGKILL') }, COMMAND_DEADLINE_MS)
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)))
  clearTimeout(killer)
  if (killed) stderr += killedNote()
  return { code, stdout, stderr }
}

/**
 * Runs independent commands side by side, at most `limit` at a time, and resolves with their
 * results in the order given. Each is a separate Node process that mostly waits (on its start-up,
 * on a loopback server, on a store), so a file that runs many of them one after another spends
 * most of its time waiting; only commands that neither change nor read state another one changes
 * belong in one call.
 */
export async function inParallel<T extends readonly unknown[]> (tasks: { readonly [K in keyof T]: () => Promise<T[K]> }, limit = 4): Promise<T> {
  const list = tasks as unknown as ReadonlyArray<() => Promise<unknown>>
  const results: unknown[] = new Array(list.length)
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < list.length) {
      const i = next++
      results[i] = await list[i]!()
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, list.length) }, worker))
  return results as unknown as T
}

/** The same command on a pseudo-terminal (util-linux `script`), for what only a terminal shows. */
export async function runCliOnTty (args: string[], env: Record<string, string> = {}): Promise<string> {
  const cmd = [process.execPath, BIN, ...args].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(' ')
  progressed()
  const child = spawn('script', ['-qec', cmd, '/dev/null'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: childEnv({ TERM: 'xterm', ...env }) })
  let killed = false
  const killer = setTimeout(() => { killed = true; child.kill('SIGKILL') }, COMMAND_DEADLINE_MS)
  let out = ''
  child.stdout.on('data', (c: Buffer) => { out += c.toString() })
  await new Promise((resolve) => child.on('close', resolve))
  clearTimeout(killer)
  return killed ? out + killedNote() : out
}

/** An ANSI escape sequence (colour, cursor). */
export const ANSI = /\u001b\[/

/** A long-running command (`sandbox`) in a child process, read as it prints. */
export interface RunningCli {
  /** Everything printed on stdout so far. */
  stdout: () => string
  stderr: () => string
  /**
   * Resolves with the first match of `pattern` in stdout once it is printed; rejects if the
   * process exits first (saying what it printed), so a test never waits on a dead process.
   */
  waitFor: (pattern: RegExp) => Promise<RegExpMatchArray>
  /** Sends SIGINT (Ctrl-C) and resolves with the exit code. */
  interrupt: () => Promise<number | null>
  exited: Promise<number | null>
}

/** Starts `mailchannels-webhooks <args>`; killed at teardown (and after COMMAND_DEADLINE_MS at most: a deadline for hangs). */
export function startCli (t: Test, args: string[], env: Record<string, string> = {}): RunningCli {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: childEnv(env) })
  const killer = setTimeout(() => child.kill('SIGKILL'), COMMAND_DEADLINE_MS)
  let stdout = ''
  let stderr = ''
  const waiters = new Set<() => void>()
  let closed = false
  const exited = new Promise<number | null>((resolve) => child.on('close', (c) => {
    closed = true
    clearTimeout(killer)
    resolve(c)
    for (const wake of waiters) wake()
  }))
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString(); for (const wake of waiters) wake() })
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  t.teardown(() => { clearTimeout(killer); child.kill('SIGKILL') })
  const waitFor = (pattern: RegExp): Promise<RegExpMatchArray> => new Promise((resolve, reject) => {
    const check = (): void => {
      const m = pattern.exec(stdout)
      if (m !== null) {
        waiters.delete(check)
        resolve(m)
      } else if (closed) {
        waiters.delete(check)
        reject(new Error(`exited (${child.exitCode ?? child.signalCode}) before printing ${pattern}:\n${stdout}\n${stderr}`))
      }
    }
    waiters.add(check)
    check()
  })
  return {
    stdout: () => stdout,
    stderr: () => stderr,
    waitFor,
    interrupt: async () => {
      child.kill('SIGINT')
      return await exited
    },
    exited,
  }
}
