import t from 'tap'
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { main } from '../../src/cli.js'
import { startReceiver } from './helpers/receiver.js'

const CLI = fileURLToPath(new URL('../../src/cli.ts', import.meta.url))

async function run (args: string[]): Promise<{ code: number, stdout: string, stderr: string }> {
  let stdout = ''
  let stderr = ''
  const code = await main(args, { out: (line) => { stdout += `${line}\n` }, err: (text) => { stderr += text } })
  return { code, stdout, stderr }
}

t.test('--help prints the usage to stdout and exits 0', async (t) => {
  const { code, stdout, stderr } = await run(['--help'])
  t.equal(code, 0)
  t.equal(stderr, '')
  t.match(stdout, /^Usage: mailchannels-webhooks sandbox \[options\]\n/)
  for (const flag of ['--target <url>', '--port <n>', '--rate <n>', '--batch-size <n>', '--customer-handle <h>', '--api-key <key>', '--count <n>', '-h, --help']) {
    t.match(stdout, `\n  ${flag}`, flag)
  }
  t.equal((await run(['sandbox', '-h'])).stdout, stdout, 'also after the command')
})

t.test('usage errors exit 2 with a message on stderr', async (t) => {
  const none = await run([])
  t.equal(none.code, 2)
  t.match(none.stderr, /^Missing command\.\n\nUsage:/)
  t.equal(none.stdout, '')
  t.match((await run(['serve'])).stderr, /^Unknown command 'serve'\./)
  t.match((await run(['sandbox', '--nope'])).stderr, /Unknown option '--nope'/)
  const remote = await run(['sandbox', '--target', 'http://example.com/hooks'])
  t.equal(remote.code, 2)
  t.match(remote.stderr, /--target must be an http: URL on a loopback host/)
  const size = await run(['sandbox', '--batch-size', 'ten'])
  t.equal(size.code, 2)
  t.match(size.stderr, /--batch-size must be a number, got 'ten'/)
  t.match((await run(['sandbox', '--batch-size', '5000'])).stderr, /--batch-size must be an integer from 1 to 1000/)
  t.match((await run(['sandbox', '--count', '0'])).stderr, /--count must be a positive integer/)
})

t.test('sandbox --target --count delivers signed batches and exits 0', async (t) => {
  const receiver = await startReceiver(t, () => 204)
  const { code, stdout } = await run(['sandbox', '--target', receiver.url, '--rate', '20', '--batch-size', '3', '--customer-handle', 'acme', '--count', '2'])
  t.equal(code, 0)
  t.match(stdout, /^MailChannels sandbox listening on http:\/\/127\.0\.0\.1:\d+\n/)
  t.match(stdout, /customer handle: acme/)
  t.match(stdout, /batch 1 {2}204 2xx_response {2}\d+ ms {2}3 events {2}attempt 1\n/)
  t.match(stdout, /\nsandbox closed\n$/)
  t.ok(receiver.received.length >= 2)
  const events = JSON.parse(receiver.received[0]!.body.toString()) as Array<{ customer_handle: string }>
  t.same(events.map((e) => e.customer_handle), ['acme', 'acme', 'acme'])
})

t.test('the program: Ctrl-C (SIGINT) closes the sandbox and exits 0', async (t) => {
  const receiver = await startReceiver(t, () => 200)
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'sandbox', '--target', receiver.url, '--rate', '20'], { stdio: ['ignore', 'pipe', 'pipe'] })
  const killer = setTimeout(() => child.kill('SIGKILL'), 30_000)
  t.teardown(() => { clearTimeout(killer); child.kill('SIGKILL') })
  let stdout = ''
  let interrupted = false
  child.stdout.on('data', (c: Buffer) => {
    stdout += c.toString()
    if (!interrupted && /batch 2 /.test(stdout)) {
      interrupted = true
      child.kill('SIGINT')
    }
  })
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)))
  t.equal(code, 0)
  t.match(stdout, /Delivering to http:\/\/127\.0\.0\.1:\d+\/webhooks\. Press Ctrl-C to stop\./)
  t.match(stdout, /\nsandbox closed\n$/)
})

t.test('package.json bin: mailchannels-webhooks -> dist/cli.js, built from a file with a node shebang', async (t) => {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { bin?: Record<string, string> }
  t.same(pkg.bin, { 'mailchannels-webhooks': './dist/cli.js' })
  t.ok(readFileSync(CLI, 'utf8').startsWith('#!/usr/bin/env node\n'), 'tsc keeps the shebang as the first line of dist/cli.js')
})
