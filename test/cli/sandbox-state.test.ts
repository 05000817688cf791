import t from 'tap'
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, statSync } from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { writeState } from '../../src/testing/sandbox/state-file.js'
import { ensureBuilt, inParallel, runCli, startCli, stateDir } from './helpers/cli.js'

// Two sandboxes on one machine (one user, one state directory): each keeps its own state, by
// port, and the other commands find the one they are asked for. The built CLI in child processes.

ensureBuilt()
// The two tests have a state directory each: they run side by side.
t.jobs = 2

t.test('two sandboxes: each keeps its own state; --sandbox asks which, --sandbox-port picks one; the one left is found', async (t) => {
  const dir = stateDir(t)
  const env = { XDG_STATE_HOME: dir }
  const received: string[] = []
  const server = http.createServer((req, res) => { received.push(req.url ?? ''); req.resume(); req.on('end', () => res.writeHead(204).end()) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`

  const first = startCli(t, ['sandbox'], env)
  const firstPort = Number((await first.waitFor(/listening on http:\/\/127\.0\.0\.1:(\d+)\n/))[1])
  await first.waitFor(/Press Ctrl-C to stop\.\n/)
  const second = startCli(t, ['sandbox'], env)
  const secondPort = Number((await second.waitFor(/listening on http:\/\/127\.0\.0\.1:(\d+)\n/))[1])
  await second.waitFor(/Press Ctrl-C to stop\.\n/)

  const files = readdirSync(path.join(dir, 'mailchannels-webhooks')).sort()
  t.same(files, [`${firstPort}.sandbox.json`, `${secondPort}.sandbox.json`].sort(), 'one state file per sandbox, named by its port')
  if (process.platform !== 'win32') {
    for (const file of files) t.equal(statSync(path.join(dir, 'mailchannels-webhooks', file)).mode & 0o777, 0o600, `${file} is readable by its owner only`)
  }

  // The refused `list` sends no request: it runs beside the enrolment; then the reads side by side.
  const [ambiguous, enrolled] = await inParallel([() => runCli(['list', '--sandbox'], env), () => runCli(['enroll', endpoint, '--sandbox-port', String(firstPort)], env)])
  t.equal(ambiguous.code, 2)
  t.match(ambiguous.stderr, new RegExp(`^mailchannels-webhooks list: 2 sandboxes are running, on ports ${Math.min(firstPort, secondPort)}, ${Math.max(firstPort, secondPort)}: choose one with --sandbox-port <n>`))
  t.equal(enrolled.code, 0, enrolled.stderr)

  const [listFirst, listSecond, noSuchPort, badPort] = await inParallel([
    () => runCli(['list', '--sandbox', '--sandbox-port', String(firstPort)], env),
    () => runCli(['list', '--sandbox-port', String(secondPort)], env),
    () => runCli(['list', '--sandbox-port', '1'], env),
    () => runCli(['list', '--sandbox-port', 'x'], env),
  ])
  t.match(listFirst, { code: 0, stdout: `${endpoint}\n` })
  t.match(listSecond, { code: 0, stdout: /^no endpoint enrolled/ })
  t.match(noSuchPort, { code: 1, stderr: /^mailchannels-webhooks list: no sandbox runs on port 1 \(.*1\.sandbox\.json does not exist; running: port \d+, \d+\)\. Start one with: mailchannels-webhooks sandbox --port 1\n$/ })
  t.match(badPort, { code: 2, stderr: /--sandbox-port must be a number, got 'x'\./ })

  // The second one stops: the first keeps its state, and is found without a port.
  t.equal(await second.interrupt(), 0)
  t.notOk(existsSync(path.join(dir, 'mailchannels-webhooks', `${secondPort}.sandbox.json`)), 'the stopped sandbox removed its own file')
  t.ok(existsSync(path.join(dir, 'mailchannels-webhooks', `${firstPort}.sandbox.json`)), 'and only its own')
  t.match(await runCli(['list', '--sandbox'], env), { code: 0, stdout: `${endpoint}\n` })
  const rotated = await runCli(['rotate-key'], env)
  t.equal(rotated.code, 0, rotated.stderr)
  t.equal(await first.interrupt(), 0)
})

t.test('a state left by a sandbox that was killed (its process is gone) is ignored and removed', async (t) => {
  const dir = stateDir(t)
  const env = { XDG_STATE_HOME: dir }
  // A process id that ran and ended.
  const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' })
  const stale = path.join(dir, 'mailchannels-webhooks', '9.sandbox.json')
  writeState(stale, { baseUrl: 'http://127.0.0.1:9', apiKey: 'k', customerHandle: 'sandbox', pid: Number(gone.stdout) })

  t.match(await runCli(['list', '--sandbox'], env), { code: 1, stderr: /^mailchannels-webhooks list: no running sandbox found \(.*<port>\.sandbox\.json does not exist\)\. Start one with: mailchannels-webhooks sandbox\n$/ })
  t.notOk(existsSync(stale), 'the stale file is removed')

  writeState(stale, { baseUrl: 'http://127.0.0.1:9', apiKey: 'k', customerHandle: 'sandbox', pid: Number(gone.stdout) })
  const sandbox = startCli(t, ['sandbox'], env)
  await sandbox.waitFor(/Press Ctrl-C to stop\.\n/)
  t.match(await runCli(['list', '--sandbox'], env), { code: 0, stdout: /^no endpoint enrolled/ }, 'the running sandbox is found, the stale one is not counted')
  t.equal(await sandbox.interrupt(), 0)
})
