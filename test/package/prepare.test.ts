// npm's prepare step (scripts/prepare.mjs) where TypeScript is not installed, as in
// `npm install <path to a clone>` before `npm ci` was run in the clone: it says what to do
// instead of failing with "sh: 1: tsc: not found".
import { spawnSync } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'

const root = fileURLToPath(new URL('../../', import.meta.url))

/** A clone with no node_modules: its package.json and the script only. */
function bareClone (t: Test): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcw-prepare-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  cpSync(path.join(root, 'package.json'), path.join(dir, 'package.json'))
  mkdirSync(path.join(dir, 'scripts'))
  cpSync(path.join(root, 'scripts', 'prepare.mjs'), path.join(dir, 'scripts', 'prepare.mjs'))
  return dir
}

function prepare (dir: string): { status: number | null, stderr: string } {
  const env = { ...process.env }
  delete env.NODE_OPTIONS
  const r = spawnSync(process.execPath, ['scripts/prepare.mjs'], { cwd: dir, env, encoding: 'utf8', timeout: 30_000 })
  return { status: r.status, stderr: r.stderr }
}

t.test('without TypeScript and without dist/: fails, saying to run npm ci in the clone', async (t) => {
  const dir = bareClone(t)
  const { status, stderr } = prepare(dir)
  t.equal(status, 1)
  t.match(stderr, 'TypeScript, a devDependency, is not installed there')
  t.match(stderr, `cd ${JSON.stringify(dir)} && npm ci`, 'the command to run, with the folder')
  t.notMatch(stderr, /not found/)
})

t.test('without TypeScript, with a dist/ built before: keeps it', async (t) => {
  const dir = bareClone(t)
  mkdirSync(path.join(dir, 'dist'))
  writeFileSync(path.join(dir, 'dist', 'index.js'), 'export {}\n')
  const { status, stderr } = prepare(dir)
  t.equal(status, 0)
  t.match(stderr, 'keeping the dist/ built before')
})
