// The core's verification tests again, inside Node but with the WebCrypto port selected
// (`--conditions=mcwh-web-source` maps `#crypto` to src/crypto/web.ts): both ports must pass
// the same tests. Each file runs in its own process, as tap runs it, two at a time.
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const ARGS = ['--import', 'tsx', '--conditions=mcwh-web-source']
// Longest first (CPU seconds alone, idle machine: replay/fingerprint 2.9, key-faults 1.5, key-store
// 1.4, property/mutation 1.3, key-refresh 1.2, the rest about 1), so the two workers end together.
const FILES = [
  'test/replay/fingerprint.test.ts',
  'test/keys/key-faults.test.ts',
  'test/keys/key-store.test.ts',
  'test/property/mutation.test.ts',
  'test/keys/key-refresh.test.ts',
  'test/verify/verify-bad-input.test.ts',
  'test/verify/verify-valid.test.ts',
  'test/property/content-digest.test.ts',
  'test/verify/mutation-regression.test.ts',
  'test/verify/prototype-poisoning.test.ts',
  'test/verify/options.test.ts',
  'test/interop/independent-signers.test.ts',
  'test/verify/header-strictness.test.ts',
  'test/verify/vectors.test.ts',
]

// Without the condition this would silently test the Node port twice.
const probe = spawnSync(process.execPath, [...ARGS, 'test/helpers/port-probe.ts'], { cwd: ROOT, encoding: 'utf8', timeout: 30_000 })
t.equal(probe.stdout, 'web', `the child processes use the WebCrypto port ${probe.stderr}`)

function run (file: string): Promise<{ code: number | null, output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...ARGS, file], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TAP: '1' } })
    let output = ''
    child.stdout.on('data', (c: Buffer) => { output += c.toString() })
    child.stderr.on('data', (c: Buffer) => { output += c.toString() })
    const timer = setTimeout(() => child.kill('SIGKILL'), 100_000)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, output })
    })
  })
}

t.test('the verification tests pass with the WebCrypto port', async (t) => {
  const queue = [...FILES]
  const worker = async (): Promise<void> => {
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
      const { code, output } = await run(file)
      const failures = output.split('\n').filter((l) => /^\s*not ok /.test(l)).slice(0, 10)
      t.equal(code, 0, `${file}${failures.length > 0 ? `\n${failures.join('\n')}` : ''}`)
      t.match(output, /^# \{ total: \d+, pass: \d+|^1\.\.\d+/m, `${file} ran its tests`)
    }
  }
  await Promise.all([worker(), worker()])
})
