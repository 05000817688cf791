import t from 'tap'
import { runExample } from './helpers/run-example.js'

t.test('examples/fastify-batches-route.ts runs as is and exits 0', async (t) => {
  const { code, stdout, stderr } = await runExample(t, 'fastify-batches-route.ts')
  t.equal(code, 0, stderr)
  t.match(stdout, /^without a token: 401\nwith the token: 200\nfailed batch 2: 4xx_response \(404\) "http:\/\/127\.0\.0\.1:\d+\/missing"\n$/)
})
