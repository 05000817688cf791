import t, { type Test } from 'tap'
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { FAKE_API_KEY, reply, sampleBatches, startFakeApi, type FakeApi } from '../helpers/fake-api.js'
import { closedPortUrl } from '../sandbox/helpers/receiver.js'
import { main } from '../../src/cli.js'
import { ANSI, ensureBuilt, inParallel, runCli, runCliOnTty, stateDir, type Run } from './helpers/cli.js'

// The operator commands of the built binary against the loopback fake API: output, --json,
// exit codes (0 success, 1 failed, 2 usage), the delete guard, reconcile's progress when not
// on a terminal (and on one), the state file, and the API key never printed. The long table of
// usage errors runs through the same `main` in this process (a process start each would cost
// seconds); a few of them go through the binary too.

ensureBuilt()
const dir = stateDir(t)
// Each test has a fake API of its own, in its initial state, and the state files its commands
// write have names of their own: four tests run side by side (most of their time is spent
// waiting on the CLI's child processes). The last test reads what all the others printed, so it
// is not buffered: tap starts it once those have ended.
t.jobs = 4

const outputs: Run[] = []
/** A fresh fake API for test `t`, and `mc`: runs the bin against it with the key in MAILCHANNELS_API_KEY. */
async function fakeApi (t: Test): Promise<{ api: FakeApi, mc: (...args: string[]) => Promise<Run> }> {
  const api = await startFakeApi()
  t.teardown(() => api.close())
  const mc = async (...args: string[]): Promise<Run> => {
    const run = await runCli([...args, '--base-url', api.url], { MAILCHANNELS_API_KEY: FAKE_API_KEY, XDG_STATE_HOME: dir })
    outputs.push(run)
    return run
  }
  return { api, mc }
}
const json = (run: Run): any => JSON.parse(run.stdout)
const WINDOW = ['--after', '2026-01-17', '--before', '2026-01-20']

t.test('enroll and list: plain output, --json, 409 with what to do', async (t) => {
  const { api, mc } = await fakeApi(t)
  const enrolled = await mc('enroll', 'https://hooks.example.com/mc')
  t.same(enrolled, { code: 0, stdout: 'enrolled https://hooks.example.com/mc\nCheck that it answers: mailchannels-webhooks validate\n', stderr: '' })
  t.same(api.webhooks, ['https://hooks.example.com/mc'])
  t.same(json(await mc('enroll', 'https://b.example/h', '--json')), { data: { endpoint: 'https://b.example/h' }, error: null })
  const again = await mc('enroll', 'https://hooks.example.com/mc')
  t.equal(again.code, 1)
  t.equal(again.stdout, '')
  t.match(again.stderr, /^mailchannels-webhooks enroll: Conflict\. A webhook endpoint is already enrolled for this account .*\n {2}See the enrolled endpoints with 'mailchannels-webhooks list'; 'mailchannels-webhooks delete --yes' removes every one\.\n$/)
  t.match(json(await mc('enroll', 'https://hooks.example.com/mc', '--json')), { data: null, error: { type: 'conflict_error', statusCode: 409 } })

  t.same(await mc('list'), { code: 0, stdout: 'https://hooks.example.com/mc\nhttps://b.example/h\n', stderr: '' })
  t.same(json(await mc('list', '--json')), { data: ['https://hooks.example.com/mc', 'https://b.example/h'], error: null })
  api.webhooks.length = 0
  t.match(await mc('list'), { code: 0, stdout: /^no endpoint enrolled \(enroll one with: mailchannels-webhooks enroll <url>\)\n$/ })
})

