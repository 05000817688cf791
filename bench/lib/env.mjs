// What a result depends on besides the code: installed versions and the machine.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')

/** The version of a package installed in the repository's node_modules, or '?'. */
export function installedVersion (pkg) {
  try {
    return JSON.parse(fs.readFileSync(path.join(root, 'node_modules', pkg, 'package.json'), 'utf8')).version
  } catch {
    return '?'
  }
}

/** "Node v20.20.2, 2 CPUs (model), load 0.45": for the settings lines. */
export function machine () {
  const cpus = os.cpus()
  return `Node ${process.version}, ${cpus.length} CPUs (${cpus[0]?.model?.trim() ?? 'unknown model'}), load average ${os.loadavg()[0].toFixed(2)} at start`
}
