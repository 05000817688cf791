// Text from outside (an API answer, a delivery, a file) made safe to print on a terminal. The
// one filter of every human-readable line the CLI, the sandbox and the inspector write. It
// imports nothing: anything may use it.
//
// A terminal acts on control characters: ESC starts sequences that clear the screen, move the
// cursor or write the clipboard (OSC 52), CR returns to the line start so later text prints
// over earlier text, U+009B is a one-character CSI on terminals that take C1 controls. Bidi
// controls reorder what is shown (U+202E shows "exe.txt" as "txt.exe"), and zero-width
// characters hide text. Each is shown as a visible escape instead: `\x1b`, `\r`, `\u202e`.
// See https://invisible-island.net/xterm/ctlseqs/ctlseqs.html and
// https://www.unicode.org/reports/tr9/ (bidi controls).

// C0 controls, DEL, C1 controls; zero-width and direction marks (U+200B-U+200F), the line and
// paragraph separators (U+2028, U+2029), bidi embeddings and overrides (U+202A-U+202E), bidi
// isolates (U+2066-U+2069), the Arabic letter mark (U+061C), the byte order mark (U+FEFF).
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g
// The same, but keeping the line feed: for text of several lines the program composed itself.
// eslint-disable-next-line no-control-regex
const UNSAFE_BUT_LF = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g

// What JSON.stringify leaves raw of the above (it escapes C0 itself).
const JSON_UNSAFE = /[\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g

const NAMED: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/** The visible escape of one unsafe character: `\n`, `\r`, `\t`, `\xHH` below U+0100, `\uHHHH` above. */
function escape (ch: string): string {
  const named = NAMED[ch]
  if (named !== undefined) return named
  const code = ch.charCodeAt(0)
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`
}

/**
 * One value from outside, for a terminal: every control, bidi and invisible formatting
 * character (the line feed included) replaced by its visible escape. Printable text, other
 * Unicode and the backslash are kept as they are.
 */
export function terminalText (text: string): string {
  return text.replace(UNSAFE, escape)
}

/**
 * Text of several lines the program composed (values from outside already passed through
 * `terminalText`), for a terminal: as `terminalText`, but line feeds are kept.
 */
export function terminalOutput (text: string): string {
  return text.replace(UNSAFE_BUT_LF, escape)
}

/**
 * One value from outside shown on a single line (an error body, the start of an answer): runs
 * of tabs and line ends (LF, CRLF) become one space, every other unsafe character its visible
 * escape (a lone CR included: it would print over the line), and the ends are trimmed.
 */
export function terminalLine (text: string): string {
  return terminalText(text.replace(/(?:\r\n|[\t\n])+/g, ' ').trim())
}

/**
 * JSON text made safe for a terminal and still exact JSON: the characters `JSON.stringify`
 * leaves raw (DEL, C1, bidi and invisible formatting; it already escapes C0) are written as
 * `\uXXXX` escapes, which parse back to the same string. Outside strings JSON text has none of
 * them.
 */
export function terminalJson (json: string): string {
  return json.replace(JSON_UNSAFE, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`)
}
