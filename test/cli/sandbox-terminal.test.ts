import t, { type Test } from 'tap'
import { spawnSync } from 'node:child_process'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { closedPort } from '../helpers/closed-port.js'
import { ensureBuilt, runCli, runCliOnTty, startCli, stateDir } from './helpers/cli.js'

// What the sandbox's terminal says when deliveries fail (the endpoint's own code and message,
// escaped; one line for a run of refused connections), that --count keeps the sandbox serving,
// and what `validate` shows of a failing endpoint. The built CLI in a child process, a real
// receiver on 127.0.0.1.

ensureBuilt()
// Each test has its own state directory, receiver and sandbox, and most of their time is the
// sandbox's retry back-off: three run side by side.
t.jobs = 3

/** A receiver that answers each POST with `answer(body)`: a status and a JSON body. */
async function receiver (t: Test, answer: (body: string) => { status: number, json?: unknown }): Promise<{ url: string, bodies: string[] }> {
  const bodies: string[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString()
      bodies.push(body)
      const { status, json } = answer(body)
      if (json === undefined) res.writeHead(status).end()
      else res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`, bodies }
}

// This library's error body, with what a hostile or careless endpoint may put in it.
const KEY_UNAVAILABLE = { statusCode: 503, code: 'key_unavailable', error: 'Service Unavailable', message: 'The signing key could not be fetched from https://api.mailchannels.net\u001b[2J: fetch failed' }
const DIGEST_MISMATCH = { statusCode: 401, code: 'digest_mismatch', error: 'Unauthorized', message: `Content-Digest does not match the body \u202e${'x'.repeat(5000)}` }

t.test('a failed attempt says why: the code and message of the endpoint\'s JSON answer, escaped and bounded', async (t) => {
  const dir = stateDir(t)
  // Batch 1 (the first event type) is answered 503 key_unavailable, batch 2 401 digest_mismatch.
  const target = await receiver(t, (body) => (body.includes('"processed"') ? { status: 503, json: KEY_UNAVAILABLE } : { status: 401, json: DIGEST_MISMATCH }))
  const run = await runCli(['sandbox', '--target', target.url, '--rate', '50', '--batch-size', '1', '--exit-after', '2'], { XDG_STATE_HOME: dir })
  t.equal(run.code, 0, run.stderr)
  const lines = run.stdout.split('\n').filter((l) => l.startsWith('batch '))
  t.equal(lines.length, 6, 'two batches, three attempts each')
  const first = lines.filter((l) => /^batch 1 /.test(l))
  t.equal(first.length, 3)
  for (const line of first) {
    t.match(line, /503 failed +1 events +\d+ ms {2}key_unavailable: The signing key could not be fetched from https:\/\/api\.mailchannels\.net\\x1b\[2J: fetch failed/, 'code and message, the escape shown, not sent to the terminal')
  }
  const second = lines.filter((l) => /^batch 2 /.test(l))
  for (const line of second) {
    t.match(line, /401 rejected +1 events +\d+ ms {2}digest_mismatch: Content-Digest does not match the body \\u202exxx/, 'the bidi override shown as an escape')
    t.ok(line.length < 500, `a long message is cut (${line.length} characters)`)
  }
  t.notMatch(run.stdout, /[\u001b\u202e]/, 'no raw control or bidi character reaches the terminal')
})

t.test('a receiver that refuses connections: one line for the run of refusals, with their count', async (t) => {
  const dir = stateDir(t)
  const url = `http://127.0.0.1:${await closedPort()}/webhooks`
  const run = await runCli(['sandbox', '--target', url, '--rate', '50', '--batch-size', '1', '--exit-after', '3'], { XDG_STATE_HOME: dir })
  t.equal(run.code, 0, run.stderr)
  const refused = run.stdout.split('\n').filter((l) => l.includes('ECONNREFUSED'))
  t.equal(refused.length, 2, `the first attempt, then one line with the count:\n${refused.join('\n')}`)
  t.match(refused[0], /^batch \d +attempt 1 +--- no response +1 events +\d+ ms {2}ECONNREFUSED, will retry in 1 s$/)
  t.match(refused[1], /^ {2}ECONNREFUSED: 8 more attempts without response \(batch 1 to 3\)$/)
  t.match(run.stdout, '\nsummary: sent 3 batches (3 events) in 9 attempts: 0 accepted, 0 rejected, 3 without response\n')
})

