// The library's adapter for the shared HTTP harness:
//   npm run build   (or: npx tsc -p tsconfig.build.json)
//   node ../shared/bench/http-bench.mjs --plugin ./bench/http-adapter.mjs
// It uses the built dist/, with the static key (no key fetch on the timed path) and replay
// protection off (the harness resends identical signed requests; see its README).
// MC_VERIFY_ON_THREAD_POOL=auto|true|false picks verifyOnThreadPool (default: the library's 'auto').
import mailchannelsWebhooks from '../dist/fastify/index.js'
import { mailchannelsWebhook } from '../dist/express/index.js'

const CUSTOMER = 'cust_8f3a2b'

function poolOption () {
  const v = process.env.MC_VERIFY_ON_THREAD_POOL
  if (v === undefined || v === '' || v === 'auto') return 'auto'
  return v === 'true'
}

function options (opts) {
  return { publicKey: opts.publicKey, customerHandles: [CUSTOMER], replay: false, bodyLimit: opts.bodyLimit, verifyOnThreadPool: poolOption() }
}

export const name = 'mailchannels-webhooks'

export async function registerFastify (app, opts) {
  await app.register(mailchannelsWebhooks, options(opts))
  app.post(opts.path, { config: { mailchannelsWebhook: true } }, (request, reply) => {
    reply.code(204).send()
  })
}

export async function mountExpress (app, opts) {
  app.post(opts.path, mailchannelsWebhook(options(opts)), (req, res) => {
    res.status(204).end()
  })
}
