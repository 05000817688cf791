import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import type { AddressInfo } from 'node:net'
import mailchannelsWebhooks from '../../src/fastify/index.js'
import { MailChannels, MemoryClaimStore, WebhookEventRouter } from '../../src/index.js'
import { until } from '../helpers/wait.js'
import { testSandbox } from './helpers/sandbox.js'

// The no-account walkthrough of docs/sandbox.md, end to end with no account: start the sandbox, enroll a local
// receiver, validate it, stop the receiver while events are sent, start it again, reconcile,
// and every event reaches the handler exactly once. The receiver answers with a
// WebhookEventRouter whose seen-events store outlives the receiver (Redis in production), so a
// batch delivered twice (a resend by hand, then reconcile) is handled once.

t.test('walkthrough: enroll, validate, an outage, reconcile: every event handled exactly once', async (t) => {
  const sandbox = await testSandbox(t, { customerHandle: 'acme', rate: 20, batchSize: 5, maxAttempts: 2, retryDelay: 20, deliveryTimeout: 1000 })
  const mc = new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl })

  const handled = new Map<string, number>()
  const types: string[] = []
  const seenEvents = new MemoryClaimStore()
  const router = new WebhookEventRouter({ seenEvents })
    .on('*', (event, { fingerprint }) => {
      handled.set(fingerprint, (handled.get(fingerprint) ?? 0) + 1)
      types.push(event.event)
    })

  let port = 0
  let app: FastifyInstance | null = null
  const startReceiver = async (): Promise<void> => {
    const a = Fastify()
    await a.register(mailchannelsWebhooks, { baseUrl: sandbox.baseUrl, customerHandles: ['acme'], handlers: router, path: '/webhooks' })
    await a.listen({ host: '127.0.0.1', port })
    port = (a.server.address() as AddressInfo).port
    app = a
  }
  const stopReceiver = async (): Promise<void> => {
    await app?.close()
    app = null
  }
  t.teardown(stopReceiver)

  // 1. Start a receiver and enroll it.
  await startReceiver()
  const endpoint = `http://127.0.0.1:${port}/webhooks`
  t.same(await mc.webhooks.enroll(endpoint), { data: { endpoint }, error: null })
  t.same(await mc.webhooks.list(), { data: [endpoint], error: null })

  // 2. Validate: a signed test event, answered 2xx.
  const check = await mc.webhooks.validate('walkthrough')
  t.match(check, { data: { allPassed: true, results: [{ result: 'passed', webhook: endpoint, response: { status: 200 } }] }, error: null })
  t.same(types, ['test'])

  // 3. Events flow; the receiver goes down after two batches, comes back once the sender is done.
  sandbox.start({ count: 40 })
  await until(() => types.length >= 11, 'two batches handled')
  await stopReceiver()
  await sandbox.finished()
  await startReceiver()
  t.equal(`http://127.0.0.1:${port}/webhooks`, endpoint, 'back on the same address')

  const failed = await mc.webhooks.batches({ statuses: ['4xx', '5xx', 'no_response'] })
  const failedIds = [...new Set(failed.data!.map((b) => b.batchId))]
  t.ok(failedIds.length > 0, `batches failed during the outage: ${failedIds.join(', ')}`)
  // No response once it is down; a delivery that arrives while Fastify closes is answered 503.
  t.ok(failed.data!.every((b) => (b.status === 'no_response' && b.statusCode === null) || (b.status === '5xx_response' && b.statusCode === 503)), `listed as no_response (or 503 while closing): ${JSON.stringify(failed.data!.map((b) => b.statusCode))}`)
  t.ok(handled.size < 41, 'events are missing so far')

  // 4. Someone resends batches by hand before the reconcile runs: one that failed (its events
  // then arrive twice) and the first one, handled before the outage by the receiver that stopped.
  const byHand = await mc.webhooks.resendBatch(failedIds[0]!)
  t.match(byHand, { data: { batchId: failedIds[0], statusCode: 200 }, error: null })
  const callsBefore = types.length
  t.match(await mc.webhooks.resendBatch(1), { data: { batchId: 1, statusCode: 200 }, error: null })
  t.equal(types.length, callsBefore, 'the events of batch 1 were skipped: the store outlived the receiver')

  // 5. Reconcile: every failed batch of the window resent once, politely.
  const progress: string[] = []
  const report = await mc.webhooks.reconcile({ rate: 50, onProgress: (p) => progress.push(`${p.done}/${p.total} ${p.outcome}`) })
  t.equal(report.error, null)
  t.equal(report.data!.stopped, null)
  t.same(report.data!.summary, { total: failedIds.length, resent: failedIds.length, failed: 0, skipped: 0, notAttempted: 0 }, 'the batch resent by hand is listed too (its failed attempts are)')
  t.equal(progress.length, failedIds.length)

  // 6. Every event the sandbox generated reached the handler exactly once.
  t.equal(handled.size, 41, '40 events and the test event')
  t.ok([...handled.values()].every((n) => n === 1), 'each exactly once, although one batch arrived twice')
  const lastRowOf = new Map(sandbox.batches.map((b) => [b.batch_id, b]))
  t.ok([...lastRowOf.values()].every((b) => b.status === '2xx_response'), 'the last attempt of every batch was accepted')

  // 7. A second reconcile without an exclusion resends the same batches again: harmless here
  // (the seen-events store skips their events), and what the state file of the CLI avoids.
  const again = await mc.webhooks.reconcile({ rate: 50, exclude: report.data!.batches.map((b) => b.batchId) })
  t.same(again.data!.summary, { total: failedIds.length, resent: 0, failed: 0, skipped: failedIds.length, notAttempted: 0 })
  t.equal(handled.size, 41)
})
