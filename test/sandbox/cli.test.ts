import t from 'tap'
import { citesOnlyOpenable } from '../helpers/openable.js'
import { spawn, spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { main, type CliIo } from '../../src/cli.js'
import { startReceiver, type Received } from './helpers/receiver.js'

const CLI = fileURLToPath(new URL('../../src/cli.ts', import.meta.url))
const PKG = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string, bin?: Record<string, string> }
const ANSI = /\u001b\[/
// Every run keeps its state (the saved API key) here, never in the user's own directories.
const STATE = mkdtempSync(path.join(os.tmpdir(), 'mcw-cli-test-'))
t.teardown(() => rmSync(STATE, { recursive: true, force: true }))

async function run (args: string[], extra: Partial<CliIo> = {}): Promise<{ code: number, stdout: string, stderr: string }> {
  let stdout = ''
  let stderr = ''
  const code = await main(args, { out: (line) => { stdout += `${line}\n` }, err: (text) => { stderr += text }, env: { XDG_STATE_HOME: path.join(STATE, 'default') }, ...extra })
  return { code, stdout, stderr }
}

/** Runs the program as a user does, with a private state directory; killed after 30 s at most. */
// The test runner sets FORCE_COLOR; a user's shell does not (and Node 24 warns when it meets both
// FORCE_COLOR and NO_COLOR, even an empty FORCE_COLOR).
const USER_ENV = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'FORCE_COLOR'))

async function spawnCli (args: string[], env: Record<string, string> = {}): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...USER_ENV, XDG_STATE_HOME: path.join(STATE, 'spawned'), ...env } })
  const killer = setTimeout(() => child.kill('SIGKILL'), 30_000)
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)))
  clearTimeout(killer)
  return { code, stdout, stderr }
}

const eventsIn = (received: Received[]): number[] => received.map((r) => (JSON.parse(r.body.toString()) as unknown[]).length)

t.test('--help: the commands, and each command its own options', async (t) => {
  const top = await run(['--help'])
  t.equal(top.code, 0)
  t.equal(top.stderr, '')
  t.match(top.stdout, /^Usage: mailchannels-webhooks <command> \[options\]\n/)
  for (const line of ['sandbox ', 'batches ', 'rotate-key ', '-h, --help', '-v, --version']) t.match(top.stdout, `\n  ${line}`, line)
  t.match(top.stdout, /NO_COLOR/)

  const sandbox = await run(['sandbox', '--help'])
  t.equal(sandbox.code, 0)
  t.match(sandbox.stdout, /^Usage: mailchannels-webhooks sandbox \[options\]\n/)
  for (const flag of ['--target <url>', '--port <n>', '--rate <n>', '--batch-size <n>', '--count <n>', '--exit-after <n>', '--customer-handle <h>', '--api-key <key>', '--tamper-every <n>', '-h, --help']) {
    t.match(sandbox.stdout, `\n  ${flag}`, flag)
  }
  t.match(sandbox.stdout, path.join(STATE, 'default', 'mailchannels-webhooks', '<port>.sandbox.json'), 'says where the API key is kept')
  t.equal((await run(['sandbox', '-h'])).stdout, sandbox.stdout, '-h is --help')
  t.equal((await run(['-h', 'sandbox'])).stdout, sandbox.stdout, 'also before the command')
  t.match((await run(['batches', '--help'])).stdout, /^Usage: mailchannels-webhooks batches \[options\]\n[^]*--status <list>[^]*--limit <n>[^]*--sandbox[^]*--json/)
  t.match((await run(['rotate-key', '--help'])).stdout, /^Usage: mailchannels-webhooks rotate-key \[options\]\n/)
  for (const text of [top.stdout, sandbox.stdout]) citesOnlyOpenable(t, text, 'help')
})

t.test('--version prints the package version', async (t) => {
  t.same(await run(['--version']), { code: 0, stdout: `${PKG.version}\n`, stderr: '' })
  t.equal((await run(['-v'])).stdout, `${PKG.version}\n`)
  t.equal((await run(['sandbox', '--version'])).stdout, `${PKG.version}\n`)
  const spawned = await spawnCli(['--version'])
  t.same(spawned, { code: 0, stdout: `${PKG.version}\n`, stderr: '' }, 'as a program')
})