t.test('on a terminal, the count of a run of refusals is redrawn in place', { skip: process.platform === 'linux' && spawnSync('script', ['--version']).status === 0 ? false : 'util-linux script is not available' }, async (t) => {
  const dir = stateDir(t)
  const url = `http://127.0.0.1:${await closedPort()}/webhooks`
  const out = await runCliOnTty(['sandbox', '--target', url, '--rate', '50', '--batch-size', '1', '--exit-after', '3'], { XDG_STATE_HOME: dir, NO_COLOR: '1' })
  t.match(out, /\r\u001b\[K {2}ECONNREFUSED: 1 more attempt without response \(batch \d( to \d)?\)\r\u001b\[K/, 'the count line, rewritten as it grows')
  t.match(out, /\r\u001b\[K {2}ECONNREFUSED: 8 more attempts without response \(batch 1 to 3\)\r?\nsummary: sent 3 batches/, 'its last state kept, then the summary on a line of its own')
  t.equal(out.split('\n').filter((l) => l.includes('ECONNREFUSED')).length, 2, 'two lines on the screen')
})

t.test('the run of refusals ends with a response: its count line comes before the next line', async (t) => {
  const dir = stateDir(t)
  // The endpoint refuses connections until it listens again, on the same port.
  let up: http.Server | null = null
  const port = await closedPort()
  const sandbox = startCli(t, ['sandbox', '--target', `http://127.0.0.1:${port}/webhooks`, '--rate', '20', '--batch-size', '1'], { XDG_STATE_HOME: dir })
  t.teardown(() => { up?.closeAllConnections(); up?.close() })
  await sandbox.waitFor(/ECONNREFUSED, will retry/)
  // Wait until the sandbox has recorded a few refused attempts (the lines after the first are held back).
  for (;;) {
    const listed = await runCli(['batches', '--sandbox', '--status', 'no_response', '--json'], { XDG_STATE_HOME: dir })
    t.equal(listed.code, 0, listed.stderr)
    if ((JSON.parse(listed.stdout) as { data: unknown[] }).data.length >= 3) break
  }
  up = http.createServer((req, res) => { req.resume(); req.on('end', () => res.writeHead(204).end()) })
  await new Promise<void>((resolve) => up!.listen(port, '127.0.0.1', resolve))
  await sandbox.waitFor(/204 accepted/)
  t.equal(await sandbox.interrupt(), 0)
  const lines = sandbox.stdout().split('\n')
  const count = lines.findIndex((l) => /^ {2}ECONNREFUSED: \d+ more attempts? without response \(batch 1( to \d+)?\)$/.test(l))
  const accepted = lines.findIndex((l) => / 204 accepted /.test(l))
  t.ok(count > 0 && count < accepted, 'the count is printed when the run ends, before the accepted attempt')
  t.equal(lines.filter((l) => l.includes('ECONNREFUSED')).length, 2, 'the run takes two lines, however long it was')
})

t.test('--count n sends n events, then keeps serving: its batches can be listed and resent until Ctrl-C', async (t) => {
  const dir = stateDir(t)
  const target = await receiver(t, () => ({ status: 204 }))
  const sandbox = startCli(t, ['sandbox', '--target', target.url, '--rate', '50', '--batch-size', '1', '--count', '2'], { XDG_STATE_HOME: dir })
  await sandbox.waitFor(/\nSent 2 events; the API still serves \(batches, resend, trigger\)\. Press Ctrl-C to stop\.\n/)
  t.equal(target.bodies.length, 2, 'two deliveries of one event')
  const resent = await runCli(['resend', '1', '--sandbox'], { XDG_STATE_HOME: dir })
  t.equal(resent.code, 0, resent.stderr)
  t.match(resent.stdout, /^batch 1: resent to http:\/\/127\.0\.0\.1:\d+\/webhooks: the endpoint answered 204/)
  t.equal(target.bodies.length, 3, 'the resend reached the endpoint')
  await sandbox.waitFor(/resent on request/)
  const listed = await runCli(['batches', '--sandbox', '--json'], { XDG_STATE_HOME: dir })
  t.equal(listed.code, 0, listed.stderr)
  t.same((JSON.parse(listed.stdout) as { data: Array<{ batchId: number }> }).data.map((b) => b.batchId).sort(), [1, 1, 2])
  t.equal(await sandbox.interrupt(), 0, 'Ctrl-C stops it')
  t.match(sandbox.stdout(), /\nsummary: sent 2 batches \(2 events\) in 3 attempts: 2 accepted, 0 rejected, 0 without response\nsandbox closed\n$/)
})

t.test('validate shows a failing endpoint\'s code and message in full, and words the hint by where the endpoint is', async (t) => {
  const dir = stateDir(t)
  const message = `The signing key could not be fetched from https://api.mailchannels.net: ${'the key server did not answer in time; '.repeat(4)}\u001b]52;c;Zm9v\u0007`
  const target = await receiver(t, () => ({ status: 503, json: { statusCode: 503, code: 'key_unavailable', error: 'Service Unavailable', message } }))
  const sandbox = startCli(t, ['sandbox', '--target', target.url, '--rate', '50', '--batch-size', '1', '--count', '1', '--port', '0'], { XDG_STATE_HOME: dir })
  const [, baseUrl] = await sandbox.waitFor(/listening on (http:\/\/127\.0\.0\.1:\d+)\n/)
  const run = await runCli(['validate', '--sandbox'], { XDG_STATE_HOME: dir })
  t.equal(run.code, 1, run.stderr)
  const lines = run.stdout.split('\n')
  t.match(lines[0], /^failed {2}503 {2}http:\/\/127\.0\.0\.1:\d+\/webhooks$/)
  t.equal(lines[1], `  key_unavailable: ${message.replace('\u001b', '\\x1b').replace('\u0007', '\\x07')}`, 'the code and the whole message, escaped')
  t.notMatch(run.stdout, /[\u0007\u001b]/)
  t.notMatch(run.stdout, /reachable from the internet/, 'a loopback endpoint is not told to be reachable from the internet')
  t.match(lines[2], /^1 of 1 endpoint did not answer 2xx: check that the receiver runs on this machine, listens at that address, and answers 2xx to a verified delivery$/)
  t.match(run.stdout, `The receiver could not get the sandbox's signing key: give its verifier baseUrl: '${baseUrl}'.`)
})
