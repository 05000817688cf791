// The receiver of the no-account walkthrough (docs/sandbox.md): a Fastify app
// that verifies deliveries and hands each event to its handler exactly once, also across
// restarts, resends and reconciles.
//
//   npx mailchannels-webhooks sandbox --port 8787                              # terminal 1
//   MAILCHANNELS_BASE_URL=http://127.0.0.1:8787 npx tsx examples/lifecycle/receiver.ts   # terminal 2
//
// Environment: PORT (default 3000), MAILCHANNELS_BASE_URL (where signing keys come from: the
// sandbox; leave it out in production), CUSTOMER_HANDLES (comma-separated, default `sandbox`),
// SEEN_EVENTS_FILE (default `.seen-events.txt`).
import { appendFileSync, readFileSync } from 'node:fs'
import Fastify from 'fastify'
import mailchannelsWebhooks from 'mailchannels-webhooks/fastify'
import { MemoryClaimStore, WebhookEventRouter, type StoreClaim } from 'mailchannels-webhooks'

/**
 * The events already handled, remembered in a file so that a restarted receiver still knows
 * them: enough for this demo on one machine. In production use a shared store that outlives
 * every instance: `new RedisClaimStore({ client: redis })`.
 */
class FileSeenEventsStore extends MemoryClaimStore {
  constructor (readonly file: string) {
    super()
    let known: string[] = []
    try {
      known = readFileSync(file, 'utf8').split('\n').filter(Boolean)
    } catch {
      // No file yet: nothing handled yet.
    }
    void this.add(known)
  }

  override async complete (claims: readonly StoreClaim[]): Promise<void> {
    await super.complete(claims)
    appendFileSync(this.file, claims.map((c) => `${c.fingerprint}\n`).join(''))
  }
}

const port = Number(process.env.PORT ?? 3000)
const baseUrl = process.env.MAILCHANNELS_BASE_URL // undefined: the real service
const customerHandles = (process.env.CUSTOMER_HANDLES ?? 'sandbox').split(',')
const seenEvents = new FileSeenEventsStore(process.env.SEEN_EVENTS_FILE ?? '.seen-events.txt')

// Each event's handler runs once: a resend, a retry or a reconcile of events already handled is
// answered 2xx without running it again.
const router = new WebhookEventRouter({ seenEvents })
  .on('*', (event, { fingerprint }) => {
    console.log(`handled ${event.event.padEnd(12)} ${fingerprint.slice(0, 12)}`)
  })

const app = Fastify()
await app.register(mailchannelsWebhooks, { customerHandles, baseUrl, handlers: router, path: '/webhooks' })
const address = await app.listen({ host: '127.0.0.1', port })
console.log(`receiver listening on ${address}/webhooks (Ctrl-C to stop)`)

process.once('SIGINT', () => { void app.close() })
process.once('SIGTERM', () => { void app.close() })
