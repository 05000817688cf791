import t from 'tap'
import { TERMINAL_MAX_LENGTH, TERMINAL_MAX_RUN, terminalJson, terminalLine, terminalOutput, terminalText } from '../../src/terminal-text.js'
import { filteredIo, oneLine, table, TABLE_MAX_WIDTH } from '../../src/cli/io.js'
import { main } from '../../src/cli.js'

// The one terminal filter (src/terminal-text.ts), code point by code point over all of Unicode:
// what a terminal acts on or does not show is a visible escape, everything else is kept; JSON
// stays exact JSON; long values are shortened with a marker.
//
// What counts as visible is derived here from the runtime's own Unicode data, the other way
// round from the filter: a code point is kept exactly when its general category is a letter,
// mark, number, punctuation, symbol or space separator (every code point has exactly one
// category) and it is not Default_Ignorable_Code_Point. Node 20, 22 and 24 ship different
// Unicode versions (code points assigned in a newer one are Cn, unassigned, in an older one),
// so nothing below hard-codes a version: only characters assigned for decades are named.

const VISIBLE = /^[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]$/u
const IGNORABLE = /^\p{Default_Ignorable_Code_Point}$/u
const isShown = (ch: string): boolean => VISIBLE.test(ch) && !IGNORABLE.test(ch)

/** Any code point that must not reach a terminal raw, the line feed aside. */
const RAW = /(?!\n)[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]|\p{Default_Ignorable_Code_Point}/u

/** Reads the filter's escapes back (for text without a backslash of its own). */
function unescape (text: string): string {
  return text.replace(/\\(?:x([0-9a-f]{2})|u\{([0-9a-f]{5,6})\}|u([0-9a-f]{4})|([nrt]))/g, (_m, x?: string, big?: string, u?: string, named?: string) => {
    if (named !== undefined) return ({ n: '\n', r: '\r', t: '\t' } as Record<string, string>)[named]!
    return String.fromCodePoint(parseInt(x ?? big ?? u!, 16))
  })
}

/** The escape the filter writes for one code point, in JavaScript's string-literal syntax. */
function expectedEscape (c: number): string {
  if (c === 0x0a) return '\\n'
  if (c === 0x0d) return '\\r'
  if (c === 0x09) return '\\t'
  if (c < 0x100) return `\\x${c.toString(16).padStart(2, '0')}`
  return c <= 0xffff ? `\\u${c.toString(16).padStart(4, '0')}` : `\\u{${c.toString(16)}}`
}

// Each code point alone (a surrogate half too: a string of one lone surrogate).
const ALL: string[] = []
for (let c = 0; c <= 0x10ffff; c++) ALL.push(String.fromCodePoint(c))

t.test('every code point from U+0000 to U+10FFFF: escaped exactly when it is not shown, kept as it is otherwise', async (t) => {
  const wrong: string[] = []
  let escaped = 0
  for (let c = 0; c <= 0x10ffff; c++) {
    const ch = ALL[c]!
    const out = terminalText(ch)
    if (isShown(ch)) {
      if (out !== ch) wrong.push(`U+${c.toString(16)} changed to ${JSON.stringify(out)}`)
    } else {
      escaped++
      if (out !== expectedEscape(c)) wrong.push(`U+${c.toString(16)} -> ${JSON.stringify(out)}`)
    }
    if (terminalOutput(ch) !== (c === 0x0a ? ch : out)) wrong.push(`U+${c.toString(16)}: terminalOutput differs`)
    if (wrong.length > 20) break
  }
  t.same(wrong, [], 'no code point handled otherwise')
  // About 970,000 are unassigned, private use or surrogates; what is assigned and visible stays.
  t.ok(escaped > 900_000 && escaped < 1_000_000, `${escaped} code points escaped`)

  // Named with what the issue found: every one escaped whatever Unicode version the runtime has.
  const hidden = [
    0x00ad, 0x034f, 0x061c, 0x115f, 0x1160, 0x17b4, 0x17b5, 0x180b, 0x180e, 0x180f, 0x200b, 0x200d, 0x200e, 0x2028, 0x2029, 0x202e,
    0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x2066, 0x206f, 0x3164, 0xfe00, 0xfe0f, 0xfeff, 0xffa0, 0xfff9, 0xfffa, 0xfffb,
    0xe000, 0xf8ff, 0xfdd0, 0xfffe, 0xffff, 0x1bca0, 0x1d173, 0xe0001, 0xe0020, 0xe0041, 0xe007f, 0xe0100, 0xe01ef, 0xf0000, 0x10fffd,
  ]
  t.same(hidden.filter((c) => terminalText(String.fromCodePoint(c)) !== expectedEscape(c)).map((c) => c.toString(16)), [])
  // Ordinary text of many scripts, combining marks that are not default-ignorable, emoji and
  // their skin-tone modifiers, regional indicators, the no-break space: as they are.
  for (const text of ['café', 'Straße', 'Ж', 'אבג', 'عربي', '日本語', '한국어', 'ไทย', 'हिन्दी', 'e\u0301', 'a\u0308\u0323', '😀🚀', '👍\u{1f3fd}', '\u{1f1fa}\u{1f1f8}', 'a\u00a0b', '\u{10348}', '½ € ≠ ∑', '\\x1b']) {
    t.equal(terminalText(text), text, `${JSON.stringify(text)} kept`)
  }
})

