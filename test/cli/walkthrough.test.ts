import t from 'tap'
import { spawn } from 'node:child_process'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify, { type FastifyInstance } from 'fastify'
import mailchannelsWebhooks from '../../src/fastify/index.js'
import { MemoryClaimStore, WebhookEventRouter } from '../../src/index.js'
import { BIN, COMMAND_DEADLINE_MS, ensureBuilt, ROOT, runCli, stateDir, type Run } from './helpers/cli.js'

// The README walkthrough as a user types it, with the built binary: start the sandbox, enroll
// a local receiver, validate it, stop the receiver while events are sent, start it again, list
// what failed, reconcile with a state file, and every event reaches the handler exactly once.

ensureBuilt()

t.test('walkthrough with the CLI: sandbox, enroll, validate, an outage, reconcile', async (t) => {
  const env = { XDG_STATE_HOME: stateDir(t) }
  const stateFile = `${env.XDG_STATE_HOME}/reconcile.json`

  // The sandbox, running until Ctrl-C.
  const sandbox = spawn(process.execPath, [BIN, 'sandbox', '--rate', '5', '--batch-size', '4', '--customer-handle', 'acme'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env } })
  // Stopped at teardown; the killer is for a test that hangs (a deadline, not a duration: the
  // walkthrough takes several times as long on a machine busy with other work).
  const killer = setTimeout(() => sandbox.kill('SIGKILL'), COMMAND_DEADLINE_MS)
  t.teardown(() => { clearTimeout(killer); sandbox.kill('SIGKILL') })
  let out = ''
  sandbox.stdout.on('data', (c: Buffer) => { out += c.toString() })
  const exited = new Promise<number | null>((resolve) => sandbox.on('exit', (code) => resolve(code)))
  while (!/Press Ctrl-C to stop\./.test(out) && sandbox.exitCode === null) await sleep(20)
  const baseUrl = /listening on (\S+)/.exec(out)![1]!
  t.match(out, /No endpoint enrolled yet: enroll one with 'mailchannels-webhooks enroll <url> --sandbox'/)

  // A receiver: the Fastify plugin with a WebhookEventRouter whose seen-events store outlives restarts.
  const handled = new Map<string, number>()
  const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() })
    .on('*', (_event, { fingerprint }) => { handled.set(fingerprint, (handled.get(fingerprint) ?? 0) + 1) })
  let port = 0
  let app: FastifyInstance | null = null
  const startReceiver = async (): Promise<void> => {
    const a = Fastify()
    await a.register(mailchannelsWebhooks, { baseUrl, customerHandles: ['acme'], handlers: router, path: '/webhooks' })
    await a.listen({ host: '127.0.0.1', port })
    port = (a.server.address() as AddressInfo).port
    app = a
  }
  t.teardown(() => app?.close())
  await startReceiver()
  const endpoint = `http://127.0.0.1:${port}/webhooks`
  const cli = (...args: string[]): Promise<Run> => runCli([...args, '--sandbox'], env)

  t.match(await cli('enroll', endpoint), { code: 0, stdout: `enrolled ${endpoint}\nCheck that it answers: mailchannels-webhooks validate --sandbox\n` })
  t.match(await cli('validate'), { code: 0, stdout: new RegExp(`^passed {2}200 {2}${endpoint.replace(/[.]/g, '\\.')} {2}\\{.*\\}\\nall 1 endpoint answered 2xx\\n$`) })
  while (handled.size < 9) await sleep(20)

  // The outage: long enough for some batches to use up their retries (1 s, then 2 s later), and
  // on a busy machine (the sandbox's timers late) until the listing shows an attempt that failed.
  await app!.close()
  app = null
  await sleep(3500)
  const failedAttempts = async (): Promise<number> => (JSON.parse((await cli('batches', '--status', '4xx,5xx,no_response', '--json')).stdout).data as unknown[]).length
  for (const deadline = Date.now() + 60_000; await failedAttempts() === 0 && Date.now() < deadline;) await sleep(500)
  await startReceiver()

  const failed = await cli('batches', '--status', '4xx,5xx,no_response', '--json')
  t.equal(failed.code, 0, failed.stderr)
  const missed = JSON.parse(failed.stdout).data as Array<{ batchId: number }>
  t.ok(missed.length > 0, 'deliveries failed during the outage')

  const reconciled = await cli('reconcile', '--yes', '--rate', '20', '--state', stateFile)
  t.equal(reconciled.code, 0, reconciled.stderr)
  t.match(reconciled.stdout, /^\[1\/\d+\] batch \d+ resent: the endpoint answered 200/)
  t.match(reconciled.stdout, /\nresent (\d+), failed 0, skipped 0 of \1 failed batches created from /)
  const rerun = await cli('reconcile', '--yes', '--state', stateFile)
  t.match(rerun.stdout, /\nresent 0, failed 0, skipped (\d+) of \1 failed batches/, 'a rerun with the state file resends nothing')

  // Every batch listed so far was delivered at least once, and no event was handled twice.
  const all = JSON.parse((await cli('batches', '--json')).stdout).data as Array<{ batchId: number, status: string, eventCount: number }>
  const delivered = new Set(all.filter((b) => b.status === '2xx_response').map((b) => b.batchId))
  const ids = [...new Set(all.map((b) => b.batchId))]
  const inFlight = ids.filter((id) => !delivered.has(id))
  t.ok(inFlight.length <= 2, `every batch delivered but those being sent right now (${inFlight.join(', ') || 'none'})`)
  const events = ids.filter((id) => delivered.has(id)).reduce((n, id) => n + all.find((b) => b.batchId === id)!.eventCount, 0)
  t.ok(handled.size >= events + 1, `every event of those batches handled (${handled.size} >= ${events} + the test event)`)
  t.ok([...handled.values()].every((n) => n === 1), 'each exactly once')

  sandbox.kill('SIGINT')
  t.equal(await exited, 0)
  t.match(out, /\nsandbox closed\n$/)
  t.match(out, /resent on request/, 'the sandbox printed the resends')
})
