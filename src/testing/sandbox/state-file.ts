// Where a running `mailchannels-webhooks sandbox` leaves its address and API key for the CLI's
// other commands (`batches`, `rotate-key`): one small file, readable by its owner only,
// removed when the sandbox stops.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { writePrivateJson } from '../../private-json-file.js'

/** What the file holds. */
export interface SandboxState {
  baseUrl: string
  apiKey: string
  customerHandle: string
  /** The process that wrote it: only that process removes it. */
  pid: number
}

/**
 * The file's path: `$XDG_STATE_HOME/mailchannels-webhooks/sandbox.json` when `XDG_STATE_HOME`
 * is an absolute path, otherwise `~/.local/state/mailchannels-webhooks/sandbox.json`
 * (`%LOCALAPPDATA%\mailchannels-webhooks\sandbox.json` on Windows).
 */
export function stateFilePath (env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_STATE_HOME
  let dir: string
  if (xdg !== undefined && path.isAbsolute(xdg)) dir = xdg
  else if (process.platform === 'win32') dir = env.LOCALAPPDATA ?? path.join(os.homedir(), 'AppData', 'Local')
  else dir = path.join(os.homedir(), '.local', 'state')
  return path.join(dir, 'mailchannels-webhooks', 'sandbox.json')
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

/** Writes the state atomically with mode 0600 (a new file renamed over any earlier one). */
export function writeState (file: string, state: SandboxState): void {
  privateDir(path.dirname(file))
  writePrivateJson(file, state)
}

/** Removes the file if this process wrote it (a sandbox started later keeps its own). Never throws. */
export function removeState (file: string, pid = process.pid): void {
  try {
    if (readState(file)?.pid === pid) fs.rmSync(file, { force: true })
  } catch {
    // Nothing to clean up, or nothing we may remove.
  }
}

/** Reads the state; `null` when there is no file. Throws on a file that is not a sandbox state. */
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
