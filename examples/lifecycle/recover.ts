// After an outage: resend what your endpoint missed, once, without handling anything twice.
// Run as is (`npx tsx examples/lifecycle/recover.ts`), a local sandbox plays MailChannels:
// it delivers to a receiver that goes down for a while, then reconcile gets the missed events back.
// With MAILCHANNELS_API_KEY set, the same reconcile runs against your account instead.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import Fastify, { type FastifyInstance } from 'fastify'
import mailchannelsWebhooks from 'mailchannels-webhooks/fastify'
import { MailChannels, MemoryClaimStore, WebhookEventRouter } from 'mailchannels-webhooks'
import { createSandbox } from 'mailchannels-webhooks/testing'

/**
 * Resends every batch whose delivery failed in the last 3 days, once. `stateFile` keeps the ids
 * resent so far: a rerun after a crash or a stop skips them.
 */
async function recover (mc: MailChannels, stateFile: string): Promise<boolean> {
  const resent = new Set<number>(existsSync(stateFile) ? JSON.parse(readFileSync(stateFile, 'utf8')) as number[] : [])
  const { data, error } = await mc.webhooks.reconcile({
    exclude: resent, // already resent by an earlier run
    rate: 5, // resends per second (default 3)
    onProgress ({ done, total, result }) {
      if (result.outcome === 'resent') {
        resent.add(result.batchId)
        writeFileSync(stateFile, JSON.stringify([...resent])) // after each one: a crash loses nothing
      }
      const what = result.outcome === 'failed' ? `failed: ${result.error.message}` : result.outcome === 'skipped' ? `skipped (${result.reason})` : `resent, the endpoint answered ${result.resend.statusCode}`
      console.log(`[${done}/${total}] batch ${result.batchId} ${what}`)
    },
  })
  if (error !== null) {
    console.error(`reconcile could not list the failed batches: ${error.type} ${error.message}`)
    return false
  }
  console.log(`resent ${data.summary.resent}, failed ${data.summary.failed}, skipped ${data.summary.skipped}, not attempted ${data.summary.notAttempted} of ${data.summary.total}`)
  if (data.stopped !== null) console.error(data.stopped.message)
  return data.summary.failed === 0 && data.stopped === null
}

// Trimmed: a key read from a file or a shell often ends with a newline, which the client refuses.
const apiKey = process.env.MAILCHANNELS_API_KEY?.trim() ?? ''
if (apiKey !== '') {
  const ok = await recover(new MailChannels(apiKey), process.env.STATE_FILE ?? '.reconcile-state.json')
  process.exit(ok ? 0 : 1)
}

// No account: a sandbox, and a receiver whose seen-events store outlives its restarts (in
// production, a RedisClaimStore shared by every instance).
const sandbox = await createSandbox({ rate: 10, batchSize: 5, maxAttempts: 1 })
const mc = new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl })
const handled = new Map<string, number>()
const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() })
  .on('*', (_event, { fingerprint }) => { handled.set(fingerprint, (handled.get(fingerprint) ?? 0) + 1) })
let port = 0
let app: FastifyInstance | null = null
async function startReceiver (): Promise<void> {
  app = Fastify()
  await app.register(mailchannelsWebhooks, { customerHandles: [sandbox.customerHandle], baseUrl: sandbox.baseUrl, handlers: router, path: '/webhooks' })
  await app.listen({ host: '127.0.0.1', port })
  port = (app.server.address() as { port: number }).port
}

await startReceiver()
const endpoint = `http://127.0.0.1:${port}/webhooks`
await mc.webhooks.enroll(endpoint)
const check = await mc.webhooks.validate()
console.log(`enrolled ${endpoint}; validate: ${check.data?.allPassed === true ? 'passed' : 'failed'}`)

sandbox.start({ count: 30 })
while (handled.size < 11) await new Promise((resolve) => setTimeout(resolve, 20))
await app!.close()
console.log('receiver down while events are sent...')
await sandbox.finished()
await startReceiver()
const missed = (await mc.webhooks.batches({ statuses: ['4xx', '5xx', 'no_response'] })).data ?? []
console.log(`receiver back; ${missed.length} batches were not delivered`)

// A new sandbox numbers its batches from 1 again: its state file lives only as long as it does.
const dir = mkdtempSync(path.join(os.tmpdir(), 'recover-'))
const ok = await recover(mc, path.join(dir, 'reconcile-state.json'))
rmSync(dir, { recursive: true, force: true })
const twice = [...handled.values()].filter((n) => n > 1).length
console.log(`${handled.size} events handled (30 and the test event), ${twice === 0 ? 'each exactly once' : `${twice} twice`}`)
await app!.close()
await sandbox.close()
process.exitCode = ok && handled.size === 31 && twice === 0 ? 0 : 1
