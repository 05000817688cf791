// The inspector's "Copy as cURL": the command, run by a POSIX shell (dash, Debian's /bin/sh, and
// bash), sends the same header lines and body bytes to a loopback receiver. Bodies and headers
// carry what breaks naive quoting: quotes, $, backticks, newlines, tabs, carriage returns,
// non-ASCII, bytes that are not UTF-8, a NUL, a leading dash, printf's own % and \.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { curlCommand, type HeaderLine } from '../../src/testing/inspector/describe.js'
import { recorder } from './helpers.js'

const run = promisify(execFile)

/** Header lines as name/value pairs, names lower-cased, without the ones curl writes from the URL and body. */
const lines = (raw: readonly string[]): string[] => {
  const out: string[] = []
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase()
    if (name !== 'host' && name !== 'content-length') out.push(`${name}: ${raw[i + 1]!}`)
  }
  return out.sort()
}

const HOSTILE = `it's "quoted" $HOME $(touch /tmp/pwned-by-curl-copy) \`id\` \\n %s %% \\ ; & | > < * ? ~ #!`
const cases: Array<{ name: string, headers: HeaderLine[], body: Buffer }> = [
  {
    name: 'a signed JSON delivery with shell metacharacters, newlines and non-ASCII',
    headers: [['Content-Type', 'application/json'], ['Content-Digest', 'sha-256=:AAA=:'], ['Signature-Input', 'sig_123=("content-digest");created=1;alg="ed25519";keyid="k"'], ['Signature', 'sig_123=:ZZZ=:'], ['Host', '127.0.0.1:1'], ['Content-Length', '999'], ['Connection', 'keep-alive']],
    body: Buffer.from(JSON.stringify([{ event: 'delivered', email: HOSTILE, recipients: ['zoë@exämple.net', '名前@例え.jp'] }], null, 2) + '\n\n', 'utf8'),
  },
  {
    name: 'control characters, a carriage return, a tab, a NUL and bytes that are not UTF-8',
    headers: [['content-type', 'application/octet-stream'], ['X-Note', HOSTILE], ['X-Latin1', 'caf\u00e9'], ['X-Empty', ''], ['User-Agent', 'MailChannels/1']],
    body: Buffer.concat([Buffer.from('-n line\r\n\ttab \u001b[31m red\u0007', 'utf8'), Buffer.from([0x00, 0xff, 0xfe, 0xc3, 0x28, 0x25, 0x5c]), Buffer.from(HOSTILE)]),
  },
  { name: 'a body starting with a dash', headers: [['Content-Type', 'text/plain']], body: Buffer.from('-e \\c %b', 'utf8') },
  { name: 'an empty body, no headers at all', headers: [], body: Buffer.alloc(0) },
]

for (const shell of ['/bin/sh', '/bin/bash']) {
  for (const c of cases) {
    t.test(`${shell}: ${c.name}`, async (t) => {
      const { origin, got } = await recorder(t)
      const command = curlCommand(`${origin}/webhooks/mailchannels?x=[1]`, c.headers, c.body)
      await run(shell, ['-c', `${command}\n`], { timeout: 10_000, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: '/nonexistent' } })
      t.equal(got.length, 1, 'one request')
      t.equal(got[0]!.method, 'POST')
      t.equal(got[0]!.url, '/webhooks/mailchannels?x=[1]', 'the path as given (no globbing)')
      t.ok(got[0]!.body.equals(c.body), 'the same body bytes')
      const expected = lines(c.headers.flatMap(([n, v]) => [n, v])).filter((l) => !l.startsWith('connection:'))
      t.same(lines(got[0]!.rawHeaders), expected, 'the same header lines, and no others')
      const host = got[0]!.rawHeaders[got[0]!.rawHeaders.findIndex((h) => h.toLowerCase() === 'host') + 1]
      t.equal(host, new URL(origin).host, 'Host comes from the URL, not from the copy')
    })
  }
}

t.test('what a terminal would act on when pasted is escaped; readable text stays readable', async (t) => {
  const json = curlCommand('http://127.0.0.1:1/', [['Content-Type', 'application/json']], Buffer.from('[{"email":"zoë@example.net"}]'))
  t.match(json, `printf '%s' '[{"email":"zoë@example.net"}]' |`, 'UTF-8 text stays as it is')
  const control = curlCommand('http://127.0.0.1:1/', [['X-A', 'a\tb']], Buffer.from('a\rb\u001b'))
  t.notMatch(control, /[\r\t\u001b]/, 'no carriage return, tab or escape in the command itself')
  t.match(control, "printf 'a\\015b\\033'")
  t.match(control, `-H "$(printf 'X-A: a\\011b')"`)
})
