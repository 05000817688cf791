// The answer of `handlers` in a Fastify route, in process: the plugin's own route
// (`handlers: router`, as bench/harness/router-adapter.mjs registers it) against a user route that
// takes `request.webhookEvents` and calls `router.dispatch(events)` itself, answering the same counts
// (`user200`) or 204 (`user204`), and a second plugin app as a control (its difference from the first
// is the noise). Requests are interleaved one by one across the apps (the order reversed each time) and
// the process CPU of each `app.inject` summed per app: drift in the machine's load falls on every app
// alike. Every request is a new delivery of new events. Loads the built package (dist/): run
// `npm run build` first; `--lib DIR` compares another build's plugin (app `lib`).
//   node bench/answer-path-bench.mjs [--events 4] [--batch 1000] [--reps 20] [--apps plugin,user200,user204,plugin2] [--lib DIR]
import path from 'node:path'
import { parseArgs } from 'node:util'
import { pathToFileURL } from 'node:url'
import Fastify from 'fastify'
import { CUSTOMER_HANDLE, contentDigest, makeBody, makeKeyPair, signedHeaders } from './lib/fixtures.mjs'
import { median } from './lib/measure.mjs'

const { values } = parseArgs({ options: { events: { type: 'string', default: '4' }, batch: { type: 'string', default: '1000' }, reps: { type: 'string', default: '20' }, apps: { type: 'string', default: 'plugin,user200,user204,plugin2' }, lib: { type: 'string' } } })
const events = Number(values.events); const batch = Number(values.batch); const reps = Number(values.reps)
const here = new URL('../dist/', import.meta.url)
const load = async (dir) => ({ plugin: (await import(new URL('fastify/index.js', dir))).default, lib: await import(new URL('index.js', dir)) })
const main = await load(here)
const other = values.lib === undefined ? undefined : await load(pathToFileURL(path.resolve(values.lib) + '/'))
const kp = makeKeyPair()

function router ({ lib }) {
  const r = new lib.WebhookEventRouter({ seenEvents: new (lib.MemoryClaimStore ?? lib.MemorySeenEventsStore)() })
  for (const type of [...lib.WEBHOOK_EVENT_TYPES, 'unknown']) r.on(type, () => {})
  return r
}
async function pluginApp (build) {
  const app = Fastify({ logger: false })
  await app.register(build.plugin, { publicKey: kp.spkiB64, customerHandles: [CUSTOMER_HANDLE], path: '/wh', handlers: router(build) })
  await app.ready()
  return app
}
async function userApp (counts) {
  const app = Fastify({ logger: false })
  const r = router(main)
  await app.register(main.plugin, { publicKey: kp.spkiB64, customerHandles: [CUSTOMER_HANDLE] })
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request, reply) => {
    const report = await r.dispatch(request.webhookEvents)
    if (!counts) return reply.code(204).send()
    return { handled: report.handled, skipped: report.skipped, unhandled: report.unhandled }
  })
  await app.ready()
  return app
}
const names = values.apps.split(',')
const make = { plugin: () => pluginApp(main), plugin2: () => pluginApp(main), user200: () => userApp(true), user204: () => userApp(false), lib: () => pluginApp(other) }
const apps = {}
for (const n of names) {
  if (make[n] === undefined || (n === 'lib' && other === undefined)) throw new Error(`unknown app ${n} (lib needs --lib)`)
  apps[n] = await make[n]()
}

// New events for every delivery: the request ids carry a counter.
const template = JSON.parse(makeBody(events).toString())
let counter = 0
function requests (n) {
  const list = []
  for (let i = 0; i < n; i++) {
    const body = Buffer.from(JSON.stringify(template.map((e) => ({ ...e, request_id: `req_${(counter++).toString(16)}` }))))
    list.push({ method: 'POST', url: '/wh', headers: signedHeaders(contentDigest(body), kp.privateKey), payload: body })
  }
  return list
}
async function inject (app, req) {
  const res = await app.inject(req)
  if (res.statusCode >= 300) throw new Error(`${res.statusCode} ${res.body}`)
}

for (const n of names) for (const req of requests(Math.min(batch, 200))) await inject(apps[n], req)
const perRep = Object.fromEntries(names.map((n) => [n, []]))
for (let rep = 0; rep < reps; rep++) {
  const lists = Object.fromEntries(names.map((n) => [n, requests(batch)]))
  const cpu = Object.fromEntries(names.map((n) => [n, 0]))
  for (let i = 0; i < batch; i++) {
    for (const n of (i + rep) % 2 === 1 ? [...names].reverse() : names) {
      const t0 = process.cpuUsage()
      await inject(apps[n], lists[n][i])
      const c = process.cpuUsage(t0)
      cpu[n] += c.user + c.system
    }
  }
  for (const n of names) perRep[n].push(cpu[n] / batch)
}
console.log(`${events} events, ${reps} rounds of ${batch} requests per app, process CPU µs per request (median of rounds)`)
for (const n of names) console.log(`${n.padEnd(8)} ${median(perRep[n]).toFixed(1)}`)
for (const n of names.slice(1)) console.log(`${names[0]} - ${n}: ${median(perRep[n].map((x, i) => perRep[names[0]][i] - x)).toFixed(1)} µs (median of per-round differences)`)
