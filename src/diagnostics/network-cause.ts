import type { KeyFetchCause } from './types.js'

// Node's fetch (undici, also under Deno and Bun) puts a system error code in a failed fetch's
// cause; a Worker's fetch gives a bare TypeError. So the classifier is part of the Node port
// (node.ts) and the web port (none.ts) answers 'network': a Worker bundle does not carry it.

/** Classifies a fetch() rejection by the system error code Node's fetch (undici) puts in its cause. */
export function networkCause (err: unknown): KeyFetchCause {
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
