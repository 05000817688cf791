// The command line of `npm run bench`, shared by bench/run.mjs and bench/http-bench.mjs (which
// run.mjs starts as a child process with the same arguments).
import { parseArgs } from 'node:util'

export const HELP = `npm run bench [-- options]      (or: node bench/run.mjs [options] after npm run build)

What runs
  (default)                    in-process verify bench: the library's verifyWebhook vs the ideal receiver
  --no-verify                  skip it
  --http                       also the HTTP bench: Fastify plugin (also answering with handlers: a router,
                               with and without a diagnostics subscriber), web handler (on @hono/node-server)
                               and Express middleware vs the ideal receivers
  --replay                     also the replay-store bench (bound of the memory store, cost per delivery)
  --json <file>                also write every sample of the verify and HTTP benches to <file>

Verify bench
  --events 1,100,10000         events per delivery (~251 B each)
  --reps 5                     repetitions (round-robin over the implementations)
  --time 300                   ms per sample
  --warmup 200                 ms of untimed calls per implementation and body size

HTTP bench
  --http-events 4,1000         events per delivery (4 ≈ 1 KiB, 1000 ≈ 256 KiB)
  --connections 100            concurrent connections of the load generator (autocannon)
  --duration 10                seconds per load run
  --http-reps 3                repetitions (round-robin over the servers)
  --http-warmup 2              seconds of untimed load per server and body size (0: none)
  --unique auto                distinct deliveries (own events, own signature) per load run, so that
                               requests differ as real ones do. auto: one per request (sized from the
                               server's rate); a number: that many, cycled; 0: every request identical
  --verify-on-thread-pool auto the receivers' verifyOnThreadPool: auto, true or false
  --receiver-replay memory     the receivers' replay protection: memory (the default MemoryReplayStore) or off
  --servers a,b                only these receivers (the ideal ones are always run): fastify-plugin,
                               fastify-plugin-node-crypto, fastify-router, fastify-router-subscribed,
                               web-handler, express-middleware, express-middleware-node-crypto
                               (*-node-crypto: as installed without sodium-native)
  --pin                        server on CPU 1, load generator on CPU 0 (needs taskset and 2 CPUs);
                               default: unpinned, the server may use every core

Short runs, e.g. to check the setup:
  npm run bench -- --reps 1 --time 100 --warmup 50
  npm run bench -- --no-verify --http --http-events 4 --connections 10 --duration 2 --http-reps 1 --http-warmup 0`

const OPTIONS = {
  verify: { type: 'boolean', default: true },
  http: { type: 'boolean', default: false },
  replay: { type: 'boolean', default: false },
  json: { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
  events: { type: 'string', default: '1,100,10000' },
  reps: { type: 'string', default: '5' },
  time: { type: 'string', default: '300' },
  warmup: { type: 'string', default: '200' },
  'http-events': { type: 'string', default: '4,1000' },
  connections: { type: 'string', default: '100' },
  duration: { type: 'string', default: '10' },
  'http-reps': { type: 'string', default: '3' },
  'http-warmup': { type: 'string', default: '2' },
  unique: { type: 'string', default: 'auto' },
  'verify-on-thread-pool': { type: 'string', default: 'auto' },
  'receiver-replay': { type: 'string', default: 'memory' },
  servers: { type: 'string' },
  pin: { type: 'boolean', default: false },
}

/** The library's receivers of the HTTP bench (bench/http-server.mjs variants). */
export const SERVERS = ['fastify-plugin', 'fastify-plugin-node-crypto', 'fastify-router', 'fastify-router-subscribed', 'web-handler', 'express-middleware', 'express-middleware-node-crypto']

function count (name, value, min) {
  const n = Number(value)
  if (value.trim() === '' || !Number.isInteger(n) || n < min) throw new Error(`--${name} must be a whole number ≥ ${min} (got "${value}")`)
  return n
}

function list (name, value) {
  return value.split(',').map((v) => count(name, v, 1))
}

/** Parses and checks the arguments; throws an Error whose message says what to fix. */
export function parseBenchArgs (argv) {
  let values
  try {
    ({ values } = parseArgs({ args: argv, options: OPTIONS, allowNegative: true }))
  } catch (err) {
    throw new Error(`${err.message.replace(/\. To specify a positional argument.*$/, '')}. See --help.`)
  }
  const pool = values['verify-on-thread-pool']
  if (!['auto', 'true', 'false'].includes(pool)) throw new Error(`--verify-on-thread-pool must be auto, true or false (got "${pool}")`)
  const replay = values['receiver-replay']
  if (!['memory', 'off'].includes(replay)) throw new Error(`--receiver-replay must be memory or off (got "${replay}")`)
  const servers = values.servers === undefined ? undefined : values.servers.split(',').map((v) => v.trim())
  const unknown = servers?.filter((v) => !SERVERS.includes(v)) ?? []
  if (unknown.length > 0) throw new Error(`--servers: unknown receiver ${unknown.join(', ')} (one of ${SERVERS.join(', ')})`)
  return {
    help: values.help,
    verify: values.verify,
    http: values.http,
    replay: values.replay,
    json: values.json,
    verifyBench: {
      events: list('events', values.events),
      reps: count('reps', values.reps, 1),
      timeMs: count('time', values.time, 1),
      warmupMs: count('warmup', values.warmup, 0),
    },
    httpBench: {
      events: list('http-events', values['http-events']),
      connections: list('connections', values.connections),
      duration: count('duration', values.duration, 1),
      reps: count('http-reps', values['http-reps'], 1),
      warmup: count('http-warmup', values['http-warmup'], 0),
      unique: values.unique === 'auto' ? 'auto' : count('unique', values.unique, 0),
      verifyOnThreadPool: pool === 'auto' ? 'auto' : pool === 'true',
      replay,
      servers,
      pin: values.pin,
    },
  }
}
