import t from 'tap'
import { citesOnlyOpenable } from '../helpers/openable.js'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { startExample } from './helpers/run-example.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const ANSI = /\u001b\[/
// Each test starts a demo of its own (a free port each), and most of their time is the demo's
// own pace: the three run side by side.
t.jobs = 3

// `npm start` runs `tsx examples/demo.ts`; this is the same program.
t.test('the demo: a header, one line per delivery with its verdict, a summary; exits 0 by itself', async (t) => {
  const run = startExample(t, 'demo.ts', { DEMO_DURATION_MS: '2500' })
  // Use the printed curl while it runs, as a new user would.
  while (!/batches {3}curl /.test(run.stdout()) && run.child.exitCode === null) await sleep(20)
  const [, token, url] = /curl -H 'Authorization: Bearer ([0-9a-f]+)' '([^']+)'/.exec(run.stdout()) ?? []
  t.ok(token !== undefined && url !== undefined, 'the curl for the batches route is printed')
  const denied = await fetch(url!)
  t.equal(denied.status, 401, 'the batches route needs the token')
  const listed = await fetch(url!, { headers: { authorization: `Bearer ${token}` } })
  t.equal(listed.status, 200)
  t.same(Object.keys(await listed.json() as object).sort(), ['data', 'pagination'])

  t.equal(await run.exited, 0, run.stderr())
  const out = run.stdout()
  t.notMatch(out, ANSI, 'no colour through a pipe')

  // The header says what is about to happen, before anything happens.
  const header = out.slice(0, out.indexOf('\nbatch 1 '))
  t.match(header, /MailChannels webhooks demo/)
  t.match(header, /three genuine deliveries: accepted/)
  t.match(header, /tampered with on purpose .*: rejected/)
  t.match(header, /exact copy .*: answered as a duplicate/)
  t.match(header, /fails once: the delivery is retried, signed afresh, and accepted/)
  t.match(header, /until you press Ctrl-C/)

  // One line per delivery (a retry is a second request of the same batch), never one per event.
  const lines = out.split('\n').filter((l) => l.startsWith('batch '))
  t.match(lines[0], /^batch 1 +accepted +204 +4 events: processed, delivered, open, click$/)
  t.match(lines[1], /^batch 2 +accepted +204 +4 events: hard-bounced, soft-bounced, dropped, complained$/)
  t.match(lines[2], /^batch 3 +accepted +204 +4 events: unsubscribed, test, processed, delivered$/)
  t.match(lines[3], /^batch 4 +rejected +401 +digest_mismatch \(tampered on purpose: the body was changed after signing.*\); the handler did not run$/)
  t.match(lines[4], /^batch 5 +duplicate +200 +an exact copy of batch 3, sent again: already handled, so the handler did not run$/)
  t.match(lines[5], /^batch 6 +failed +503 +the handler failed \(on purpose\); MailChannels retries in 0\.5 s$/)
  t.match(lines[6], /^batch 6 +accepted +204 +4 events: .*\(attempt 2: signed afresh, so not a duplicate\)$/)
  t.ok(lines.length >= 8, 'then genuine deliveries until it stops')
  for (const line of lines.slice(7)) t.match(line, /^batch \d+ +accepted +204 +4 events: /)
  t.equal(out.split('\n').filter((l) => /^\s*(INFO|verified|click|open)\b/.test(l)).length, 0, 'no line per event')

  const deliveries = new Set(lines.map((l) => l.split(/ +/)[1])).size
  const accepted = lines.filter((l) => / accepted /.test(l)).length
  t.match(out, new RegExp(`\\nsummary: ${deliveries} deliveries in ${lines.length} requests: ${accepted} accepted \\(${accepted * 4} events handled\\), ` +
    '1 rejected \\(digest_mismatch: 1\\), 1 duplicate refused, 1 failed in the handler and retried\\n'))
  t.match(out, /\ndemo stopped\n$/)
  citesOnlyOpenable(t, out, 'the demo')
  t.equal(run.stderr(), '', 'nothing on stderr')
})

t.test('Ctrl-C (SIGINT) stops the demo cleanly with exit code 0', async (t) => {
  const run = startExample(t, 'demo.ts')
  while (!/\nbatch 2 /.test(run.stdout()) && run.child.exitCode === null) await sleep(20)
  run.child.kill('SIGINT')
  t.equal(await run.exited, 0, run.stderr())
  t.match(run.stdout(), /\nsummary: \d+ deliveries in \d+ requests: \d+ accepted/)
  t.match(run.stdout(), /\ndemo stopped\n$/)
})

// Ctrl-C in a terminal signals the whole foreground process group: npm, the shell it runs the
// script in, tsx and the demo. The user must see a clean stop, not npm's error banner.
t.test('npm start, then Ctrl-C: exit code 0 and no npm error', async (t) => {
  // As a user runs it: without the test runner's NODE_OPTIONS (its process-tracking import
  // installs signal handlers of its own in npm and tsx).
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TAP') && !k.startsWith('_TAPJS')))
  const child = spawn('npm', ['start'], { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...env, NODE_OPTIONS: '', NO_COLOR: '1' } })
  const group = child.pid!
  const killer = setTimeout(() => { try { process.kill(-group, 'SIGKILL') } catch {} }, 60_000)
  t.teardown(() => {
    clearTimeout(killer)
    try { process.kill(-group, 'SIGKILL') } catch {}
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.on('exit', (code, signal) => resolve([code, signal])))
  while (!/\nbatch 1 /.test(stdout) && child.exitCode === null) await sleep(20)
  process.kill(-group, 'SIGINT')
  const [code, signal] = await exited
  // npm forwards the Ctrl-C to the script and waits for it; when the demo has already exited by the
  // time npm's own copy of the signal is handled, npm's signal listener is gone and npm ends by
  // that SIGINT (silently, as any program stopped by Ctrl-C). Either way: no error, no banner.
  t.ok((code === 0 && signal === null) || (code === null && signal === 'SIGINT'), `npm exits 0 or is stopped by the Ctrl-C itself (${code}, ${signal})`)
  t.notMatch(stderr, /npm (error|ERR!)/, 'no npm error banner')
  t.match(stdout, /\ndemo stopped\n/)
})
