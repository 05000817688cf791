// Reads SQL text just enough to find statements that end or open a transaction (`BEGIN`,
// `COMMIT`, `ROLLBACK`...), so that the client the transactional inbox hands to handlers can refuse
// them before they reach the server. It splits a multi-statement text ('SELECT 1; COMMIT') at the
// semicolons outside strings, quoted identifiers, dollar quotes and comments, as PostgreSQL's lexer
// does (https://www.postgresql.org/docs/current/sql-syntax-lexical.html), and looks at each
// statement's first words. It is the first line only: the store also reads the transaction status
// the server reports after every statement, and checks, in the done-mark statement itself, that the
// transaction it opened is still the one open (index.ts).

/**
 * The transaction-control command in `text` that would end the surrounding transaction or open
 * another (`BEGIN`, `START TRANSACTION`, `COMMIT`, `END`, `ROLLBACK`, `ABORT`, `PREPARE
 * TRANSACTION`, `COMMIT PREPARED`, `ROLLBACK PREPARED`), upper-cased; `undefined` if there is none.
 * Savepoints (`SAVEPOINT`, `RELEASE [SAVEPOINT]`, `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT]`)
 * stay allowed: they nest inside the transaction without ending it.
 */
export function transactionControl (text: string): string | undefined {
  const n = text.length
  let i = 0
  while (i < n) {
    i = skipSpace(text, i)
    if (i >= n) return undefined
    const found = controlAt(text, i)
    if (found !== undefined) return found
    // Most statements are single: no semicolon, nothing more to read.
    if (text.indexOf(';', i) === -1) return undefined
    i = statementEnd(text, i)
  }
  return undefined
}

/** The command at the start of the statement at `i`, if it is one that ends or opens a transaction. */
function controlAt (text: string, i: number): string | undefined {
  const first = wordAt(text, i)
  if (first === undefined) return undefined
  switch (first.word) {
    case 'BEGIN': case 'START': case 'COMMIT': case 'END': case 'ABORT':
      return first.word === 'START' ? 'START TRANSACTION' : first.word
    case 'ROLLBACK': {
      // ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name: back to a savepoint, the transaction goes on.
      let next = wordAt(text, skipSpace(text, first.end))
      if (next !== undefined && (next.word === 'WORK' || next.word === 'TRANSACTION')) next = wordAt(text, skipSpace(text, next.end))
      return next === undefined || next.word !== 'TO' ? 'ROLLBACK' : undefined
    }
    case 'PREPARE': {
      // PREPARE name AS ... is a prepared statement; PREPARE TRANSACTION 'id' ends the transaction.
      const next = wordAt(text, skipSpace(text, first.end))
      return next !== undefined && next.word === 'TRANSACTION' ? 'PREPARE TRANSACTION' : undefined
    }
    default:
      return undefined
  }
}

/** The keyword (letters only, upper-cased) at `i` and where it ends, or undefined. */
function wordAt (text: string, i: number): { word: string, end: number } | undefined {
  let end = i
  while (end < text.length && isLetter(text.charCodeAt(end))) end++
  if (end === i || (end < text.length && isIdentifierPart(text.charCodeAt(end)))) return undefined
  return { word: text.slice(i, end).toUpperCase(), end }
}

/** Past whitespace, `-- line` and nested `/* block *\/` comments, and empty statements (`;`). */
function skipSpace (text: string, i: number): number {
  const n = text.length
  while (i < n) {
    const c = text.charCodeAt(i)
    if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d || c === 0x0c || c === 0x3b) i++
    else if (c === 0x2d && text.charCodeAt(i + 1) === 0x2d) i = lineCommentEnd(text, i)
    else if (c === 0x2f && text.charCodeAt(i + 1) === 0x2a) i = blockCommentEnd(text, i)
    else break
  }
  return i
}

/** Just past the `;` ending the statement that starts at `i` (or the end of the text). */
function statementEnd (text: string, i: number): number {
  const n = text.length
  while (i < n) {
    const c = text.charCodeAt(i)
    if (c === 0x3b) return i + 1
    if (c === 0x27) {
      // 'string', or E'string' whose backslashes escape (E or e standing alone before the quote).
      const escapes = i > 0 && (text.charCodeAt(i - 1) | 0x20) === 0x65 && (i < 2 || !isIdentifierPart(text.charCodeAt(i - 2)))
      i = quotedEnd(text, i, 0x27, escapes)
    } else if (c === 0x22) {
      i = quotedEnd(text, i, 0x22, false)
    } else if (c === 0x24 && (i === 0 || !isIdentifierPart(text.charCodeAt(i - 1)))) {
      i = dollarQuotedEnd(text, i)
    } else if (c === 0x2d && text.charCodeAt(i + 1) === 0x2d) {
      i = lineCommentEnd(text, i)
    } else if (c === 0x2f && text.charCodeAt(i + 1) === 0x2a) {
      i = blockCommentEnd(text, i)
    } else {
      i++
    }
  }
  return n
}

/** Past a quoted string or identifier opening at `i` (a doubled quote is part of it). */
function quotedEnd (text: string, i: number, quote: number, backslashEscapes: boolean): number {
  const n = text.length
  i++
  while (i < n) {
    const c = text.charCodeAt(i)
    if (backslashEscapes && c === 0x5c) { i += 2; continue }
    if (c === quote) {
      if (text.charCodeAt(i + 1) === quote) { i += 2; continue }
      return i + 1
    }
    i++
  }
  return n
}

/** Past a `$tag$ ... $tag$` string opening at `i`; a `$` that opens none (`$1`) is passed over. */
function dollarQuotedEnd (text: string, i: number): number {
  let j = i + 1
  const c = text.charCodeAt(j)
  if (!Number.isNaN(c) && isLetter(c)) {
    while (j < text.length && isIdentifierPart(text.charCodeAt(j)) && text.charCodeAt(j) !== 0x24) j++
  }
  if (text.charCodeAt(j) !== 0x24) return i + 1
  const tag = text.slice(i, j + 1)
  const close = text.indexOf(tag, j + 1)
  return close === -1 ? text.length : close + tag.length
}

function lineCommentEnd (text: string, i: number): number {
  const end = text.indexOf('\n', i + 2)
  return end === -1 ? text.length : end + 1
}

/** Past a block comment opening at `i`; PostgreSQL nests them. */
function blockCommentEnd (text: string, i: number): number {
  const n = text.length
  let depth = 1
  i += 2
  while (i < n && depth > 0) {
    if (text.charCodeAt(i) === 0x2f && text.charCodeAt(i + 1) === 0x2a) { depth++; i += 2 } else if (text.charCodeAt(i) === 0x2a && text.charCodeAt(i + 1) === 0x2f) { depth--; i += 2 } else i++
  }
  return i
}

function isLetter (c: number): boolean {
  return (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c >= 0x80
}

function isIdentifierPart (c: number): boolean {
  return isLetter(c) || (c >= 0x30 && c <= 0x39) || c === 0x24
}
