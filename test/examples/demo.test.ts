import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { startExample } from './helpers/run-example.js'

// `npm start` runs `tsx examples/demo.ts`; this is the same program.
t.test('the demo runs with no configuration, stops by itself (DEMO_DURATION_MS) and exits 0', async (t) => {
  const run = startExample(t, 'demo.ts', { DEMO_DURATION_MS: '5000' })
  // Use the printed curl while it runs, as a new user would.
  while (!/batches: {3}curl /.test(run.stdout()) && run.child.exitCode === null) await sleep(20)
  const [, token, url] = /curl -H 'Authorization: Bearer ([0-9a-f]+)' '([^']+)'/.exec(run.stdout()) ?? []
  t.ok(token !== undefined && url !== undefined, 'the curl for the batches route is printed')
  const denied = await fetch(url!)
  t.equal(denied.status, 401, 'the batches route needs the token')
  const listed = await fetch(url!, { headers: { authorization: `Bearer ${token}` } })
  t.equal(listed.status, 200)
  t.same(Object.keys(await listed.json() as object).sort(), ['data', 'pagination'])

  t.equal(await run.exited, 0, run.stderr())
  const out = run.stdout()
  t.match(out, /INFO: verified processed {4}\S+@\S+/)
  t.match(out, /INFO: verified click {8}\S+ -> https:\/\//)
  t.match(out, /reason: "digest_mismatch"/, 'the tampered 5th delivery is rejected and logged')
  t.match(out, /INFO: summary: received (\d+), verified (\d+) \(\d+ events\), rejected 1 \(digest_mismatch: 1\)/)
  t.match(out, /\ndemo stopped\n$/)
  t.notMatch(run.stderr(), /Warning|Error/, 'no warnings or errors on stderr')
})

t.test('Ctrl-C (SIGINT) stops the demo cleanly with exit code 0', async (t) => {
  const run = startExample(t, 'demo.ts')
  while (!/INFO: verified /.test(run.stdout()) && run.child.exitCode === null) await sleep(20)
  run.child.kill('SIGINT')
  t.equal(await run.exited, 0, run.stderr())
  t.match(run.stdout(), /INFO: summary: received \d+, verified \d+/)
  t.match(run.stdout(), /\ndemo stopped\n$/)
})