t.test('strings: lone surrogates escaped, valid pairs kept, escapes read back to the original', async (t) => {
  t.equal(terminalText('a\ud800b\udfffc\ud83d\ude00d\ud83d'), 'a\\ud800b\\udfffc\ud83d\ude00d\\ud83d')
  t.equal(terminalText('\u001b[2J\u009b\u202e\r\n\t\u{e0063}\u{e0075}\u3164'), '\\x1b[2J\\x9b\\u202e\\r\\n\\t\\u{e0063}\\u{e0075}\\u3164')
  // An emoji presentation selector and a zero-width joiner are default-ignorable / format: shown escaped.
  t.equal(terminalText('❤\ufe0f 👩\u200d💻'), '❤\\ufe0f 👩\\u200d💻')
  // The planes in use at once (surrogate halves apart, so none pairs with the next; the sweep
  // above took every code point alone), through terminalOutput (the same escapes, the line feed
  // aside, never shortened): nothing unsafe is left, and the escapes read back to exactly the
  // original text.
  const every = [...ALL.slice(0, 0x30000), ...ALL.slice(0xe0000, 0xe1000)].filter((ch) => ch !== '\\').join('a')
  const out = terminalOutput(every.replace(/\n/g, ''))
  t.notMatch(out, RAW)
  t.ok(unescape(out) === every.replace(/\n/g, ''), 'reads back to the original')
  t.equal(terminalOutput('a\n\u001b[2Jb\r\u{e0041}'), 'a\n\\x1b[2Jb\\r\\u{e0041}', 'composed output keeps its line feeds only')
  t.equal(terminalLine('  Service\r\n\tUnavailable\rX\u2060\n'), 'Service Unavailable\\rX\\u2060', 'one line: line ends and tabs a space, a lone CR escaped')
})

t.test('JSON: every code point the filter escapes is a \\u escape; the text parses back to the very same value', async (t) => {
  const every = ALL.join('a')
  const value = { s: every, n: [1, 'x\u202ey\u{e0041}'], [`k\u{e0041}\u3164`]: 'v' }
  const text = terminalJson(JSON.stringify(value, null, 2))
  t.notMatch(text, RAW, 'nothing unsafe left raw (the line feeds between tokens aside)')
  t.ok(JSON.stringify(JSON.parse(text)) === JSON.stringify(value), 'parses back to the exact value')
  t.equal(terminalJson(JSON.stringify('\u{e0041}\u00ad\ud800')), '"\\udb40\\udc41\\u00ad\\ud800"')
  t.equal(terminalJson(JSON.stringify('x'.repeat(100_000))).length, 100_002, 'never shortened')
})

/** `text` cut into what is shown (escapes read back) and the counts of what each marker left out. */
function pieces (text: string): { shown: string[], left: number[] } {
  const parts = text.split(/…\(\+([\d,]+) chars?\)/)
  return { shown: parts.filter((_p, i) => i % 2 === 0).map(unescape), left: parts.filter((_p, i) => i % 2 === 1).map((n) => Number(n.replace(/,/g, ''))) }
}

