import t from 'tap'
import { terminalJson, terminalLine, terminalOutput, terminalText } from '../../src/terminal-text.js'
import { oneLine } from '../../src/cli/io.js'
import { main } from '../../src/cli.js'

// The one terminal filter (src/terminal-text.ts), code point by code point: what a terminal acts
// on or hides is shown as a visible escape, everything else is kept; JSON stays exact JSON.

const UNSAFE: number[] = []
for (let c = 0; c <= 0x1f; c++) UNSAFE.push(c)
for (let c = 0x7f; c <= 0x9f; c++) UNSAFE.push(c)
for (let c = 0x200b; c <= 0x200f; c++) UNSAFE.push(c)
for (let c = 0x202a; c <= 0x202e; c++) UNSAFE.push(c)
for (let c = 0x2066; c <= 0x2069; c++) UNSAFE.push(c)
UNSAFE.push(0x061c, 0x2028, 0x2029, 0xfeff)

t.test('every unsafe character becomes a visible escape; every other code unit is kept', async (t) => {
  const unsafe = new Set(UNSAFE)
  const wrong: string[] = []
  for (let c = 0; c <= 0xffff; c++) {
    const ch = String.fromCharCode(c)
    const out = terminalText(ch)
    if (unsafe.has(c)) {
      if (!/^\\(x[0-9a-f]{2}|u[0-9a-f]{4}|[nrt])$/.test(out)) wrong.push(`U+${c.toString(16)} -> ${JSON.stringify(out)}`)
    } else if (out !== ch) {
      wrong.push(`U+${c.toString(16)} changed`)
    }
  }
  t.same(wrong, [])
  t.equal(terminalText('\u001b[2J\u009b\u202e\r\n\t'), '\\x1b[2J\\x9b\\u202e\\r\\n\\t')
  t.equal(terminalText('café ☕ 日本 \\x1b'), 'café ☕ 日本 \\x1b', 'printable text and the backslash as they are')
  t.equal(terminalOutput('a\n\u001b[2Jb\r'), 'a\n\\x1b[2Jb\\r', 'composed output keeps its line feeds only')
  t.equal(terminalLine('  Service\r\n\tUnavailable\rX\n'), 'Service Unavailable\\rX', 'one line: line ends and tabs a space, a lone CR escaped')
})

t.test('JSON: the characters JSON.stringify leaves raw become \\u escapes; the text parses back to the same value', async (t) => {
  const value = { s: UNSAFE.map((c) => String.fromCharCode(c)).join('') + 'ok', n: [1, 'x\u202ey'] }
  const text = terminalJson(JSON.stringify(value, null, 2))
  t.same(JSON.parse(text), value)
  // eslint-disable-next-line no-control-regex
  t.notMatch(text, /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/)
})

t.test('oneLine cuts to the length given, never inside an escape', async (t) => {
  for (let n = 0; n < 12; n++) {
    const out = oneLine(`${'a'.repeat(n)}\u001b\u202e${'b'.repeat(40)}`, 20)
    t.ok(out.length <= 20, `${JSON.stringify(out)} fits`)
    t.match(out, /^a*(\\x1b)?(\\u202e)?b*\.\.\.$/, `${JSON.stringify(out)}: whole escapes only`)
  }
})

t.test('main() filters whatever a command writes: an error message with control characters', async (t) => {
  let stderr = ''
  const code = await main(['list', '--base-url', 'http://127.0.0.1:1'], { out: () => {}, err: (text) => { stderr += text }, env: { MAILCHANNELS_API_KEY: 'k\u001b[2J' } })
  t.equal(code, 2)
  t.notMatch(stderr, /\u001b/)
  const unknown = await main(['frob\u001b]52;c;eA==\u0007'], { out: () => {}, err: (text) => { stderr = text }, env: {} })
  t.equal(unknown, 2)
  t.match(stderr, /^mailchannels-webhooks: unknown command 'frob\\x1b\]52;c;eA==\\x07'\./)
})
