// `npm start`: a Fastify receiver checking MailChannels webhooks sent by a local sandbox.
// No account, no configuration. Ctrl-C to stop (DEMO_DURATION_MS=5000 stops by itself
// 5 seconds after the scripted part).
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import mailchannelsWebhooks, { batchesRoute } from '../src/fastify/index.js'
import { MailChannels, type WebhookEvent } from '../src/index.js'
import { createSandbox, type SandboxBatch, type TamperKind } from '../src/testing/index.js'

// Colour only on a terminal, and never when NO_COLOR is set.
const colour = process.stdout.isTTY === true && (process.env.NO_COLOR ?? '') === ''
const paint = (code: number, text: string): string => (colour ? `\u001b[${code}m${text}\u001b[0m` : text)
const green = (text: string): string => paint(32, text)
const red = (text: string): string => paint(31, text)
const yellow = (text: string): string => paint(33, text)
const dim = (text: string): string => paint(2, text)
const bold = (text: string): string => paint(1, text)

// The sandbox plays MailChannels: it signs each delivery with its own Ed25519 key, serves that
// key to the receiver, retries failed deliveries (signed afresh) and records every attempt.
const sandbox = await createSandbox({
  batchSize: 4,
  retryDelay: 500,
  onAttempt: (batch, detail) => { report(batch, detail.attempt, detail.retryInMs, detail.tamper) },
})

// What the receiver answered to the request in progress (deliveries here go one at a time),
// and the events its handler got.
let answer: { status: number, code: string | null, duplicate: boolean } | null = null
let handled: WebhookEvent[] = []
let failNext = false

const app = Fastify({
  requestTimeout: 30_000, // a slow client cannot hold a request open forever
  connectionTimeout: 60_000,
})
await app.register(mailchannelsWebhooks, {
  customerHandles: [sandbox.customerHandle], // whose deliveries this endpoint accepts
  baseUrl: sandbox.baseUrl, // fetch signing keys from the sandbox (in production: leave it out)
})

app.post('/webhooks', {
  config: { mailchannelsWebhooks: true },
  // Note what the receiver answered, rejections by the plugin included ({ code, message }).
  onSend: async (_request, reply, payload) => {
    const body = typeof payload === 'string' ? JSON.parse(payload) as { code?: string, duplicate?: boolean } : {}
    answer = { status: reply.statusCode, code: body.code ?? null, duplicate: body.duplicate === true }
    return payload
  },
}, async (request, reply) => {
  // Your code goes here: request.webhookEvents is verified and typed, and runs once per delivery.
  handled = request.webhookEvents
  if (failNext) {
    failNext = false
    return reply.code(503).send({ error: 'the database is down (on purpose)' })
  }
  return reply.code(204).send()
})

// The batch listing, behind a bearer token (any authorize hook works: session, JWT, ...).
const token = randomBytes(12).toString('hex')
await app.register(batchesRoute, {
  client: new MailChannels(sandbox.apiKey, { baseUrl: sandbox.baseUrl }),
  url: '/webhooks/batches',
  authorize: (request) => request.headers.authorization === `Bearer ${token}`,
})

const address = await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) })
const target = `${address}/webhooks`

console.log(`
${bold('MailChannels webhooks demo')}

A local sandbox plays MailChannels: it signs webhook deliveries and POSTs them to a
Fastify receiver that uses mailchannels-webhooks. The receiver checks each delivery's
digest, signature, customer handle and freshness, and refuses to handle one twice,
before your handler runs. You will see, one line per delivery:
  1. three genuine deliveries: accepted
  2. a delivery tampered with on purpose (its body changed after signing): rejected
  3. an exact copy of an accepted delivery sent again: answered as a duplicate
  4. a handler that fails once: the delivery is retried, signed afresh, and accepted
then a genuine delivery every 2 seconds until you press Ctrl-C.

  receiver  POST ${target}
  sandbox   ${sandbox.baseUrl}  (key id ${sandbox.keyId}, customer handle "${sandbox.customerHandle}")
  batches   curl -H 'Authorization: Bearer ${token}' '${address}/webhooks/batches?statuses=4xx,5xx'
`)

