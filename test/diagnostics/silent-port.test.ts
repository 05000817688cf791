// Where #diagnostics resolves to the silent port (Workers, browsers, edge runtimes; here Node
// with the mcwh-web-source condition), deliveries are handled as usual and nothing is published,
// even to a subscriber.
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

t.test('the silent port publishes nothing', async (t) => {
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--conditions=mcwh-web-source', 'test/diagnostics/helpers/silent-port-child.ts'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 })
  t.equal(child.status, 0, child.stderr)
  t.strictSame(JSON.parse(child.stdout), { status: 204, messages: 0 })
  const node = spawnSync(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', 'test/diagnostics/helpers/silent-port-child.ts'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 })
  t.strictSame(JSON.parse(node.stdout), { status: 204, messages: 2 }, 'the same script with the Node port: the trace start and the delivery message')
})
