// The conformance set on Node: the web handler and the Hono middleware behind a real HTTP server
// (@hono/node-server turns node:http requests into fetch Requests, streaming the body).
import type { AddressInfo } from 'node:net'
import { serve } from '@hono/node-server'
import t, { type Test } from 'tap'
import { conformanceFixture, runConformance, type ConformanceEnv } from '../runtimes/helpers/conformance.js'
import webWorker from '../runtimes/fixtures/conformance-worker.js'
import honoWorker from '../runtimes/fixtures/conformance-hono.js'

type Worker = { fetch: (request: Request, env: ConformanceEnv) => Response | Promise<Response> }

async function listen (t: Test, worker: Worker, env: ConformanceEnv): Promise<string> {
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve({ fetch: (request) => worker.fetch(request, env), port: 0, hostname: '127.0.0.1' }, () => resolve(s))
  })
  t.teardown(() => new Promise<void>((resolve) => {
    (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.()
    server.close(() => resolve())
  }))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

t.test('the web handler on Node', async (t) => {
  const f = await conformanceFixture(t)
  await runConformance(t, { url: await listen(t, webWorker, f.env), answersMethodNotAllowed: true }, f)
})

t.test('the Hono middleware on Node', async (t) => {
  const f = await conformanceFixture(t)
  await runConformance(t, { url: await listen(t, honoWorker, f.env), answersMethodNotAllowed: false }, f)
})