const stats = { deliveries: new Set<number>(), requests: 0, accepted: 0, events: 0, duplicates: 0, failed: 0, rejected: {} as Record<string, number> }
let lastAccepted: number | null = null

function eventList (events: WebhookEvent[]): string {
  return `${events.length} ${events.length === 1 ? 'event' : 'events'}: ${events.map((e) => (e.event === 'unknown' ? e.eventName : e.event)).join(', ')}`
}

/** One line for one request the receiver answered. */
function report (batch: SandboxBatch, attempt: number, retryInMs: number | null, tamper: TamperKind | null): void {
  stats.deliveries.add(batch.batch_id)
  stats.requests++
  const a = answer
  const events = handled
  answer = null
  handled = []
  // The outcome column starts after at least one space, however many digits the batch has.
  const head = `batch ${String(batch.batch_id).padEnd(3)} `
  const code = String(batch.status_code ?? '---')
  if (a === null) {
    console.log(`${head}${red('no answer ')} ${code}  ${dim('the receiver did not answer')}`)
  } else if (a.duplicate) {
    stats.duplicates++
    console.log(`${head}${yellow('duplicate ')} ${code}  an exact copy of batch ${lastAccepted ?? '?'}, sent again: already handled, so the handler did not run`)
  } else if (a.status >= 200 && a.status < 300) {
    stats.accepted++
    stats.events += events.length
    lastAccepted = batch.batch_id
    const retried = attempt > 1 ? dim(`  (attempt ${attempt}: signed afresh, so not a duplicate)`) : ''
    console.log(`${head}${green('accepted  ')} ${code}  ${eventList(events)}${retried}`)
  } else if (a.code !== null) {
    stats.rejected[a.code] = (stats.rejected[a.code] ?? 0) + 1
    const why = tamper === 'body' ? 'tampered on purpose: the body was changed after signing, so it no longer matches its digest' : 'it failed verification'
    console.log(`${head}${red('rejected  ')} ${code}  ${a.code} (${why}); the handler did not run`)
  } else {
    stats.failed++
    const next = retryInMs !== null ? `; MailChannels retries in ${retryInMs / 1000} s` : ''
    console.log(`${head}${red('failed    ')} ${code}  the handler failed (on purpose)${next}`)
  }
}

let stopping = false
const stopped = new AbortController()

/** One delivery, retries included; the sandbox reports each attempt (onAttempt above). */
async function deliver (tamper?: TamperKind): Promise<void> {
  await sandbox.deliver(undefined, { target, ...(tamper !== undefined ? { tamper } : {}) })
}

async function script (): Promise<void> {
  for (let i = 0; i < 3; i++) await deliver()
  await deliver('body')
  await deliver('replay')
  failNext = true
  await deliver()
}

function summary (): void {
  const rejected = Object.values(stats.rejected).reduce((a, b) => a + b, 0)
  const reasons = Object.entries(stats.rejected).map(([code, n]) => `${code}: ${n}`).join(', ')
  console.log(bold(`\nsummary: ${stats.deliveries.size} deliveries in ${stats.requests} requests: ${stats.accepted} accepted (${stats.events} events handled), ` +
    `${rejected} rejected${rejected > 0 ? ` (${reasons})` : ''}, ${stats.duplicates} ${stats.duplicates === 1 ? 'duplicate' : 'duplicates'} refused, ${stats.failed} failed in the handler and retried`))
}

async function shutdown (): Promise<void> {
  if (stopping) return // Ctrl-C may arrive more than once (from the terminal and from npm)
  stopping = true
  stopped.abort()
  await sandbox.close() // stops the sender, aborts deliveries in flight, closes its server
  await app.close()
  summary()
  console.log('demo stopped')
}
process.on('SIGINT', () => { void shutdown() })
process.on('SIGTERM', () => { void shutdown() })

try {
  await script()
  const deadline = Date.now() + Number(process.env.DEMO_DURATION_MS ?? Infinity)
  while (!stopping && Date.now() < deadline) {
    const wait = Math.min(2000, deadline - Date.now())
    await sleep(wait, undefined, { signal: stopped.signal }).catch(() => {})
    if (!stopping && wait === 2000) await deliver()
  }
  await shutdown()
} catch (err) {
  // A Ctrl-C during a delivery ends it early; anything else is a real error.
  if (!stopping) throw err
}
