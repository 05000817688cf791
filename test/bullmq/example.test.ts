// examples/bullmq as a user runs it, with the built package (dist/): one receiver and two worker
// processes on a real redis-server. Signed deliveries are answered 200 { queued } and every event
// is handled by exactly one worker, once, a re-signed resend included.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { eventFingerprint } from '../../src/replay/fingerprint.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'
import { startRedisServer, waitFor } from '../replay/helpers/redis-server.js'
import { CUSTOMER, sampleEvents } from './helpers.js'

// The longest a condition may take to hold: waitFor returns as soon as it holds, so only a
// failing run waits this long; a busy machine (four test files on two cores) must not fail it.
const WAIT_MS = 120_000

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

t.before(() => {
  // `npm test` builds first; when run alone, build once (the example imports the package by name).
  if (!['index.js', 'bullmq/index.js', 'fastify/index.js'].every((f) => existsSync(path.join(ROOT, 'dist', f)))) {
    execFileSync(path.join(ROOT, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'pipe' })
  }
})

interface Run { child: ChildProcess, stdout: () => string, stderr: () => string, exited: Promise<unknown> }

function start (t: Test, file: string, env: Record<string, string>): Run {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env }
  // tap sets these for its own children; the example must not inherit tap's loaders or colours.
  delete childEnv.NODE_OPTIONS
  delete childEnv.FORCE_COLOR
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=mcwh-source', `examples/bullmq/${file}`], { cwd: ROOT, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout!.on('data', (c: Buffer) => { stdout += c.toString() })
  child.stderr!.on('data', (c: Buffer) => { stderr += c.toString() })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  })
  return { child, stdout: () => stdout, stderr: () => stderr, exited }
}

t.test('one receiver and two workers: every event handled once, a resend adds nothing; SIGTERM stops them', async (t) => {
  const server = await startRedisServer()
  t.teardown(() => server.close())
  const keys = generateSigningKeyPair()
  const REDIS_URL = `redis://127.0.0.1:${server.port}`
  const receiver = start(t, 'receiver.ts', { REDIS_URL, PORT: '0', MAILCHANNELS_CUSTOMER_HANDLE: CUSTOMER, MAILCHANNELS_PUBLIC_KEY: keys.publicKey })
  const workers = [start(t, 'worker.ts', { REDIS_URL }), start(t, 'worker.ts', { REDIS_URL })]
  // Each waits until the line is printed or the process is gone (then the assertion fails at once).
  const gone = (r: Run): boolean => r.child.exitCode !== null || r.child.signalCode !== null
  const listening = (): boolean => /Listening on http:\/\/\S+/.test(receiver.stdout())
  await waitFor(async () => listening() || gone(receiver), WAIT_MS)
  t.ok(listening(), `the receiver listens (stderr: ${receiver.stderr()})`)
  for (const w of workers) {
    await waitFor(async () => w.stdout().includes('Worker ready') || gone(w), WAIT_MS)
    t.ok(w.stdout().includes('Worker ready'), `a worker is ready (stderr: ${w.stderr()})`)
  }
  if (!listening()) return
  const url = `${/Listening on (http:\/\/\S+)/.exec(receiver.stdout())![1]}/webhooks/mailchannels`

  const deliveries = [sampleEvents(4), sampleEvents(4), sampleEvents(4)]
  const post = async (events: ReturnType<typeof sampleEvents>, created: number): Promise<{ status: number, body: unknown }> => {
    const signed = signWebhook({ events, privateKey: keys.privateKey, created })
    const res = await fetch(url, { method: 'POST', headers: signed.headers, body: signed.body, signal: AbortSignal.timeout(WAIT_MS) })
    return { status: res.status, body: await res.json() }
  }
  const now = Math.floor(Date.now() / 1000)
  for (const events of deliveries) t.same(await post(events, now), { status: 200, body: { queued: 4 } })
  t.same(await post(deliveries[0]!, now - 5), { status: 200, body: { queued: 4 } }, 'a re-signed resend is accepted')

  const expected = deliveries.flat().map((e) => `${e.event} ${eventFingerprint(e)} `)
  const output = (): string => workers.map((w) => w.stdout()).join('')
  t.ok(await waitFor(async () => expected.every((line) => output().includes(line)), WAIT_MS), `every event was handled (stderr: ${workers.map((w) => w.stderr()).join('')})`)
  // Let a duplicate, if any, show up before counting.
  await new Promise((resolve) => setTimeout(resolve, 500))
  for (const line of expected) t.equal(output().split(line).length - 1, 1, `handled once: ${line.trim()}`)

  for (const run of [receiver, ...workers]) run.child.kill('SIGTERM')
  for (const run of [receiver, ...workers]) t.equal(await run.exited, 0, 'exits cleanly on SIGTERM')
})
