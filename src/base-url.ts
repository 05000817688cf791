/** Where the MailChannels API lives. */
export const DEFAULT_BASE_URL = 'https://api.mailchannels.net'

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i

/** True for hosts that never leave the machine. */
export function isLoopbackHost (hostname: string): boolean {
  return LOOPBACK.test(hostname)
}

/**
 * Validates a base URL once, at construction (threat-model T11): `https:`, or `http:`
 * for a loopback host only; no credentials, query or fragment. Returns the origin plus
 * path prefix without a trailing slash. Throws a `TypeError` naming `option`.
 */
export function parseBaseUrl (value: unknown, option = 'baseUrl'): string {
  if (typeof value !== 'string' && !(value instanceof URL)) throw new TypeError(`${option} must be a URL string`)
  let url: URL
  try {
    url = new URL(String(value))
  } catch {
    throw new TypeError(`${option} is not a valid URL`)
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopbackHost(url.hostname))) {
    throw new TypeError(`${option} must use https: (http: is accepted only for loopback hosts such as 127.0.0.1)`)
  }
  if (url.username !== '' || url.password !== '') throw new TypeError(`${option} must not contain credentials`)
  if (url.search !== '' || url.hash !== '') throw new TypeError(`${option} must not have a query or a fragment`)
  return url.origin + url.pathname.replace(/\/+$/, '')
}
