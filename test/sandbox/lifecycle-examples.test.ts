import t from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { MailChannels } from '../../src/index.js'
import { startExample, runExample } from '../examples/helpers/run-example.js'
import { testSandbox } from './helpers/sandbox.js'

// The examples of examples/lifecycle run as a user runs them (node --import tsx).

t.test('examples/lifecycle/recover.ts: an outage, reconcile, every event handled exactly once', async (t) => {
  const { code, stdout, stderr } = await runExample(t, 'lifecycle/recover.ts', { MAILCHANNELS_API_KEY: '' })
  t.equal(code, 0, stderr)
  t.match(stdout, /^enrolled http:\/\/127\.0\.0\.1:\d+\/webhooks; validate: passed\nreceiver down while events are sent\.\.\.\nreceiver back; (\d+) batches were not delivered\n/)
  t.match(stdout, /\n\[1\/\d+\] batch \d+ resent, the endpoint answered 200\n/)
  t.match(stdout, /\nresent (\d+), failed 0, skipped 0, not attempted 0 of \1\n31 events handled \(30 and the test event\), each exactly once\n$/)
})

t.test('examples/lifecycle/receiver.ts: handles each event once, also after a restart', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'receiver-example-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const sandbox = await testSandbox(t, { maxAttempts: 1 })
  const mc = new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl })
  const env = { PORT: '0', MAILCHANNELS_BASE_URL: sandbox.baseUrl, CUSTOMER_HANDLES: sandbox.customerHandle, SEEN_EVENTS_FILE: path.join(dir, 'seen.txt') }
  const start = async (port: string): Promise<{ url: string, run: ReturnType<typeof startExample> }> => {
    const run = startExample(t, 'lifecycle/receiver.ts', { ...env, PORT: port })
    while (!/listening on/.test(run.stdout()) && run.child.exitCode === null) await sleep(20)
    return { url: /listening on (\S+)/.exec(run.stdout())![1]!, run }
  }
  const handledLines = (out: string): number => out.split('\n').filter((l) => l.startsWith('handled ')).length

  const first = await start('0')
  t.match(first.run.stdout(), /^receiver listening on http:\/\/127\.0\.0\.1:\d+\/webhooks \(Ctrl-C to stop\)\n/)
  await mc.webhooks.enroll(first.url)
  t.match(await mc.webhooks.validate(), { data: { allPassed: true } })
  const batch = await sandbox.deliver()
  t.match(batch, { status: '2xx_response', status_code: 200 })
  t.match(await mc.webhooks.resendBatch(batch.batch_id), { data: { statusCode: 200 } }, 'a resend is answered 2xx')
  await sleep(100)
  t.equal(handledLines(first.run.stdout()), 11, 'the test event and ten events, once each')

  // Stopped and started again on the same port: the events handled before are still known.
  first.run.child.kill('SIGINT')
  t.equal(await first.run.exited, 0)
  const second = await start(new URL(first.url).port)
  t.equal(second.url, first.url)
  t.match(await mc.webhooks.resendBatch(batch.batch_id), { data: { statusCode: 200 } })
  t.match(await sandbox.deliver(), { status: '2xx_response' })
  await sleep(100)
  t.equal(handledLines(second.run.stdout()), 10, 'only the new batch: the resent one was skipped')
  second.run.child.kill('SIGINT')
  t.equal(await second.run.exited, 0)
})
