import type { KeyFetchCause } from './types.js'

// Node's fetch (undici, also under Deno and Bun) puts a system error code in a failed fetch's
// cause; a Worker's fetch gives a bare TypeError. So the classifier is part of the Node port
// (node.ts) and the web port (none.ts) answers 'network': a Worker bundle does not carry it.

function classify (err: unknown): KeyFetchCause {
  const codes: string[] = []
  const visit = (e: unknown, depth: number): void => {
    if (e === null || typeof e !== 'object' || depth > 4) return
    const { code, name, cause, errors } = e as { code?: unknown, name?: unknown, cause?: unknown, errors?: unknown }
    if (typeof code === 'string') codes.push(code)
    if (name === 'TimeoutError') codes.push('ETIMEDOUT')
    visit(cause, depth + 1)
    if (Array.isArray(errors)) for (const inner of errors.slice(0, 4)) visit(inner, depth + 1)
  }
  visit(err, 0)
  for (const code of codes) {
    if (code === 'ENOTFOUND' || code.startsWith('EAI_')) return 'dns'
    if (code === 'ECONNREFUSED') return 'connection_refused'
    if (code === 'ETIMEDOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT') return 'timeout'
    if (/CERT|TLS|SSL|SELF_SIGNED|UNABLE_TO_VERIFY|ALTNAME|HOSTNAME_MISMATCH/.test(code)) return 'tls'
    if (code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_SOCKET' || code === 'UND_ERR_CLOSED') return 'connection_reset'
  }
  return 'network'
}

/** The log's wording of the causes only these codes reveal (the key store words the others). */
const WHY: Partial<Record<KeyFetchCause, string>> = {
  dns: 'the public-key endpoint\'s host name could not be resolved (DNS)',
  connection_refused: 'the public-key endpoint refused the connection',
  tls: 'the TLS connection to the public-key endpoint failed (certificate)',
}

/**
 * Classifies a fetch() rejection by the system error code Node's fetch (undici) puts in its
 * cause: the cause, and what the log says of it when only this classifier knows.
 */
export function networkCause (err: unknown): [KeyFetchCause, string?] {
  const cause = classify(err)
  return [cause, WHY[cause]]
}
