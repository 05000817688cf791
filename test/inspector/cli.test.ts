import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { main, type CliIo } from '../../src/cli.js'
import { createSandbox } from '../../src/testing/index.js'
import { stateFilePath, writeState } from '../../src/testing/sandbox/state-file.js'
import { libraryReceiver } from './helpers.js'

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const json = async (res: Response | Promise<Response>): Promise<any> => await (await res).json()

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

function stateDir (t: Test): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mcw-inspect-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** `main` with a buffer for its output. */
async function run (argv: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number, out: string, err: string }> {
  let out = ''
  let err = ''
  const io: CliIo = { out: (line) => { out += `${line}\n` }, err: (text) => { err += text }, env: { ...env, NO_COLOR: '1' } }
  const code = await main(argv, io)
  return { code, out, err }
}

t.test('inspect: help and usage errors', async (t) => {
  const top = await run(['--help'])
  t.match(top.out, /\n {2}inspect {9}Receive deliveries, verify them with this library/)
  const help = await run(['inspect', '--help'])
  t.equal(help.code, 0)
  t.match(help.out, /^Usage: mailchannels-webhooks inspect \[options\]/)
  for (const flag of ['--port <n>', '--public-key <key>', '--base-url <url>', '--sandbox', '--customer-handle <h>']) t.match(help.out, flag)

  const cases: Array<[string[], RegExp]> = [
    [['inspect', '--public-key', 'MCowBQYDK2VwAyEA', '--base-url', 'https://api.example'], /give one of --public-key, --base-url and --sandbox, not --public-key and --base-url\./],
    [['inspect', '--base-url', 'https://api.example', '--sandbox'], /not --base-url and --sandbox\./],
    [['inspect', '--public-key', 'not-a-key'], /--public-key is not usable/],
    [['inspect', '--base-url', 'http://example.com'], /--base-url must use https:/],
    [['inspect', '--port', '70000'], /--port must be an integer from 0 to 65535/],
    [['inspect', '--port', 'abc'], /--port must be a number, got 'abc'/],
    [['inspect', '--customer-handle', 'acme,,globex'], /--customer-handle must be a comma-separated list/],
    [['inspect', '--nope'], /unknown option --nope for 'inspect'/],
  ]
  for (const [argv, message] of cases) {
    const res = await run(argv)
    t.equal(res.code, 2, argv.join(' '))
    t.match(res.err, message)
    t.match(res.err, /Run 'mailchannels-webhooks inspect --help' for the usage\.\n$/)
    t.equal(res.out, '', 'nothing on stdout')
  }
  const none = await run(['inspect', '--sandbox'], { XDG_STATE_HOME: stateDir(t) })
  t.equal(none.code, 1)
  t.match(none.err, /^mailchannels-webhooks inspect: no running sandbox found/)
})

t.test('sandbox prints its inspector link', async (t) => {
  const dir = stateDir(t)
  const sandboxLike = await createSandbox()
  t.teardown(() => sandboxLike.close())
  const receiver = await libraryReceiver(t, { baseUrl: sandboxLike.baseUrl, customerHandles: ['sandbox'] })
  const res = await run(['sandbox', '--target', receiver.url, '--exit-after', '1', '--rate', '50'], { XDG_STATE_HOME: dir })
  t.equal(res.code, 0)
  t.match(res.out, /\n {2}inspector page {3}http:\/\/127\.0\.0\.1:\d+\/#key=[A-Za-z0-9_-]{32} {2}\(open it in a browser on this machine\)\n/)
})

t.test('inspect --sandbox: verifies what the sandbox sends, one line per delivery, a summary on Ctrl-C', async (t) => {
  const dir = stateDir(t)
  const sandbox = await createSandbox({ retryDelay: 5, maxAttempts: 1, customerHandle: 'acme' })
  t.teardown(() => sandbox.close())
  writeState(stateFilePath({ XDG_STATE_HOME: dir }, Number(new URL(sandbox.baseUrl).port)), { baseUrl: sandbox.baseUrl, apiKey: sandbox.apiKey, customerHandle: 'acme', pid: process.pid })

  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !['NODE_OPTIONS', 'FORCE_COLOR', 'NO_COLOR'].includes(k))) as Record<string, string>
  const child = spawn(process.execPath, ['--conditions=mcwh-source', '--import', 'tsx', 'src/cli.ts', 'inspect', '--port', '0', '--sandbox'], {
    cwd: ROOT,
    env: { ...env, XDG_STATE_HOME: dir, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const killer = setTimeout(() => child.kill('SIGKILL'), 30_000)
  t.teardown(() => { clearTimeout(killer); child.kill('SIGKILL') })
  let out = ''
  let err = ''
  const waiters: Array<() => void> = []
  child.stdout.on('data', (c: Buffer) => { out += c.toString(); for (const w of waiters.splice(0)) w() })
  child.stderr.on('data', (c: Buffer) => { err += c.toString() })
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => {
    resolve(code)
    for (const w of waiters.splice(0)) w()
  }))
  const until = async (pattern: RegExp): Promise<RegExpExecArray> => {
    for (;;) {
      const m = pattern.exec(out)
      if (m !== null) return m
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`inspect exited: ${out}${err}`)
      await new Promise<void>((resolve) => waiters.push(resolve))
    }
  }

  const url = (await until(/Webhook inspector listening on (http:\/\/127\.0\.0\.1:\d+)\n/))[1]!
  await until(/Press Ctrl-C to stop\.\n/)
  t.match(out, `  verifying with   keys from ${sandbox.baseUrl}\n`)
  t.match(out, '  customers        acme\n')
  t.match(out, `  from the sandbox mailchannels-webhooks enroll ${url}/webhooks --sandbox\n`)
  const key = decodeURIComponent(/ {2}page {13}http:\/\/127\.0\.0\.1:\d+\/#key=(\S+)/.exec(out)![1]!)

  sandbox.enroll(`${url}/webhooks`)
  t.equal((await sandbox.deliver()).status_code, 204)
  t.equal((await sandbox.deliver(undefined, { tamper: 'body' })).status_code, 401)
  await until(/\n#2 .*\n/)
  t.match(out, /\n#1 {4}POST \/webhooks {4}204 accepted +10 events +\d+ ms\n/)
  t.match(out, /\n#2 {4}POST \/webhooks {4}401 rejected +10 events +\d+ ms {2}digest_mismatch: The body does not match its Content-Digest/)
  const list = await json(fetch(`${url}/inspector/api/attempts`, { headers: { 'x-api-key': key } }))
  t.same(list.attempts.map((a: { outcome: string }) => a.outcome), ['accepted', 'rejected'], 'the page\'s data, with the printed key')
  t.equal((await fetch(`${url}/inspector/api/attempts`)).status, 401)

  child.kill('SIGINT')
  t.equal(await exited, 0, 'Ctrl-C stops it cleanly')
  t.match(out, 'summary: received 2 deliveries: 1 accepted, 0 duplicates, 1 rejected, 0 failed\ninspector closed\n')
  t.equal(err, '')
})
