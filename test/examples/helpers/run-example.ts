import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'

const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

export interface ExampleRun {
  child: ChildProcess
  /** Everything printed to stdout so far. */
  stdout: () => string
  stderr: () => string
  /** Resolves with the exit code (`null` if killed by a signal). */
  exited: Promise<number | null>
}

/**
 * Starts `node --import tsx examples/<name>` as a new user would run it, from the repository
 * root. Killed after `timeoutMs` and at teardown, so no process outlives the test.
 */
export function startExample (t: Test, name: string, env: Record<string, string> = {}, timeoutMs = 60_000): ExampleRun {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', `examples/${name}`], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stdout!.on('data', (c: Buffer) => { stdout += c.toString() })
  child.stderr!.on('data', (c: Buffer) => { stderr += c.toString() })
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const killer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
  void exited.then(() => clearTimeout(killer))
  t.teardown(() => {
    clearTimeout(killer)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  return { child, stdout: () => stdout, stderr: () => stderr, exited }
}

/** Runs an example to its end. */
export async function runExample (t: Test, name: string, env: Record<string, string> = {}): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const run = startExample(t, name, env)
  const code = await run.exited
  return { code, stdout: run.stdout(), stderr: run.stderr() }
}
