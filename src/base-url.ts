/** Where the MailChannels API lives. */
export const DEFAULT_BASE_URL = 'https://api.mailchannels.net'

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i

/** True for hosts that never leave the machine. */
export function isLoopbackHost (hostname: string): boolean {
  return LOOPBACK.test(hostname)
}

/**
 * Parses a URL option and applies the rule every outbound URL of the library shares:
 * `https:`, or `http:` for a loopback host only, and no credentials. `schemeRule` is the
 * end of the message when the scheme rule fails. Throws a `TypeError` naming `option`.
 */
export function parseHttpsOrLoopbackUrl (value: unknown, option: string, schemeRule: string): URL {
  if (typeof value !== 'string' && !(value instanceof URL)) throw new TypeError(`${option} must be a URL string`)
  let url: URL
  try {
    url = new URL(String(value))
  } catch {
    throw new TypeError(`${option} is not a valid URL`)
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopbackHost(url.hostname))) {
    throw new TypeError(`${option} ${schemeRule}`)
  }
  if (url.username !== '' || url.password !== '') throw new TypeError(`${option} must not contain credentials`)
  return url
}

/**
 * Validates a base URL once, at construction: `https:`, or `http:`
 * for a loopback host only; no credentials, query or fragment. Returns the origin plus
 * path prefix without a trailing slash. Throws a `TypeError` naming `option`.
 */
export function parseBaseUrl (value: unknown, option = 'baseUrl'): string {
  const url = parseHttpsOrLoopbackUrl(value, option, 'must use https: (http: is accepted only for loopback hosts such as 127.0.0.1)')
  if (url.search !== '' || url.hash !== '') throw new TypeError(`${option} must not have a query or a fragment`)
  return url.origin + url.pathname.replace(/\/+$/, '')
}
