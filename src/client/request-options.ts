import { localError, type ErrorResponse } from '../errors.js'
import { isAbortSignal, isRecord } from './http.js'

/**
 * Per-call options of every client method (the last argument), next to the operation's own
 * options.
 */
export interface RequestOptions {
  /**
   * Cancels the call: the HTTP attempt in flight is aborted (its connection closed), no retry
   * follows, and the call resolves an `application_error` saying the request was aborted
   * (`iterateBatches` rejects with it). Combined with the client's `timeout`, which still
   * applies to each attempt. Default: none.
   */
  signal?: AbortSignal
  /**
   * For the POST calls (`enroll`, `validate`, `resendBatch`): also retry after a 5xx, as GET
   * and DELETE calls are. Off by default because such a call may have taken effect before the
   * error (a resend retried this way may reach your endpoint twice; the receivers' seen-events
   * store absorbs that). A 429 is retried either way: the API refused the call without acting.
   * @default false
   */
  retryNonIdempotent?: boolean
}

/** Per-call options, validated. */
export interface CheckedRequest {
  signal: AbortSignal | undefined
  retryNonIdempotent: boolean
}

const NAMES = ['signal', 'retryNonIdempotent']

/** Validates the per-call options (the last argument of every method). */
export function checkRequestOptions (request: unknown): { request: CheckedRequest, error: null } | { request: null, error: ErrorResponse } {
  const bad = (message: string): { request: null, error: ErrorResponse } => ({ request: null, error: localError('validation_error', message) })
  if (request === undefined || request === null) return { request: { signal: undefined, retryNonIdempotent: false }, error: null }
  if (!isRecord(request)) return bad('Request options must be an object.')
  for (const key of Object.keys(request)) {
    if (!NAMES.includes(key)) return bad(`Unknown request option '${key.slice(0, 40)}'. Valid options are: ${NAMES.join(', ')}.`)
  }
  const { signal, retryNonIdempotent } = request
  if (signal !== undefined && !isAbortSignal(signal)) return bad('The signal option must be an AbortSignal.')
  if (retryNonIdempotent !== undefined && typeof retryNonIdempotent !== 'boolean') return bad('The retryNonIdempotent option must be true or false.')
  return { request: { signal, retryNonIdempotent: retryNonIdempotent ?? false }, error: null }
}
