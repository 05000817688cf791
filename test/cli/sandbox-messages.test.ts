import t, { type Test } from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { ensureBuilt, runCli, stateDir } from './helpers/cli.js'

// What the sandbox and inspect commands say: a summary that counts as its lines do (503 is
// "failed", not "rejected"), and a busy port named as such, with what to do.

ensureBuilt()
const dir = stateDir(t)

async function listen (t: Test, status: number): Promise<{ url: string, port: number }> {
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => res.writeHead(status).end())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const port = (server.address() as AddressInfo).port
  return { url: `http://127.0.0.1:${port}/webhooks`, port }
}

t.test('the sandbox summary counts a batch answered 503 as failed, as its lines say', async (t) => {
  const receiver = await listen(t, 503)
  const run = await runCli(['sandbox', '--target', receiver.url, '--rate', '50', '--batch-size', '1', '--exit-after', '1'], { XDG_STATE_HOME: dir })
  t.equal(run.code, 0, run.stderr)
  const lines = run.stdout.split('\n').filter((l) => l.startsWith('batch '))
  t.equal(lines.length, 3, 'three attempts')
  t.ok(lines.every((l) => /^batch 1 +attempt \d +503 failed /.test(l)), 'each line says 503 failed')
  t.match(run.stdout, '\nsummary: sent 1 batch (1 events) in 3 attempts: 0 accepted, 0 rejected, 1 failed, 0 without response\nsandbox closed\n')
})

t.test('a busy port: said so, with --port 0 suggested, not the raw listen EADDRINUSE', async (t) => {
  const busy = await listen(t, 200)
  const sandbox = await runCli(['sandbox', '--port', String(busy.port)], { XDG_STATE_HOME: dir })
  t.equal(sandbox.code, 1)
  t.equal(sandbox.stderr, `mailchannels-webhooks sandbox: port ${busy.port} is in use: choose another with --port, or --port 0 for any free one.\n`)
  t.notMatch(sandbox.stderr, /EADDRINUSE/)
  const inspect = await runCli(['inspect', '--port', String(busy.port), '--public-key', 'MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE='], { XDG_STATE_HOME: dir })
  t.equal(inspect.code, 1)
  t.equal(inspect.stderr, `mailchannels-webhooks inspect: port ${busy.port} is in use: choose another with --port, or --port 0 for any free one.\n`)
})