t.test('usage errors: a plain message, a hint to --help, exit 2', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [[], /^mailchannels-webhooks: missing command\.\nRun 'mailchannels-webhooks --help' for the usage\.\n$/],
    [['serve'], /^mailchannels-webhooks: unknown command 'serve'\./],
    [['sandbx'], /^mailchannels-webhooks: unknown command 'sandbx'\. Did you mean sandbox\?\n/],
    [['sandbox', '--nope'], /^mailchannels-webhooks sandbox: unknown option --nope for 'sandbox'\.\nRun 'mailchannels-webhooks sandbox --help' for the usage\.\n$/],
    [['sandbox', '--cout', '5'], /unknown option --cout for 'sandbox'\. Did you mean --count\?/],
    [['sandbox', '-x'], /unknown option -x for 'sandbox'/],
    [['sandbox', '--json'], /unknown option --json for 'sandbox'/],
    [['sandbox', '--count'], /^mailchannels-webhooks sandbox: --count needs a value: --count <n>\./],
    [['sandbox', '--target', '--count', '5'], /--target needs a value: --target <url>\./],
    [['sandbox', '--count='], /--count needs a value/],
    [['sandbox', '--help=yes'], /--help does not take a value\./],
    [['sandbox', '--rate', '1', '--rate', '2'], /--rate is given more than once\./],
    [['sandbox', 'extra'], /unexpected argument 'extra'\./],
    [['sandbox', '--target', 'http://example.com/hooks'], /--target must be an http: URL on a loopback host/],
    [['sandbox', '--batch-size', 'ten'], /--batch-size must be a number, got 'ten'\./],
    [['sandbox', '--batch-size', '5000'], /--batch-size must be an integer from 1 to 1000\./],
    [['sandbox', '--count', '0', '--target', 'http://127.0.0.1:9/x'], /--count must be an integer from 1 to \d+, got '0'\./],
    [['sandbox', '--count', '2.5', '--target', 'http://127.0.0.1:9/x'], /--count must be an integer from 1 to \d+, got '2\.5'\./],
    [['sandbox', '--exit-after', '0'], /--exit-after must be an integer from 1 to \d+, got '0'\./],
    [['sandbox', '--count', '5', '--exit-after', '5'], /give --count or --exit-after, not both/],
    [['batches', '--limit'], /^mailchannels-webhooks batches: --limit needs a value/],
  ]
  for (const [args, message] of cases) {
    const res = await run(args)
    t.equal(res.code, 2, `${args.join(' ')}: exit 2`)
    t.match(res.stderr, message, args.join(' '))
    t.match(res.stderr, /Run 'mailchannels-webhooks( [a-z-]+)? --help' for the usage\.\n$/, 'points to --help')
    t.notMatch(res.stderr, /ERR_PARSE_ARGS|TypeError|\n\s+at |To specify a positional argument/, 'no raw parser error or stack')
    t.equal(res.stdout, '')
  }
  const spawned = await spawnCli(['sandbox', '--port'])
  t.equal(spawned.code, 2, 'the program exits 2 as well')
  t.equal(spawned.stderr, "mailchannels-webhooks sandbox: --port needs a value: --port <n>.\nRun 'mailchannels-webhooks sandbox --help' for the usage.\n")
})

t.test('--exit-after n sends exactly n events, whatever the batch size, then exits', async (t) => {
  for (const [count, size] of [[7, 3], [10, 5], [1, 10], [12, 10], [3, 1]] as const) {
    const receiver = await startReceiver(t, () => 204)
    const { code, stdout } = await run(['sandbox', '--target', receiver.url, '--rate', '50', '--batch-size', String(size), '--exit-after', String(count)])
    t.equal(code, 0)
    const sizes = eventsIn(receiver.received)
    t.equal(sizes.reduce((a, b) => a + b, 0), count, `--exit-after ${count} --batch-size ${size}: ${count} events arrived`)
    t.equal(sizes.length, Math.ceil(count / size), 'in as few deliveries as the batch size allows')
    t.match(stdout, `Delivering ${count} ${count === 1 ? 'event' : 'events'}, to ${receiver.url}.`)
    const batches = sizes.length
    t.match(stdout, `\nsummary: sent ${batches} ${batches === 1 ? 'batch' : 'batches'} (${count} events) in ${batches} ${batches === 1 ? 'attempt' : 'attempts'}: ${batches} accepted, 0 rejected, 0 without response\nsandbox closed\n`)
  }
})

