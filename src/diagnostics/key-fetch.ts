// Key-fetch diagnostics: one message per request to the public-key endpoint, built only when
// someone listens. Runtime-neutral.
import * as port from '#diagnostics'
import { VerificationError } from '../errors.js'
import { KeyFetchError } from '../keys/fetch-public-key.js'
import type { DiagnosticsPort } from './types.js'

const { keyFetch, now }: DiagnosticsPort = port

/** When a fetch starts: the clock if someone listens, else -1 (nothing is published for it). */
export function keyFetchStarted (): number {
  return keyFetch.hasSubscribers ? now() : -1
}

/** Publishes a fetch that started at `startedAt` (`keyFetchStarted`); `error` is null when the key was served. */
export function keyFetchEnded (startedAt: number, keyId: string, baseUrl: string, refresh: boolean, error: unknown): void {
  if (startedAt < 0) return
  const f = error instanceof KeyFetchError ? error : undefined
  keyFetch.publish({
    outcome: error === null ? 'fetched' : error instanceof VerificationError && error.type === 'unknown_key' ? 'unknown_key' : 'failed',
    keyId,
    baseUrl,
    refresh,
    cause: error === null ? null : f?.reason ?? null,
    status: f?.status ?? null,
    durationMs: now() - startedAt,
  })
}
