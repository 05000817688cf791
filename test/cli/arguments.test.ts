import t from 'tap'
import { main } from '../../src/cli.js'
import { ensureBuilt, inParallel, runCli, stateDir } from './helpers/cli.js'

// What the user typed is checked before MAILCHANNELS_API_KEY: a wrong argument is named as
// such, with or without a key (the built CLI). And every help text aligns its columns.

ensureBuilt()

t.test('arguments are checked before the API key: the argument is named, not the missing key', async (t) => {
  const env = { XDG_STATE_HOME: stateDir(t) }
  const cases: Array<[string[], RegExp]> = [
    [['enroll', 'ftp://x'], /^mailchannels-webhooks enroll: The endpoint <url> must use https:/],
    [['enroll', 'https://user:pw@example.com/h'], /^mailchannels-webhooks enroll: The endpoint <url> must not contain credentials/],
    [['batches', '--status', '6xx'], /^mailchannels-webhooks batches: --status: Invalid status filter provided/],
    [['batches', '--base-url', 'ftp://api.example'], /^mailchannels-webhooks batches: --base-url must use https:/],
    [['list', '--base-url', 'http://api.example'], /^mailchannels-webhooks list: --base-url must use https:/],
    [['validate', '--request-id', 'x'.repeat(29)], /^mailchannels-webhooks validate: The --request-id must be a string of 1 to 28 characters/],
    [['resend', '1', '--customer-handle', 'a b'], /^mailchannels-webhooks resend: The --customer-handle value must be 1 to 255 printable ASCII characters/],
    [['reconcile', '--status', '2xx', '--yes'], /^mailchannels-webhooks reconcile: statuses must not include '2xx'/],
    [['reconcile', '--concurrency', '99', '--yes'], /^mailchannels-webhooks reconcile: concurrency must be an integer from 1 to 16/],
    [['list', '--sandbox-port', '0'], /^mailchannels-webhooks list: --sandbox-port must be an integer from 1 to 65535, got '0'\./],
  ]
  // Without a key every time; with one for the first two (the same check, the same message).
  const keys = (i: number): Array<Record<string, string>> => (i < 2 ? [{}, { MAILCHANNELS_API_KEY: 'a-key-that-is-never-used' }] : [{}])
  const runs = cases.flatMap(([args, message], i) => keys(i).map((key) => ({ args, message, key })))
  // None sends a request or changes anything: side by side, with the keyless one.
  const [keyless, ...results] = await inParallel([
    () => runCli(['enroll', 'https://example.com/h'], env),
    ...runs.map(({ args, key }) => () => runCli(args, { ...env, ...key })),
  ])
  for (const [i, { args, message, key }] of runs.entries()) {
    const run = results[i]!
    const what = `${args.join(' ')}${'MAILCHANNELS_API_KEY' in key ? ' (with a key)' : ''}`
    t.equal(run.code, 2, `${what}: exit 2`)
    t.match(run.stderr, message, what)
    t.notMatch(run.stderr, /MAILCHANNELS_API_KEY/, `${what}: not about the key`)
    t.match(run.stderr, /Run 'mailchannels-webhooks [a-z-]+ --help' for the usage\.\n$/)
  }
  // With the arguments right, the missing key is what is said.
  t.equal(keyless.code, 2)
  t.match(keyless.stderr, /^mailchannels-webhooks enroll: MAILCHANNELS_API_KEY is not set\./)
})

async function helpOf (args: string[], env: Record<string, string>): Promise<{ code: number, stdout: string }> {
  let stdout = ''
  const code = await main(args, { out: (line) => { stdout += `${line}\n` }, err: () => {}, env })
  return { code, stdout }
}

/** The column where each row's text starts, in a block of `  <name>  <text>` rows and their continuation lines. */
function columns (block: string[]): number[] {
  return block.map((line) => {
    const row = /^ {2}(\S+(?: \S+)*?) {2,}(?=\S)/.exec(line)
    if (row !== null && !/^ {3}/.test(line)) return row[0].length
    return /^ +/.exec(line)![0].length
  })
}

/** The blocks of rows in a help text: the lines after a line ending in ':' up to a blank line. */
function blocks (help: string): Array<{ title: string, lines: string[] }> {
  const out: Array<{ title: string, lines: string[] }> = []
  const lines = help.split('\n')
  for (let i = 0; i < lines.length; i++) {
    if (!/^(Options|Operate the webhook.*|Local sandbox.*):$/.test(lines[i]!)) continue
    const block: string[] = []
    for (let j = i + 1; j < lines.length && lines[j] !== ''; j++) block.push(lines[j]!)
    out.push({ title: lines[i]!, lines: block })
  }
  return out
}

t.test('every help text aligns its columns: each option\'s text, and its further lines, start at one column', async (t) => {
  const env = { XDG_STATE_HOME: stateDir(t) }
  const commands = ['enroll', 'list', 'delete', 'validate', 'batches', 'resend', 'reconcile', 'sandbox', 'trigger', 'rotate-key', 'inspect']
  // The texts are the program's own: read in-process (main() with a buffer), not by 12 child processes.
  for (const command of [null, ...commands]) {
    const run = await helpOf(command === null ? ['--help'] : [command, '--help'], env)
    t.equal(run.code, 0, `${command ?? 'main'} --help`)
    const found = blocks(run.stdout)
    t.ok(found.length > 0, `${command ?? 'main'}: has an options block`)
    const all = found.flatMap((b) => columns(b.lines))
    t.same([...new Set(all)], [all[0]], `${command ?? 'main'} --help: one text column (${found.map((b) => b.title).join(' ')})`)
    // The state file's path (under the test's temporary directory) aside.
    for (const line of run.stdout.split('\n').filter((l) => !l.includes(env.XDG_STATE_HOME))) t.ok(line.length <= 90, `${command ?? 'main'}: a line fits a terminal (${line.length}): ${line}`)
  }
})
