// Key-fetch diagnostics: one message per request to the public-key endpoint, built only when
// someone listens. Runtime-neutral. Below keys/: the key store says what happened (it knows its
// errors), this only publishes it.
// Named imports, not a namespace: a bundler then keeps only these four of the port (a namespace
// object keeps every export). Each port checks its own shape against `DiagnosticsPort`.
import { keyFetch, keyFetchEnded, networkCause, now } from '#diagnostics'
import type { KeyFetchCause } from './types.js'

/** Why a key fetch's `fetch()` rejected (`timeout`, `dns`, `tls`...; only 'network' where the runtime's errors say no more). */
export const fetchErrorCause: (err: unknown) => [KeyFetchCause, string?] = networkCause

/** When a fetch starts: the clock if someone listens, else -1 (nothing is published for it). */
export function keyFetchStarted (): number {
  return keyFetch.hasSubscribers ? now() : -1
}

/**
 * Publishes a fetch that started at `startedAt` (`keyFetchStarted`): how it ended (`err` null: a key
 * was served, else the key store's error), with its duration. Call only when `startedAt` is not -1.
 * The message is built by the port: the silent one (Workers) has nobody to build it for.
 */
export { keyFetchEnded }
