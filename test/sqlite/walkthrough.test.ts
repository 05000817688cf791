// The no-account walkthrough (README "Try it with no account": the sandbox delivering to a Fastify
// receiver taking its keys from it) on the SQLite store: the receiver restarted on the same file
// (a deploy), a resend of a delivery it had handled is skipped, not handled again.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import Fastify from 'fastify'
import t from 'tap'
import mailchannelsWebhooks from '../../src/fastify/index.js'
import { WebhookEventRouter, type DispatchReport } from '../../src/index.js'
import { sqliteSeenEvents } from '../../src/sqlite/index.js'
import { createSandbox } from '../../src/testing/index.js'

const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-walkthrough-'))
t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })

t.test('sandbox → receiver on sqliteSeenEvents; restarted receiver skips a resend', async (t) => {
  const sandbox = await createSandbox({ retryDelay: 100 })
  t.teardown(async () => { await sandbox.close() })
  const file = path.join(dir, 'seen-events.db')
  const handled: string[] = []
  const reports: DispatchReport[] = []

  const receiver = async (port: number): Promise<{ port: number, close: () => Promise<void> }> => {
    const seenEvents = sqliteSeenEvents({ path: file })
    const router = new WebhookEventRouter({ seenEvents }).on('*', (event) => { handled.push(event.event) })
    const app = Fastify()
    await app.register(mailchannelsWebhooks, {
      path: '/webhooks/mailchannels',
      customerHandles: [sandbox.customerHandle],
      baseUrl: sandbox.baseUrl,
      handlers: { dispatch: async (events, context) => { const r = await router.dispatch(events, context); reports.push(r); return r } },
    })
    await app.listen({ port, host: '127.0.0.1' })
    return { port: (app.server.address() as { port: number }).port, close: async () => { await app.close(); await seenEvents.close() } }
  }

  const first = await receiver(0)
  sandbox.enroll(`http://127.0.0.1:${first.port}/webhooks/mailchannels`)
  const batch = await sandbox.deliver()
  t.equal(batch.status, '2xx_response')
  const count = handled.length
  t.ok(count > 0, `${count} events handled`)
  await first.close()

  // A deploy: the receiver restarts on the same port and file; MailChannels resends the batch (re-signed).
  const second = await receiver(first.port)
  t.teardown(second.close)
  // One attempt per resend: its first may meet the connection the old server closed (no answer), like a retry after a deploy.
  let resent = await sandbox.resend(batch.batch_id)
  for (let i = 0; i < 5 && resent?.status_code !== 200; i++) resent = await sandbox.resend(batch.batch_id)
  t.equal(resent?.status_code, 200, 'the resend is acknowledged')
  t.equal(handled.length, count, 'nothing handled again after the restart')
  t.equal(reports.at(-1)!.skipped, count, 'every event of the resend skipped')
})