t.test('long values: the start and a marker of how much is left out, never half an escape; --json and composed output in full', async (t) => {
  const url = `https://hooks.example.com/${'a'.repeat(100_000 - 26)}`
  const shown = terminalText(url)
  t.equal(shown, `${url.slice(0, TERMINAL_MAX_RUN)}…(+${(100_000 - TERMINAL_MAX_RUN).toLocaleString('en-US')} chars)`, 'its start and the count left out, with a thousands separator')
  t.equal(terminalLine(url), shown)
  t.equal(terminalOutput(url), url, 'composed output (a --json document) is never cut')
  t.equal(terminalText('short'), 'short')

  // A message quoting the URL: the URL shortened, what follows it kept.
  const message = `Stopped after 5 failed resends in a row: the endpoint ${url} still does not answer 2xx. Fix it, then run reconcile again.`
  t.match(terminalText(message), /^Stopped after 5 failed resends in a row: the endpoint https:\/\/hooks\.example\.com\/a+…\(\+\d{2},\d{3} chars\) still does not answer 2xx\. Fix it, then run reconcile again\.$/)
  // A message quoting the URL already shortened (as the client's messages do): not cut again.
  const quoted = `the endpoint ${shown} still does not answer 2xx`
  t.equal(terminalText(quoted), quoted)
  // Runs each short, the whole long: cut at the total.
  const spaced = 'word '.repeat(20_000)
  t.equal(terminalText(spaced), `${spaced.slice(0, TERMINAL_MAX_LENGTH)}…(+99,000 chars)`)
  t.equal(terminalText(spaced, 12), 'word word wo…(+99,988 chars)')
  // Several long runs, each shortened on its own, in code points (an astral one is one, an escape one).
  const value = `${'a'.repeat(600)} ${'😀'.repeat(600)} ${'\u{e0041}'.repeat(600)} ok`
  const runs = pieces(terminalText(value, 10_000))
  t.same(runs.shown, ['a'.repeat(500), ` ${'😀'.repeat(500)}`, ` ${'\u{e0041}'.repeat(500)}`, ' ok'])
  t.same(runs.left, [100, 100, 100])
  t.equal(terminalText('😀'.repeat(500)), '😀'.repeat(500), 'a run of exactly TERMINAL_MAX_RUN code points is kept')
  t.equal(terminalText('😀'.repeat(501)), `${'😀'.repeat(500)}…(+1 char)`)

  // Whatever the limit, what is shown is the value's start, of `max` whole code points (each
  // whole escape one), and the count is right.
  const hostile = `a\u{e0041}b😀\u001b\u3164 ${'é\u{e0063}'.repeat(30)}\ud800`
  const total = [...hostile].length
  for (let max = 0; max <= total + 1; max++) {
    const { shown, left } = pieces(terminalText(hostile, max))
    t.equal(shown.join(''), hostile.slice(0, [...hostile].slice(0, max).join('').length), `max ${max}: the value's first ${max} code points`)
    t.same(left, max >= total ? [] : [total - max], `max ${max}: the count`)
  }
})

t.test('oneLine cuts to the length given, never inside an escape', async (t) => {
  for (let n = 0; n < 12; n++) {
    const out = oneLine(`${'a'.repeat(n)}\u001b\u202e\u{e0041}${'b'.repeat(40)}`, 20)
    t.ok(out.length <= 20, `${JSON.stringify(out)} fits`)
    t.match(out, /^a*(\\x1b)?(\\u202e)?(\\u\{e0041\})?b*\.\.\.$/, `${JSON.stringify(out)}: whole escapes only`)
  }
  t.equal(oneLine('ok\r\n', 20), 'ok')
})

t.test('table: a long value pushes its own row only, not every row of the table', async (t) => {
  const long = terminalText(`https://hooks.example.com/${'x'.repeat(100_000)}`)
  t.same(table([['failed', long, 'nope'], ['passed', 'https://ok.example/h', 'ok']]), [
    `failed  ${long}  nope`,
    `passed  ${'https://ok.example/h'.padEnd(TABLE_MAX_WIDTH)}  ok`,
  ])
  t.same(table([['1', 'a'], ['22', 'bb']], new Set([0])), [' 1  a', '22  bb'])
})

t.test('filteredIo: every line written is filtered, the CLI\'s own colours kept', async (t) => {
  const lines: string[] = []
  const io = filteredIo({ out: (line) => lines.push(line), err: (text) => lines.push(text) })
  io.out('\u001b[32mok\u001b[0m https://x/\u{e0063}\u{e0075}\u3164\u00ad\u2064\ufff9\ufe0f')
  io.err('\u001b]52;c;eA==\u0007\u034f\n')
  t.same(lines, ['\u001b[32mok\u001b[0m https://x/\\u{e0063}\\u{e0075}\\u3164\\xad\\u2064\\ufff9\\ufe0f', '\\x1b]52;c;eA==\\x07\\u034f\n'])
})

t.test('main() filters whatever a command writes: an error message with control characters', async (t) => {
  let stderr = ''
  const code = await main(['list', '--base-url', 'http://127.0.0.1:1'], { out: () => {}, err: (text) => { stderr += text }, env: { MAILCHANNELS_API_KEY: 'k\u001b[2J' } })
  t.equal(code, 2)
  t.notMatch(stderr, /\u001b/)
  const unknown = await main(['frob\u001b]52;c;eA==\u0007\u{e0041}'], { out: () => {}, err: (text) => { stderr = text }, env: {} })
  t.equal(unknown, 2)
  t.match(stderr, /^mailchannels-webhooks: unknown command 'frob\\x1b\]52;c;eA==\\x07\\u\{e0041\}'\./)
})
