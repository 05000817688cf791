// Adapter for the side-by-side HTTP harness (`http-bench.mjs --plugin ./bench/harness/adapter.mjs`,
// see bench/README.md): the library's Fastify plugin and Express middleware with their defaults
// (replay protection on with the memory store, verifyOnThreadPool 'auto'), answering 204 like the
// harness's ideal receivers. Loads the built package (dist/): run `npm run build` first.
import mailchannelsWebhooks from '../../dist/fastify/index.js'
import { mailchannelsWebhooks as expressWebhooks } from '../../dist/express/index.js'

/** The harness's fixtures sign every event for this customer. */
export const CUSTOMER_HANDLE = 'cust_8f3a2b'

export async function registerFastify (app, opts) {
  await app.register(mailchannelsWebhooks, { publicKey: opts.publicKey, customerHandles: [CUSTOMER_HANDLE], bodyLimit: opts.bodyLimit })
  app.post(opts.path, { config: { mailchannelsWebhooks: true } }, (request, reply) => { reply.code(204).send() })
}

export async function mountExpress (app, opts) {
  app.post(opts.path, expressWebhooks({ publicKey: opts.publicKey, customerHandles: [CUSTOMER_HANDLE], bodyLimit: opts.bodyLimit }), (req, res) => { res.status(204).end() })
}
