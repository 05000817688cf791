// Starts helpers/receiver.ts (a Fastify receiver on a transactional store) in a child process with
// `env`, waits for its "listening <port>" line, and SIGKILLs it at teardown if it still runs.
// Shared by the PostgreSQL crash tests and the SQLite restart tests.
import { spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'

const RECEIVER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'receiver.ts')

export interface Receiver { port: number, proc: ChildProcess, exited: Promise<NodeJS.Signals | number | null>, stderr: () => string }

export async function spawnReceiver (t: Test, env: Record<string, string>): Promise<Receiver> {
  const proc = spawn(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', RECEIVER], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) => { proc.once('exit', (code, signal) => { resolve(signal ?? code) }) })
  t.teardown(async () => { if (proc.exitCode === null && proc.signalCode === null) { proc.kill('SIGKILL'); await exited } })
  let stderr = ''
  proc.stderr!.on('data', (c: Buffer) => { stderr += c.toString() })
  const port = await new Promise<number>((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => { reject(new Error(`receiver did not start: ${stderr}`)) }, 90_000)
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString()
      const m = /listening (\d+)/.exec(out)
      if (m !== null) { clearTimeout(timer); resolve(Number(m[1])) }
    })
    proc.once('exit', () => { clearTimeout(timer); reject(new Error(`receiver exited: ${stderr}`)) })
  })
  return { port, proc, exited, stderr: () => stderr }
}

/** POSTs a signed delivery to a receiver child: its status, or 0 when it did not answer (killed, or 10 s passed). */
export async function postSigned (port: number, signed: { headers: Record<string, string>, body: Uint8Array }): Promise<number> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', headers: signed.headers, body: signed.body, signal: AbortSignal.timeout(10_000) })
    await res.arrayBuffer()
    return res.status
  } catch {
    return 0
  }
}
