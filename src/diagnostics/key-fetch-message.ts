import type { KeyFetchCause, KeyFetchMessage, Publisher } from './types.js'

/**
 * Builds and publishes the message of a key fetch that started at `startedAt` (the port's clock).
 * `err` is null when a key was served, else the key store's error: a `VerificationError` whose
 * `type` says `unknown_key`, and, for a `KeyFetchError`, its `reason` and HTTP `status` (read
 * by shape: diagnostics/ never imports keys/). Part of the Node port only.
 */
export function publishKeyFetchEnded (channel: Publisher<KeyFetchMessage>, durationMs: number, keyId: string, baseUrl: string, refresh: boolean, err: unknown): void {
  const e = err as { type?: unknown, reason?: KeyFetchCause, status?: number } | null
  channel.publish({
    outcome: e === null ? 'fetched' : e.type === 'unknown_key' ? 'unknown_key' : 'failed',
    keyId,
    baseUrl,
    refresh,
    cause: e === null ? null : e.reason ?? null,
    status: e?.status ?? null,
    durationMs,
  })
}