t.test('sandbox output: one line per attempt, the batch number kept on retries, a summary', async (t) => {
  // A receiver that checks the digest (a tampered body fails) and fails batch 2 once (batches of
  // two cycle through the types: batch 2 is the one with the open and the click).
  let failed = false
  const receiver = await startReceiver(t, (r) => {
    const digest = `sha-256=:${crypto.hash('sha256', r.body, 'base64')}:`
    if (r.headers['content-digest'] !== digest) return 401
    if (!failed && r.body.toString().includes('"event":"open"')) {
      failed = true
      return 503
    }
    return 204
  })
  const { code, stdout, stderr } = await run(['sandbox', '--target', receiver.url, '--rate', '20', '--batch-size', '2', '--exit-after', '6', '--tamper-every', '3', '--customer-handle', 'acme'])
  t.equal(code, 0, stderr)
  t.equal(stderr, '')
  t.match(stdout, /^MailChannels sandbox listening on http:\/\/127\.0\.0\.1:\d+\n/)
  t.match(stdout, /\n {2}customer handle {2}acme\n/)
  t.match(stdout, /\n {2}signing key id {3}sandbox-[0-9a-f]{16} \(new for each run\)\n/)
  t.match(stdout, /\n {2}API key {10}[A-Za-z0-9_-]{32} {2}\(kept in .*\d+\.sandbox\.json while running\)\n/)
  const lines = stdout.split('\n').filter((l) => l.startsWith('batch '))
  t.equal(lines.length, 4, 'three deliveries, one retried')
  t.match(lines.find((l) => l.includes('attempt 2')), /^batch 2 +attempt 2 +204 accepted +2 events +\d+ ms$/, 'the retry keeps its batch number')
  t.match(lines.find((l) => /^batch 2 +attempt 1/.test(l)), /503 failed +2 events +\d+ ms +will retry in 1 s$/)
  t.match(lines.find((l) => /^batch 3 /.test(l)), /401 rejected +2 events +\d+ ms +tampered: body changed after signing$/)
  t.match(stdout, '\nsummary: sent 3 batches (6 events) in 4 attempts: 2 accepted, 1 rejected, 0 without response\nsandbox closed\n')
  t.notMatch(stdout, ANSI, 'no colour when the output is not a terminal')
  const events = JSON.parse(receiver.received[0]!.body.toString()) as Array<{ customer_handle: string }>
  t.same(events.map((e) => e.customer_handle), ['acme', 'acme'])
})

t.test('a receiver that accepts a tampered delivery is called out', async (t) => {
  const receiver = await startReceiver(t, () => 204)
  const { stdout } = await run(['sandbox', '--target', receiver.url, '--rate', '50', '--batch-size', '1', '--exit-after', '2', '--tamper-every', '2'])
  t.match(stdout, /\nbatch 2 +attempt 1 +204 accepted .*tampered: body changed after signing, your receiver should have rejected it\n/)
})

