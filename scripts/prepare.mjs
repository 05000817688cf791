// npm's `prepare` step: builds dist/ with TypeScript. npm runs it after `npm ci` / `npm install`
// in the clone (TypeScript is a devDependency, so it is there), before `npm pack`, and when a
// git dependency is installed (npm installs the devDependencies first). `npm install <folder>`
// runs it too, but without the folder's devDependencies: then say what to do instead of failing
// with "tsc: not found".
import { spawnSync } from 'node:child_process'
import { existsSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)))
const require = createRequire(path.join(root, 'package.json'))

let tsc
try {
  tsc = require.resolve('typescript/bin/tsc')
} catch {
  tsc = null
}

if (tsc === null) {
  if (existsSync(path.join(root, 'dist', 'index.js'))) {
    console.error(`mailchannels-webhooks: TypeScript is not installed in ${root}; keeping the dist/ built before (run \`npm ci\` there to rebuild it).`)
    process.exit(0)
  }
  console.error(`mailchannels-webhooks: cannot build dist/ in ${root}: TypeScript, a devDependency, is not installed there.
Install its dependencies there once (this builds dist/), then run your install again:
  cd ${JSON.stringify(root)} && npm ci`)
  process.exit(1)
}

// As `npm run build`: a fresh dist/, so no file of a removed module lingers.
rmSync(path.join(root, 'dist'), { recursive: true, force: true })
const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' })
process.exit(r.status ?? 1)
