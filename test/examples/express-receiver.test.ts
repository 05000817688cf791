import t from 'tap'
import { runExample } from './helpers/run-example.js'

t.test('examples/express-receiver.ts runs as is and exits 0', async (t) => {
  const { code, stdout, stderr } = await runExample(t, 'express-receiver.ts')
  t.equal(code, 0, stderr)
  t.equal(stdout, [
    '10 events, 2 bounces', 'batch 1: 200 2xx_response',
    '10 events, 2 bounces', 'batch 2: 200 2xx_response',
    '10 events, 2 bounces', 'batch 3: 200 2xx_response',
    '',
  ].join('\n'))
})