t.test('colour: on a terminal only, never with NO_COLOR', async (t) => {
  const receiver = await startReceiver(t, () => 204)
  const args = ['sandbox', '--target', receiver.url, '--rate', '50', '--exit-after', '2']
  const coloured = await run(args, { color: true })
  t.match(coloured.stdout, /\u001b\[32maccepted/, 'colour when asked (a terminal)')
  t.notMatch((await run(args, { color: false })).stdout, ANSI)

  const piped = await spawnCli(args)
  t.equal(piped.code, 0)
  t.match(piped.stdout, /summary: sent 1 batch/)
  t.notMatch(piped.stdout + piped.stderr, ANSI, 'a pipe gets no escape codes')
  const noColor = await spawnCli(args, { NO_COLOR: '1' })
  t.notMatch(noColor.stdout + noColor.stderr, ANSI, 'NO_COLOR with a pipe')

  // A real terminal (a pseudo-terminal from util-linux `script`), where colour is on unless NO_COLOR is set.
  const hasScript = process.platform === 'linux' && spawnSync('script', ['--version']).status === 0
  t.test('on a pseudo-terminal', { skip: hasScript ? false : 'util-linux script is not available' }, async (t) => {
    const cmd = [process.execPath, '--import', 'tsx', '--conditions=mcwh-source', CLI, ...args].map((a) => `'${a}'`).join(' ')
    const viaPty = async (env: Record<string, string>): Promise<string> => {
      const child = spawn('script', ['-qec', cmd, '/dev/null'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...USER_ENV, TERM: 'xterm', XDG_STATE_HOME: path.join(STATE, 'pty'), ...env } })
      const killer = setTimeout(() => child.kill('SIGKILL'), 30_000)
      let out = ''
      child.stdout.on('data', (c: Buffer) => { out += c.toString() })
      await new Promise((resolve) => child.on('close', resolve))
      clearTimeout(killer)
      return out
    }
    const tty = await viaPty({ NO_COLOR: '' })
    t.match(tty, /summary: sent 1 batch/)
    t.match(tty, /\u001b\[32maccepted/, 'coloured on a terminal')
    const plain = await viaPty({ NO_COLOR: '1' })
    t.match(plain, /summary: sent 1 batch/)
    t.notMatch(plain, ANSI, 'NO_COLOR on a terminal: no escape codes')
  })
})

t.test('the program: API key kept privately while it runs, other commands use it, Ctrl-C exits 0', async (t) => {
  const receiver = await startReceiver(t, () => 200)
  const state = path.join(STATE, 'program')
  const env = { XDG_STATE_HOME: state }
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', CLI, 'sandbox', '--target', receiver.url, '--rate', '20'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...USER_ENV, ...env } })
  const killer = setTimeout(() => child.kill('SIGKILL'), 30_000)
  t.teardown(() => { clearTimeout(killer); child.kill('SIGKILL') })
  let stdout = ''
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
  const exited = new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)))
  while (!/\nbatch 2 /.test(stdout) && child.exitCode === null) await sleep(20)

  const apiKey = /\n {2}API key {10}(\S+)/.exec(stdout)?.[1]
  const port = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(stdout)![1]!
  const file = path.join(state, 'mailchannels-webhooks', `${port}.sandbox.json`)
  const saved = JSON.parse(readFileSync(file, 'utf8')) as { apiKey: string, baseUrl: string }
  t.equal(saved.apiKey, apiKey, 'the printed key is the saved key')
  t.equal(saved.baseUrl, /listening on (\S+)/.exec(stdout)?.[1])
  if (process.platform !== 'win32') {
    t.equal(statSync(file).mode & 0o777, 0o600, 'the file is readable by its owner only')
    t.equal(statSync(path.dirname(file)).mode & 0o777, 0o700, 'so is its directory')
  }
  const listed = await run(['batches', '--sandbox', '--status', '2xx'], { env })
  t.equal(listed.code, 0, listed.stderr)
  t.match(listed.stdout, /^ID +CREATED +STATUS +CODE +EVENTS +DURATION +ENDPOINT\n1 +\d{4}-\d\d-\d\dT[\d:.]+Z +2xx +200 +10 +\d+ ms +http:\/\/127\.0\.0\.1:\d+\/webhooks\n/)
  t.match(listed.stdout, /\n\d+ batches\n$/)
  const json = await run(['batches', '--sandbox', '--limit', '1', '--json'], { env })
  t.match(JSON.parse(json.stdout), { data: [{ batchId: 1, status: '2xx_response' }], error: null })
  t.match((await run(['batches', '--sandbox', '--status', '6xx'], { env })), { code: 2, stderr: /^mailchannels-webhooks batches: --status: Invalid status filter provided/ })
  const rotated = await run(['rotate-key'], { env })
  t.equal(rotated.code, 0, rotated.stderr)
  t.match(rotated.stdout, /^signing key rotated: new key id sandbox-[0-9a-f]{16}\n/)
  const newId = /new key id (\S+)/.exec(rotated.stdout)![1]
  const before = receiver.received.length
  while (receiver.received.length < before + 2) await sleep(20)
  t.match(receiver.received.at(-1)!.headers['signature-input'], `keyid="${newId}"`, 'deliveries now use the new key')

  child.kill('SIGINT')
  t.equal(await exited, 0)
  t.match(stdout, /Delivering to http:\/\/127\.0\.0\.1:\d+\/webhooks\. Press Ctrl-C to stop\./)
  t.match(stdout, /\nsummary: sent \d+ batches \(\d+ events\) in \d+ attempts: \d+ accepted, 0 rejected, 0 without response\nsandbox closed\n$/)
  t.notOk(existsSync(file), 'the saved key is removed on exit')
  const gone = await run(['batches', '--sandbox'], { env })
  t.equal(gone.code, 1)
  t.match(gone.stderr, /^mailchannels-webhooks batches: no running sandbox found \(.*<port>\.sandbox\.json does not exist\)\. Start one with: mailchannels-webhooks sandbox\n$/)
})

t.test('a saved key left by a sandbox that was killed: a clear message', async (t) => {
  const state = path.join(STATE, 'stale')
  const { writeState } = await import('../../src/testing/sandbox/state-file.js')
  // A live process (this one) that is no sandbox: the file is not stale, the address is dead.
  writeState(path.join(state, 'mailchannels-webhooks', '1.sandbox.json'), { baseUrl: 'http://127.0.0.1:1', apiKey: 'k', customerHandle: 'sandbox', pid: process.pid })
  const res = await run(['rotate-key'], { env: { XDG_STATE_HOME: state } })
  t.equal(res.code, 1)
  t.match(res.stderr, /^mailchannels-webhooks rotate-key: the sandbox at http:\/\/127\.0\.0\.1:1 does not answer; it may have stopped/)
})

t.test('package.json bin: mailchannels-webhooks -> dist/cli.js, built from a file with a node shebang', async (t) => {
  t.same(PKG.bin, { 'mailchannels-webhooks': 'dist/cli.js' }, 'written as npm normalises it (npm publish warns and drops an entry it had to correct)')
  t.ok(readFileSync(CLI, 'utf8').startsWith('#!/usr/bin/env node\n'), 'tsc keeps the shebang as the first line of dist/cli.js')
})
