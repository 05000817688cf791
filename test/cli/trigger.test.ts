import t from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { ensureBuilt, inParallel, runCli, startCli, stateDir } from './helpers/cli.js'

// `trigger <event-type>`: one delivery now, from the running sandbox to its enrolled endpoint,
// and what the endpoint answered. The built CLI, a real sandbox and a real receiver.

ensureBuilt()
// Each test has its own state directory: they run side by side.
t.jobs = 2

t.test('trigger: usage errors before any sandbox is looked for; help', async (t) => {
  const env = { XDG_STATE_HOME: stateDir(t) }
  const cases: Array<[string[], RegExp]> = [
    [['trigger'], /^mailchannels-webhooks trigger: missing <event-type>: mailchannels-webhooks trigger <event-type>\.\n/],
    [['trigger', 'delivred'], /^mailchannels-webhooks trigger: 'delivred' is not an event type\. Did you mean delivered\? Event types: processed, delivered, open, click, hard-bounced, soft-bounced, dropped, complained, unsubscribed, test\.\n/],
    [['trigger', 'delivered', 'open'], /unexpected argument 'open'\./],
    [['trigger', 'delivered', '--count', '0'], /--count must be an integer from 1 to 1000, got '0'\./],
    [['trigger', 'delivered', '--count', '1001'], /--count must be an integer from 1 to 1000, got '1001'\./],
    [['trigger', 'delivered', '--sandbox-port', '70000'], /--sandbox-port must be an integer from 1 to 65535/],
    [['trigger', 'delivered', '--target', 'x'], /unknown option --target for 'trigger'/],
    [['trigger', '\u001b[2Jdelivered'], /'\\x1b\[2Jdelivered' is not an event type/],
  ]
  // No command here finds a sandbox or changes anything: all run side by side.
  const [none, help, mainHelp, ...runs] = await inParallel([
    () => runCli(['trigger', 'delivered'], env),
    () => runCli(['trigger', '--help'], env),
    () => runCli(['--help'], env),
    ...cases.map(([args]) => () => runCli(args, env)),
  ])
  for (const [i, [args, message]] of cases.entries()) {
    const run = runs[i]!
    t.equal(run.code, 2, `${args.join(' ')}: exit 2`)
    t.match(run.stderr, message)
    t.match(run.stderr, /Run 'mailchannels-webhooks trigger --help' for the usage\.\n$/)
    t.notMatch(run.stderr, /\u001b/)
  }
  t.equal(none.code, 1)
  t.match(none.stderr, /^mailchannels-webhooks trigger: no running sandbox found .* Start one with: mailchannels-webhooks sandbox\n$/)
  t.equal(help.code, 0)
  t.match(help.stdout, /^Usage: mailchannels-webhooks trigger <event-type> \[options\]\n[^]*--count <n>[^]*--sandbox-port <n>[^]*--json[^]*Exit codes: 0 the endpoint answered 2xx/)
  t.match(mainHelp.stdout, /\n {2}trigger <type> +Have the running sandbox deliver events of this type now/)
})

t.test('trigger delivers the chosen events now, once, and prints what the endpoint answered', async (t) => {
  const env = { XDG_STATE_HOME: stateDir(t) }
  const bodies: Array<Array<{ event: string }>> = []
  // Refuses hard bounces with this library's error body (and text a terminal would act on).
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const events = JSON.parse(Buffer.concat(chunks).toString()) as Array<{ event: string }>
      bodies.push(events)
      if (events.some((e) => e.event === 'hard-bounced')) {
        res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ statusCode: 401, code: 'signature_invalid', error: 'Unauthorized', message: 'The signature does not verify\u001b[2J' }))
      } else {
        res.writeHead(204).end()
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`

  // No endpoint enrolled yet; once one is, the sandbox sends nothing by itself (--count 1 is spent
  // on the first delivery, which the test waits for).
  const sandbox = startCli(t, ['sandbox', '--count', '1', '--batch-size', '1', '--rate', '50'], env)
  await sandbox.waitFor(/Press Ctrl-C to stop\.\n/)
  const early = await runCli(['trigger', 'delivered'], env)
  t.equal(early.code, 1)
  t.match(early.stderr, /^mailchannels-webhooks trigger: The sandbox has no endpoint enrolled to deliver to\.\n {2}Enroll your endpoint first: mailchannels-webhooks enroll <url> --sandbox\n$/)
  t.equal((await runCli(['enroll', endpoint, '--sandbox'], env)).code, 0)
  await sandbox.waitFor(/\nSent 1 event; the API still serves/)
  const before = bodies.length

  const ok = await runCli(['trigger', 'delivered'], env)
  t.equal(ok.code, 0, ok.stderr)
  t.match(ok.stdout, new RegExp(`^batch 2: 1 delivered event to ${endpoint.replace(/\./g, '\\.')}: 204 accepted \\(\\d+ ms\\)\\n$`))
  t.same(bodies.slice(before).map((b) => b.map((e) => e.event)), [['delivered']], 'one delivery of one delivered event')

  const refused = await runCli(['trigger', 'hard-bounced', '--count', '3'], env)
  t.equal(refused.code, 1)
  t.equal(refused.stdout.split('\n')[0]!.replace(/\(\d+ ms\)/, '(N ms)'), `batch 3: 3 hard-bounced events to ${endpoint}: 401 rejected (N ms)`)
  t.match(refused.stdout, '\n  signature_invalid: The signature does not verify\\x1b[2J\nFix the receiver, then deliver the batch again: mailchannels-webhooks resend 3 --sandbox\n')
  t.notMatch(refused.stdout, /\u001b/)
  t.same(bodies.slice(before + 1).map((b) => b.map((e) => e.event)), [['hard-bounced', 'hard-bounced', 'hard-bounced']], 'one attempt: not retried')
  await sandbox.waitFor(/\nbatch 3 +attempt 1 +401 rejected +3 events +\d+ ms {2}signature_invalid: The signature does not verify\\x1b\[2J\n/)

  const json = await runCli(['trigger', 'open', '--json'], env)
  t.equal(json.code, 0, json.stderr)
  t.match(JSON.parse(json.stdout), { data: { batchId: 4, eventType: 'open', eventCount: 1, webhook: endpoint, statusCode: 204, durationMs: Number, answer: null }, error: null })
  t.equal(await sandbox.interrupt(), 0)
})
