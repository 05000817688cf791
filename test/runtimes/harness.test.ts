// Each runtime starts with a trivial worker, answers over loopback and reaches a loopback
// server (the way the webhook handler reaches a key server); skipped, with the reason, where the
// runtime's binary cannot start.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { STARTERS, unavailableReason, type RuntimeName } from './helpers/runtimes.js'

const upstream = http.createServer((_req, res) => { res.end('from loopback') })
t.before(() => new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve)))
t.teardown(() => new Promise<void>((resolve) => { upstream.closeAllConnections(); upstream.close(() => resolve()) }))

for (const name of Object.keys(STARTERS) as RuntimeName[]) {
  t.test(name, { skip: unavailableReason(name) ?? false }, async (t) => {
    const server = await STARTERS[name]({ entry: 'test/runtimes/fixtures/echo-worker.ts', env: { GREETING: 'hi' } })
    t.teardown(() => server.close())
    const port = (upstream.address() as AddressInfo).port
    const res = await fetch(`${server.url}/?fetch=${encodeURIComponent(`http://127.0.0.1:${port}/`)}`, { method: 'POST', body: 'ping', signal: AbortSignal.timeout(15_000) })
    t.equal(res.status, 200, server.output())
    const body = await res.json() as Record<string, unknown>
    t.strictSame(body, { method: 'POST', body: 'ping', env: { GREETING: 'hi' }, fetched: 'from loopback', subtle: 'function', buffer: name === 'workerd' || name === 'edge-runtime' ? 'undefined' : body.buffer })
  })
}
