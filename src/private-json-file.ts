// One private file written whole: used by the sandbox's state file (testing/sandbox/state-file.ts)
// and the `reconcile --state` file (cli/reconcile-state.ts). Node only; a neutral low-level
// module, so neither the CLI nor the sandbox imports the other for it.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'

/**
 * Writes `value` as JSON to `file` with mode 0600, atomically: a temporary file in the same
 * folder renamed over the old one, so a crash never leaves half a file.
 */
export function writePrivateJson (file: string, value: unknown): void {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${crypto.randomBytes(4).toString('hex')}`)
  try {
    fs.writeFileSync(temp, `${JSON.stringify(value, null, 2)}\n`, { mode: 0o600, flag: 'wx' })
    fs.renameSync(temp, file)
  } catch (err) {
    fs.rmSync(temp, { force: true })
    throw err
  }
}