t.test('usage errors exit 2 with a message that says what to do, before any request', async (t) => {
  const { api, mc } = await fakeApi(t)
  const cases: Array<[string[], RegExp]> = [
    [['enroll'], /^mailchannels-webhooks enroll: missing <url>: mailchannels-webhooks enroll <url>\.\n/],
    [['enroll', 'http://example.com/h'], /^mailchannels-webhooks enroll: The endpoint <url> must use https: \(http: is accepted only for a loopback host/],
    [['enroll', 'a', 'b'], /unexpected argument 'b'\./],
    [['enroll', 'https://x.example/', '--api-key', 'sekrit'], /--api-key is not accepted: the API key is read from the MAILCHANNELS_API_KEY environment variable only, so it never lands in your shell history/],
    [['validate', '--request-id', 'x'.repeat(29)], /The --request-id must be a string of 1 to 28 characters/],
    [['batches', '--status', '6xx'], /--status: Invalid status filter provided/],
    [['batches', '--since', '3w'], /--since must be a duration of at most 31 days, e\.g\. 3d, 12h or 30m; got '3w'\./],
    [['batches', '--since', '40d'], /--since must be a duration of at most 31 days/],
    [['batches', '--since', '1d', '--after', '2026-01-01'], /give --since or --after, not both\./],
    [['batches', '--after', 'yesterday'], /--after must be a date: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ \(UTC\), got 'yesterday'\./],
    [['batches', '--limit', '0'], /--limit must be a positive integer\./],
    [['batches', '--after', '2026-01-01', '--before', '2026-03-01'], /The time range between --after and --before must not exceed 31 days/],
    [['resend'], /missing <batchId>\.\.\./],
    [['resend', '12', 'abc'], /'abc' is not a batch id: ids are positive integers, as 'mailchannels-webhooks batches' lists them\./],
    [['reconcile'], /reconcile resends batches: add --yes to confirm \(not on a terminal, it cannot ask\), or --dry-run to only list them\./],
    [['reconcile', '--yes', '--concurrency', '0'], /concurrency must be an integer from 1 to 16/],
    [['list', '--frobnicate'], /unknown option --frobnicate for 'list'\./],
    [['reconcile', '--dryrun'], /Did you mean --dry-run\?/],
  ]
  const inProcess = async (args: string[]): Promise<Run> => {
    let stdout = ''
    let stderr = ''
    const code = await main([...args, '--base-url', api.url], { out: (line) => { stdout += `${line}\n` }, err: (text) => { stderr += text }, env: { MAILCHANNELS_API_KEY: FAKE_API_KEY, XDG_STATE_HOME: dir } })
    const run = { code, stdout, stderr }
    outputs.push(run)
    return run
  }
  const viaBinary = new Set(['enroll', 'reconcile'].map((c) => cases.findIndex(([args]) => args[0] === c)))
  // The binary's runs side by side (none sends a request); `main` in this process one at a time.
  const binaryRuns = new Map(await inParallel([...viaBinary].map((i) => async () => [i, await mc(...cases[i]![0])] as const)))
  for (const [i, [args, message]] of cases.entries()) {
    const run = binaryRuns.get(i) ?? await inProcess(args)
    t.equal(run.code, 2, `${args.join(' ')}: exit 2`)
    t.match(run.stderr, message, args.join(' '))
    t.match(run.stderr, /\nRun 'mailchannels-webhooks [a-z-]+ --help' for the usage\.\n$/)
    t.equal(run.stdout, '')
  }
  t.equal(api.requests.length, 0, 'not one request')

  const [noKey, badKey, httpBase, both, noSandbox] = await inParallel([
    () => runCli(['list', '--base-url', api.url], { XDG_STATE_HOME: dir }),
    () => runCli(['list', '--base-url', api.url], { MAILCHANNELS_API_KEY: 'has space', XDG_STATE_HOME: dir }),
    () => runCli(['list', '--base-url', 'http://example.com'], { MAILCHANNELS_API_KEY: FAKE_API_KEY }),
    () => runCli(['list', '--sandbox', '--base-url', api.url], { XDG_STATE_HOME: dir }),
    () => runCli(['list', '--sandbox'], { XDG_STATE_HOME: dir }),
  ])
  t.equal(noKey.code, 2)
  t.match(noKey.stderr, /^mailchannels-webhooks list: MAILCHANNELS_API_KEY is not set\. Set it to your MailChannels API key \(export MAILCHANNELS_API_KEY=\.\.\.\), or use --sandbox with a running sandbox\.\n/)
  t.equal(badKey.code, 2)
  t.notMatch(badKey.stderr, 'has space', 'a bad key is not quoted')
  t.match(httpBase, { code: 2, stderr: /--base-url must use https: \(http: is accepted only for loopback hosts/ })
  t.match(both, { code: 2, stderr: /give --sandbox or --base-url, not both/ })
  t.match(noSandbox, { code: 1, stderr: /no running sandbox found \(.*sandbox\.json does not exist\)\. Start one with: mailchannels-webhooks sandbox/ })
  t.equal(api.requests.length, 0, 'not one request')
})

t.test('delete: refused without --yes (nothing removed), done with it', async (t) => {
  const { api, mc } = await fakeApi(t)
  api.webhooks.push('https://a.example/h', 'https://b.example/h')
  const guarded = await mc('delete')
  t.equal(guarded.code, 2)
  t.match(guarded.stderr, /^mailchannels-webhooks delete: this removes EVERY enrolled endpoint \(the API cannot remove just one\), and your receivers then get no events\. Run it again with --yes to confirm\.\n/)
  t.equal(api.requests.length, 0)
  t.same(api.webhooks, ['https://a.example/h', 'https://b.example/h'], 'still enrolled')
  t.same(await mc('delete', '--yes'), { code: 0, stdout: 'removed every enrolled endpoint; enroll one again with: mailchannels-webhooks enroll <url>\n', stderr: '' })
  t.same(api.webhooks, [])
  t.same(json(await mc('delete', '--yes', '--json')), { data: { deleted: true }, error: null })
})

t.test('validate: each endpoint with its status and the start of its answer; exit 0 only when all passed', async (t) => {
  const { api, mc } = await fakeApi(t)
  t.match(await mc('validate'), { code: 1, stderr: /Not found\. No webhook endpoint is enrolled.*\n {2}Enroll an endpoint first: mailchannels-webhooks enroll <url>\n$/ })
  api.webhooks.push('https://a.example/h')
  api.validateAnswers.set('https://a.example/h', { status: 200, body: '{"ok":true}' })
  t.same(await mc('validate', '--request-id', 'check-1'), { code: 0, stdout: 'passed  200  https://a.example/h  {"ok":true}\nall 1 endpoint answered 2xx\n', stderr: '' })
  t.same(JSON.parse(api.requests.at(-1)!.body), { request_id: 'check-1' })
  api.webhooks.push('https://b.example/h', 'https://c.example/h')
  api.validateAnswers.set('https://b.example/h', { status: 503, body: `Service\nUnavailable\u001b[31m ${'x'.repeat(100)}` })
  api.validateAnswers.set('https://c.example/h', null)
  const [failed, asJson] = await Promise.all([mc('validate'), mc('validate', '--json')])
  t.equal(failed.code, 1)
  const lines = failed.stdout.split('\n')
  t.match(lines[1], /^failed {2}503 {2}https:\/\/b\.example\/h {2}Service Unavailable\\x1b\[31m x+\.\.\.$/, 'one line: the line end a space, the escape character shown as \\x1b, cut')
  t.ok(lines[1]!.length < 120)
  t.match(lines[2], /^failed {2}--- {2}https:\/\/c\.example\/h {2}\(no answer\)$/)
  t.match(lines[3], /^2 of 3 endpoints did not answer 2xx: check that the receiver runs/)
  t.notMatch(failed.stdout, ANSI)
  t.equal(asJson.code, 1)
  t.match(json(asJson), { data: { allPassed: false, results: [{ result: 'passed' }, { result: 'failed', response: { status: 503 } }, { result: 'failed', response: null }] }, error: null })
})

t.test('batches: a table of every page, filters, --limit, --json', async (t) => {
  const { api, mc } = await fakeApi(t)
  const all = await mc('batches', ...WINDOW)
  t.equal(all.code, 0, all.stderr)
  const lines = all.stdout.trimEnd().split('\n')
  t.match(lines[0], /^ID +CREATED +STATUS +CODE +EVENTS +DURATION +ENDPOINT$/)
  t.match(lines[1], /^1000 +2026-01-18T00:00:00\.000Z +2xx +200 +1 +0 ms +https:\/\/hooks\.example\.com\/a$/)
  t.match(lines[2], /^1001 +2026-01-18T04:00:00\.000Z +4xx +404 +2 +10 ms +https:\/\/hooks\.example\.com\/b\?token=t$/)
  t.match(lines[4], /^1003 +2026-01-18T12:00:00\.000Z +no response +--- +4 +30 ms +/)
  t.equal(lines.length, 14, 'a header, 12 rows, a footer')
  t.equal(lines[13], '12 batches, 9 not delivered', 'one attempt each: no attempt count')
  t.equal(new URLSearchParams(api.requests[0]!.query).get('created_after'), '2026-01-17')

  const failed = await mc('batches', ...WINDOW, '--status', '5xx,no_response', '--webhook', 'https://hooks.example.com/a', '--limit', '2')
  t.equal(failed.code, 0)
  t.match(failed.stdout, /^ID .*\n1002 .* 5xx .*\n1006 .*\n2 batches, 2 not delivered \(--limit 2 reached\)\n$/)
  const q = new URLSearchParams(api.requests.at(-1)!.query)
  t.equal(q.get('statuses'), '5xx,no_response')
  t.equal(q.get('webhook'), 'https://hooks.example.com/a')
  t.equal(q.get('limit'), '2')

  // More than one page: 1,100 batches come back in three requests.
  api.batches = Array.from({ length: 1100 }, (_, i) => ({ ...sampleBatches()[1]!, batch_id: 5000 + i, created_at: new Date(Date.parse('2026-01-18T00:00:00Z') + i * 1000).toISOString() }))
  api.requests.length = 0
  const many = await mc('batches', ...WINDOW, '--json')
  t.equal(json(many).data.length, 1100)
  t.same(api.requests.map((r) => new URLSearchParams(r.query).get('offset')), ['0', '500', '1000'])
  api.batches = []
  t.match(await mc('batches', ...WINDOW), { code: 0, stdout: /^no batches match/ })
  const since = await mc('batches', '--since', '12h', '--json')
  t.same(json(since), { data: [], error: null })
  t.match(new URLSearchParams(api.requests.at(-1)!.query).get('created_after'), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/, '--since becomes a UTC date-time')
})

t.test('resend: one line per batch; exit 1 when one is not delivered or not found', async (t) => {
  const { api, mc } = await fakeApi(t)
  const ok = await mc('resend', '1001', '1002')
  t.same(ok, { code: 0, stdout: 'batch 1001: resent to https://hooks.example.com/b?token=t: the endpoint answered 200 (12 ms)\nbatch 1002: resent to https://hooks.example.com/a: the endpoint answered 200 (12 ms)\n', stderr: '' })
  t.equal(api.requests[0]!.headers['x-customer-handle'], undefined)
  await mc('resend', '1001', '--customer-handle', 'acme')
  t.equal(api.requests.at(-1)!.headers['x-customer-handle'], 'acme')
  api.resendAnswers.set(1002, 503)
  const mixed = await mc('resend', '1002', '999', '1003')
  t.equal(mixed.code, 1)
  t.match(mixed.stdout, /^batch 1002: resent to https:\/\/hooks\.example\.com\/a: the endpoint answered 503 \(12 ms\)\nbatch 1003: resent to .*: the endpoint answered 200 \(12 ms\)\n$/)
  t.match(mixed.stderr, /^batch 999: not resent: Not found\. No batch with this id exists for this account\. Batch not found\n {2}List failed batches with 'mailchannels-webhooks batches --status 4xx,5xx,no_response'/)
  t.match(mixed.stderr, /Some endpoints still do not answer 2xx: fix the receiver, then resend again\.\n$/)
  const asJson = await mc('resend', '1002', '999', '--json')
  t.equal(asJson.code, 1)
  t.match(json(asJson), { data: [{ batchId: 1002, resend: { statusCode: 503 }, error: null }, { batchId: 999, resend: null, error: { type: 'not_found' } }], error: null })
})

t.test('reconcile: dry run, then plain progress lines when not on a terminal, and a summary', async (t) => {
  const { api, mc } = await fakeApi(t)
  const dry = await mc('reconcile', ...WINDOW, '--dry-run')
  t.equal(dry.code, 0, dry.stderr)
  t.match(dry.stdout, /^ID +CREATED +STATUS +CODE +EVENTS +DURATION +ENDPOINT\n1001 /)
  t.match(dry.stdout, /\n9 failed batches would be resent \(created from 2026-01-17 to 2026-01-20\)\. Nothing was resent \(--dry-run\)\.\n$/)
  t.equal(api.requests.filter((r) => r.url.endsWith('/resend')).length, 0)

  // Both resend all nine (the fake keeps no record of what was resent): side by side.
  const [run, asJson] = await Promise.all([mc('reconcile', ...WINDOW, '--yes', '--rate', '100'), mc('reconcile', ...WINDOW, '--yes', '--rate', '100', '--json')])
  t.equal(run.code, 0, run.stderr)
  const lines = run.stdout.trimEnd().split('\n')
  t.equal(lines.length, 10)
  t.equal(lines[0], '[1/9] batch 1001 resent: the endpoint answered 200 (12 ms)')
  t.match(lines[8], /^\[9\/9\] batch 1011 resent: /)
  t.equal(lines[9], 'resent 9, failed 0, skipped 0 of 9 failed batches created from 2026-01-17 to 2026-01-20')
  t.notMatch(run.stdout, /\r|\u001b/, 'no bar, no escape codes: a pipe gets plain lines')
  t.equal(run.stderr, '')

  t.equal(asJson.code, 0)
  t.match(json(asJson), { data: { window: { createdAfter: '2026-01-17', createdBefore: '2026-01-20' }, summary: { total: 9, resent: 9, failed: 0, skipped: 0 }, stopped: null }, error: null })
  t.notMatch(asJson.stdout, /^\[/m, 'no progress lines with --json')
})

t.test('reconcile --state: a rerun skips what was resent, and retries what failed', async (t) => {
  const { api, mc } = await fakeApi(t)
  const file = path.join(dir, 'reconcile.json')
  api.resendAnswers.set(1005, 500)
  const first = await mc('reconcile', ...WINDOW, '--yes', '--rate', '100', '--state', file)
  t.equal(first.code, 1, 'one batch failed')
  t.match(first.stdout, /\[4\/9\] batch 1005 failed: the endpoint answered 500/)
  t.match(first.stdout, /\nresent 8, failed 1, skipped 0 of 9 failed batches /)
  t.match(first.stderr, new RegExp(`Run it again with --state ${file.replace(/[/.]/g, '\\$&')}: what was resent is skipped\\.\\n$`))
  const saved = JSON.parse(readFileSync(file, 'utf8')) as { resent: number[] }
  t.same(saved.resent, [1001, 1002, 1003, 1006, 1007, 1009, 1010, 1011], 'the state file lists what was resent')

  api.resendAnswers.clear()
  api.requests.length = 0
  const rerun = await mc('reconcile', ...WINDOW, '--yes', '--rate', '100', '--state', file)
  t.equal(rerun.code, 0, rerun.stderr)
  t.same(api.requests.filter((r) => r.url.endsWith('/resend')).map((r) => r.url), ['/tx/v1/webhook-batch/1005/resend'], 'only the one that failed')
  t.match(rerun.stdout, new RegExp(`^\\[1/9\\] batch 1001 skipped: already resent \\(in ${file.replace(/[/.]/g, '\\$&')}\\)\\n`))
  t.match(rerun.stdout, /\nresent 1, failed 0, skipped 8 of 9 failed batches/)
  t.same((JSON.parse(readFileSync(file, 'utf8')) as { resent: number[] }).resent.length, 9)

  writeFileSync(path.join(dir, 'other.json'), '{"something":"else"}')
  t.notOk(existsSync(path.join(dir, 'never.json')))
  const [other, never] = await Promise.all([mc('reconcile', '--yes', '--state', path.join(dir, 'other.json')), mc('reconcile', ...WINDOW, '--dry-run', '--state', path.join(dir, 'never.json'))])
  t.match(other, { code: 2, stderr: /other\.json is not a reconcile state file; give another --state file, or move this one away\./ })
  t.match(never, { code: 0 })
  t.notOk(existsSync(path.join(dir, 'never.json')), 'a dry run writes no state')
})

t.test('reconcile stops on 401 and says what to do; API and network failures exit 1', async (t) => {
  const { api, mc } = await fakeApi(t)
  api.always = (req, res) => ((req.url ?? '').endsWith('/resend') ? reply(401, { errors: ['bad key'] })(req, res) : api.answer(req, res))
  const stopped = await mc('reconcile', ...WINDOW, '--yes', '--rate', '100')
  t.equal(stopped.code, 1)
  t.equal(api.requests.filter((r) => r.url.endsWith('/resend')).length, 1)
  t.match(stopped.stdout, /^\[1\/9\] batch 1001 failed: Authorization required\. bad key\nresent 0, failed 1, skipped 0, not attempted 8 of 9 failed batches/, 'the batches never tried are "not attempted", not "skipped"')
  t.match(stopped.stderr, /^mailchannels-webhooks reconcile: Stopped: the API refused the API key \(HTTP 401\)\. Check MAILCHANNELS_API_KEY and its permissions, then run reconcile again\.\n/)
  api.always = null

  api.queue.push(reply(401, { errors: ['unknown key'] }))
  t.match(await mc('list'), { code: 1, stderr: /^mailchannels-webhooks list: Authorization required\. unknown key\n {2}The API refused the key \(HTTP 401\): check MAILCHANNELS_API_KEY and its permissions\.\n$/ })
  api.queue.push(reply(500, 'boom'), reply(500, 'boom'), reply(500, 'boom'))
  t.match(await mc('list'), { code: 1, stderr: /Internal server error\. boom\n {2}The MailChannels API failed: try again in a minute\.\n$/ })
  const down = await closedPortUrl()
  const unreachable = await runCli(['list', '--base-url', new URL(down).origin], { MAILCHANNELS_API_KEY: FAKE_API_KEY })
  t.match(unreachable, { code: 1, stderr: /\n {2}Could not reach http:\/\/127\.0\.0\.1:\d+: check your network \(or --base-url\), then try again\.\n$/ })
})

t.test('reconcile on a terminal: a progress bar rewritten in place', { skip: process.platform === 'linux' && spawnSync('script', ['--version']).status === 0 ? false : 'util-linux script is not available' }, async (t) => {
  const { api } = await fakeApi(t)
  const out = await runCliOnTty(['reconcile', ...WINDOW, '--yes', '--rate', '100', '--base-url', api.url], { MAILCHANNELS_API_KEY: FAKE_API_KEY, NO_COLOR: '1' })
  t.match(out, /\r\u001b\[K\[#{3}-{27}\] 1\/9 {2}resent 1 {2}failed 0 {2}skipped 0/)
  t.match(out, /\r\u001b\[K\[#{30}\] 9\/9 {2}resent 9/)
  t.match(out, /resent 9, failed 0, skipped 0 of 9 failed batches/)
  t.notMatch(out, /\[1\/9\] batch/, 'no per-batch lines for batches that went well')
})

t.test('the API key never appears in any output', { buffered: false }, async (t) => {
  t.ok(outputs.length > 40)
  for (const run of outputs) t.notMatch(run.stdout + run.stderr, FAKE_API_KEY)
})
