// Where each running `mailchannels-webhooks sandbox` leaves its address and API key for the
// CLI's other commands (`--sandbox`, `rotate-key`, `trigger`): one small file per sandbox, named
// by its port, readable by its owner only, removed when that sandbox stops. One file per port,
// so a second sandbox on the machine never takes over (or removes) the first one's.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { writePrivateJson } from '../../private-json-file.js'

/** What a file holds. */
export interface SandboxState {
  baseUrl: string
  apiKey: string
  customerHandle: string
  /** The process that wrote it: only that process removes it, and a dead one makes it stale. */
  pid: number
}

/** The name of a sandbox's file in the state directory: `<port>.sandbox.json`. */
const FILE_NAME = /^(\d{1,5})\.sandbox\.json$/

/**
 * The state directory: `$XDG_STATE_HOME/mailchannels-webhooks` when `XDG_STATE_HOME` is an
 * absolute path, otherwise `~/.local/state/mailchannels-webhooks`
 * (`%LOCALAPPDATA%\mailchannels-webhooks` on Windows).
 */
export function stateDirPath (env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_STATE_HOME
  let dir: string
  if (xdg !== undefined && path.isAbsolute(xdg)) dir = xdg
  else if (process.platform === 'win32') dir = env.LOCALAPPDATA ?? path.join(os.homedir(), 'AppData', 'Local')
  else dir = path.join(os.homedir(), '.local', 'state')
  return path.join(dir, 'mailchannels-webhooks')
}

/**
 * The file of the sandbox listening on `port`: `<state directory>/<port>.sandbox.json`; with
 * no port, the pattern `<port>.sandbox.json` for messages and help.
 */
export function stateFilePath (env: NodeJS.ProcessEnv = process.env, port?: number): string {
  return path.join(stateDirPath(env), `${port ?? '<port>'}.sandbox.json`)
}

/**
 * Makes sure the directory is ours and private: created with mode 0700, not a symlink, owned
 * by this user, not readable by others (tightened if it is).
 */
function privateDir (dir: string): void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  if (process.platform === 'win32') return
  const st = fs.lstatSync(dir)
  if (!st.isDirectory()) throw new Error(`${dir} is not a directory`)
  if (st.uid !== process.getuid!()) throw new Error(`${dir} belongs to another user`)
  if ((st.mode & 0o077) !== 0) fs.chmodSync(dir, 0o700)
}

/** Writes a state atomically with mode 0600 (a new file renamed over any earlier one). */
export function writeState (file: string, state: SandboxState): void {
  privateDir(path.dirname(file))
  writePrivateJson(file, state)
}

/** Removes the file if this process wrote it for this address. Never throws. */
export function removeState (file: string, pid = process.pid, baseUrl?: string): void {
  try {
    const state = readState(file)
    if (state?.pid === pid && (baseUrl === undefined || state.baseUrl === baseUrl)) fs.rmSync(file, { force: true })
  } catch {
    // Nothing to clean up, or nothing we may remove.
  }
}

/** Reads a state; `null` when there is no file. Throws on a file that is not a sandbox state. */
export function readState (file: string): SandboxState | null {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  let state: Partial<SandboxState>
  try {
    state = JSON.parse(text) as Partial<SandboxState>
  } catch {
    throw new Error(`${file} is not valid JSON`)
  }
  const loopback = typeof state.baseUrl === 'string' && /^http:\/\/127\.0\.0\.1:\d{1,5}$/.test(state.baseUrl)
  if (!loopback || typeof state.apiKey !== 'string' || typeof state.customerHandle !== 'string' || typeof state.pid !== 'number') {
    throw new Error(`${file} does not describe a sandbox`)
  }
  return state as SandboxState
}

/** Whether a process with this id runs (one of another user counts as running). */
function alive (pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid < 1) return false
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** A sandbox found in the state directory. */
export interface FoundSandbox extends SandboxState {
  port: number
  file: string
}

/**
 * The sandboxes whose files are in the state directory, by port. A file whose process no longer
 * runs (a sandbox killed before it could clean up) is stale: it is removed and left out. Files
 * that cannot be read, or do not describe a sandbox, are left out (and kept).
 */
export function runningStates (env: NodeJS.ProcessEnv = process.env): { sandboxes: FoundSandbox[], removed: number } {
  const dir = stateDirPath(env)
  let names: string[]
  try {
    names = fs.readdirSync(dir)
  } catch {
    return { sandboxes: [], removed: 0 }
  }
  const sandboxes: FoundSandbox[] = []
  let removed = 0
  for (const name of names) {
    const m = FILE_NAME.exec(name)
    if (m === null) continue
    const file = path.join(dir, name)
    let state: SandboxState | null
    try {
      state = readState(file)
    } catch {
      continue
    }
    if (state === null) continue
    if (!alive(state.pid)) {
      try {
        fs.rmSync(file, { force: true })
        removed++
      } catch {
        // Someone else's to clean up.
      }
      continue
    }
    sandboxes.push({ ...state, port: Number(m[1]), file })
  }
  sandboxes.sort((a, b) => a.port - b.port)
  return { sandboxes, removed }
}
