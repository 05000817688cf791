import t from 'tap'
import { runExample } from './helpers/run-example.js'

t.test('examples/fastify-receiver.ts runs as is and exits 0', async (t) => {
  const { code, stdout, stderr } = await runExample(t, 'fastify-receiver.ts')
  t.equal(code, 0, stderr)
  t.match(stdout, /^batch 1: 200 2xx_response, 10 events$/m)
  t.match(stdout, /^batch 3: 200 2xx_response, 10 events$/m)
  t.equal(stdout.match(/^click on "https:\/\/shop\.example\//gm)?.length, 3, 'the handler saw the verified click events')
  t.match(stdout, /^suppress \["[^"\s]+@[^"\s]+"\] \(hard-bounced\)$/m)
})
