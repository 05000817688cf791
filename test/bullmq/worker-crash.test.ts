// The ack-fast guarantee end to end: worker PROCESSES take the jobs of one queue; one is killed
// (SIGKILL) in the middle of a handler, another after its handlers resolved but before BullMQ
// recorded the job as completed. Their jobs are found stalled and run by the surviving worker; the
// router's Redis seen-events store skips the event already handled; in the end every event had its
// effect exactly once: none lost, none repeated, a resend included.
import { fork, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { bullmqEnqueue } from '../../src/bullmq/index.js'
import { noopLogger } from '../../src/logger.js'
import { eventFingerprint } from '../../src/replay/fingerprint.js'
import { startRedisServer, waitFor } from '../replay/helpers/redis-server.js'
import { queueName, sampleEvents, testQueue } from './helpers.js'

// The longest a condition may take to hold: waitFor returns as soon as it holds, so only a
// failing run waits this long; a busy machine (four test files on two cores) must not fail it.
const WAIT_MS = 120_000

const SCRIPT = fileURLToPath(new URL('./fixtures/worker.ts', import.meta.url))
const server = await startRedisServer()
t.teardown(() => server.close())

interface WorkerProcess {
  child: ChildProcess
  /** Fingerprints whose handler started here, in order. */
  started: string[]
  /** Dispatches finished here (with PAUSE_AFTER_DISPATCH_MS). */
  dispatched: Array<{ fingerprint: string, status: string }>
  stderr: () => string
  ready: Promise<void>
  exited: Promise<void>
}

function startWorkerProcess (env: Record<string, string>): WorkerProcess {
  const childEnv = { ...process.env, ...env }
  // tap sets these for its own children; a worker process must not inherit tap's loaders or colours.
  delete childEnv.NODE_OPTIONS
  delete childEnv.FORCE_COLOR
  const child = fork(SCRIPT, [], { execArgv: ['--import', 'tsx', '--conditions=mcwh-source'], env: childEnv, stdio: ['ignore', 'ignore', 'pipe', 'ipc'] })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const started: string[] = []
  const dispatched: Array<{ fingerprint: string, status: string }> = []
  const ready = new Promise<void>((resolve, reject) => {
    child.on('message', (m: { ready?: string, started?: string, dispatched?: string, status?: string }) => {
      if (m.ready !== undefined) resolve()
      if (m.started !== undefined) started.push(m.started)
      if (m.dispatched !== undefined) dispatched.push({ fingerprint: m.dispatched, status: m.status ?? '' })
    })
    child.once('exit', (code) => reject(new Error(`worker ${env.WORKER_NAME} exited (${code}) before it was ready: ${stderr}`)))
  })
  const exited = new Promise<void>((resolve) => { child.once('exit', () => resolve()) })
  return { child, started, dispatched, stderr: () => stderr, ready, exited }
}

t.test('worker processes killed mid-handler and after the handlers: their jobs are run by another worker; every event has its effect exactly once', async (t) => {
  const { queue, connection: redis } = await testQueue(t, server, { name: queueName('crash') })
  const common = { REDIS_PORT: String(server.port), QUEUE: queue.name, HANDLER_MS: '300' }
  // A takes one job at a time, so when it reports a start it is inside that job's handler.
  const a = startWorkerProcess({ ...common, WORKER_NAME: 'a', CONCURRENCY: '1' })
  // C pauses after each dispatch, before BullMQ completes the job: killed there, its event is handled and marked done.
  const c = startWorkerProcess({ ...common, WORKER_NAME: 'c', CONCURRENCY: '1', PAUSE_AFTER_DISPATCH_MS: '2000' })
  const b = startWorkerProcess({ ...common, WORKER_NAME: 'b', CONCURRENCY: '4' })
  t.teardown(async () => {
    for (const w of [a, b, c]) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL')
    await Promise.all([a.exited, b.exited, c.exited])
  })
  await Promise.all([a.ready, b.ready, c.ready])

  const events = sampleEvents(24)
  const enqueue = bullmqEnqueue(queue, { jobOptions: { attempts: 20, backoff: { type: 'fixed', delay: 300 } } })
  await enqueue(events, { keyId: 'mckey', log: noopLogger })

  // Kill A inside its second job (the first one completed normally).
  t.ok(await waitFor(async () => a.started.length >= 2, WAIT_MS), `worker a started two jobs (stderr: ${a.stderr()})`)
  a.child.kill('SIGKILL')
  await a.exited
  const interrupted = a.started[1]!
  t.equal(a.started.length, 2, 'a was killed inside its second job')
  t.ok(await waitFor(async () => c.dispatched.length >= 1, WAIT_MS), `worker c handled an event (stderr: ${c.stderr()})`)
  c.child.kill('SIGKILL')
  await c.exited
  const unacknowledged = c.dispatched[0]!
  t.equal(unacknowledged.status, 'handled', 'c was killed after handling its event, before BullMQ completed the job')

  // MailChannels resends the delivery meanwhile: no job is added twice.
  await enqueue(events.map((e) => structuredClone(e)), { keyId: 'mckey', log: noopLogger })

  const fingerprints = events.map(eventFingerprint)
  t.ok(await waitFor(async () => (await queue.getJobCounts('completed')).completed === events.length, WAIT_MS),
    `every job completed (b stderr: ${b.stderr()})`)
  const effects = await redis.hgetall('effects')
  t.same(Object.keys(effects).sort(), [...fingerprints].sort(), 'every event had its effect (none lost)')
  t.same(Object.values(effects).filter((n) => n !== '1'), [], 'each exactly once (none repeated)')
  t.same(await queue.getJobCounts('waiting', 'active', 'delayed', 'failed'), { waiting: 0, active: 0, delayed: 0, failed: 0 })
  t.ok(b.started.includes(interrupted), 'the interrupted job was run again by worker b')
  t.equal((await queue.getJob(interrupted))!.returnvalue, 'handled')
  t.equal(await redis.llen('started:a'), 2, 'a started two jobs and finished one')
  const rerun = await queue.getJob(unacknowledged.fingerprint)
  t.equal(rerun!.returnvalue, 'skipped', 'the job c handled was run again, and the seen-events store skipped its event')
  t.equal(effects[unacknowledged.fingerprint], '1')
})
