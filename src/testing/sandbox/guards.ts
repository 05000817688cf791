// Who may talk to the sandbox's API and the inspector pages: requests addressed to a loopback
// host, not relayed by a proxy, from no other web origin, with the run's key.
import crypto from 'node:crypto'
import type http from 'node:http'

/** Compares a secret in constant time (the lengths may differ). */
export function sameSecret (given: string, expected: string): boolean {
  return crypto.timingSafeEqual(crypto.hash('sha256', given, 'buffer'), crypto.hash('sha256', expected, 'buffer'))
}

/** True when the request carries `X-Api-Key` with exactly the run's key. */
export function hasApiKey (req: http.IncomingMessage, apiKey: string): boolean {
  const given = req.headers['x-api-key']
  return typeof given === 'string' && sameSecret(given, apiKey)
}

const LOOPBACK_HOST = /^(?:localhost|127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})|\[::1\])(?::(\d{1,5}))?$/i

/**
 * True when a request names a loopback host in its one `Host` field (with or without a port).
 * A page that rebinds its own domain to 127.0.0.1 reaches the socket, but its requests still
 * carry that domain as `Host`, so they are refused.
 */
export function isLoopbackHostHeader (rawHeaders: readonly string[]): boolean {
  const hosts: string[] = []
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() === 'host') hosts.push(rawHeaders[i + 1]!)
  }
  if (hosts.length !== 1) return false
  const m = LOOPBACK_HOST.exec(hosts[0]!)
  if (m === null) return false
  const [, a = '0', b = '0', c = '0', port] = m
  return Number(a) <= 255 && Number(b) <= 255 && Number(c) <= 255 && (port === undefined || Number(port) <= 65535)
}

/**
 * False when a browser sent the request from another web origin: its `Origin` must then be
 * exactly `http://<Host>`. Requests without `Origin` (curl, the CLI, the library) pass; a browser
 * always sends it on a POST, so a page elsewhere cannot act even when it guessed nothing else.
 */
export function isSameOrigin (req: http.IncomingMessage): boolean {
  const origin = req.headers.origin
  if (origin === undefined) return true
  const host = req.headers.host
  return typeof host === 'string' && origin.toLowerCase() === `http://${host.toLowerCase()}`
}

const RELAY_HEADERS = ['forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-real-ip', 'cf-connecting-ip', 'true-client-ip']

/**
 * True when a proxy or tunnel relayed the request (it says so in a forwarding header). A tunnel
 * that rewrites `Host` to `localhost` would otherwise pass the loopback rule; the inspector pages
 * are for this machine's browser only.
 */
export function isRelayed (req: http.IncomingMessage): boolean {
  return RELAY_HEADERS.some((name) => req.headers[name] !== undefined)
}
