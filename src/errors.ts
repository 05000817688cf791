/**
 * The one error shape every operation returns: `verify`, `batches`, `getSigningKey`.
 * Operations never throw; they return `{ data: null, error }`.
 */
export interface ErrorResponse {
  /** What went wrong and, where it helps, what to do. Never contains a signature, a key, an API key or body content. */
  message: string
  /** The upstream HTTP status for API errors; `null` for local failures (verification, validation, transport). */
  statusCode: number | null
  /** A stable reason code: switch on this, never on `message`. */
  type: ErrorType
  /** The upstream JSON object for API errors when there is one; otherwise `null`. */
  response: Record<string, unknown> | null
}

/** Reason codes of a failed webhook verification. */
export const VerifyErrorType = {
  missingHeader: 'missing_header',
  malformedHeader: 'malformed_header',
  unsupportedAlgorithm: 'unsupported_algorithm',
  digestMismatch: 'digest_mismatch',
  signatureInvalid: 'signature_invalid',
  signatureExpired: 'signature_expired',
  signatureFromFuture: 'signature_from_future',
  unknownKey: 'unknown_key',
  keyUnavailable: 'key_unavailable',
  customerNotAllowed: 'customer_not_allowed',
  invalidPayload: 'invalid_payload',
  payloadTooLarge: 'payload_too_large',
  unsupportedMediaType: 'unsupported_media_type',
  configurationError: 'configuration_error',
  replayStoreUnavailable: 'replay_store_unavailable',
} as const
export type VerifyErrorType = (typeof VerifyErrorType)[keyof typeof VerifyErrorType]

/** Reason codes of API calls: one per HTTP status the API answers with, and this library's own (docs/api-client.md, "The client"). */
export const ApiErrorType = {
  validationError: 'validation_error',
  invalidRequestError: 'invalid_request_error',
  authenticationError: 'authentication_error',
  permissionError: 'permission_error',
  notFound: 'not_found',
  conflictError: 'conflict_error',
  payloadTooLargeError: 'payload_too_large_error',
  unprocessableEntityError: 'unprocessable_entity_error',
  rateLimitError: 'rate_limit_error',
  internalServerError: 'internal_server_error',
  apiError: 'api_error',
  applicationError: 'application_error',
  /** A resend reached the API, but the webhook endpoint did not answer it with a 2xx (or did not answer). */
  deliveryFailed: 'delivery_failed',
  /** A batch listing returned a full page of entries already listed (the API seems to ignore `offset`). */
  listingRepeated: 'listing_repeated',
  /** A batch listing reached `maxBatches` entries before it ended. */
  listingLimitReached: 'listing_limit_reached',
} as const
export type ApiErrorType = (typeof ApiErrorType)[keyof typeof ApiErrorType]

export type ErrorType = VerifyErrorType | ApiErrorType

/**
 * The HTTP status an adapter answers with for each verification failure (the table "Error types"
 * in docs/receivers.md). `key_unavailable` and `replay_store_unavailable` also carry `Retry-After`.
 * Indexed by any `ErrorType`, so `HTTP_STATUS_BY_TYPE[error.type]` type-checks on an
 * `ErrorResponse` as it is: a verify type gives its status, an API type `undefined`.
 */
export const HTTP_STATUS_BY_TYPE: Readonly<Record<VerifyErrorType, number> & Partial<Record<ApiErrorType, undefined>>> = /* @__PURE__ */ Object.freeze({
  missing_header: 400,
  malformed_header: 400,
  invalid_payload: 400,
  unsupported_algorithm: 401,
  digest_mismatch: 401,
  signature_invalid: 401,
  signature_expired: 401,
  signature_from_future: 401,
  unknown_key: 401,
  customer_not_allowed: 403,
  payload_too_large: 413,
  unsupported_media_type: 415,
  configuration_error: 500,
  key_unavailable: 503,
  replay_store_unavailable: 503,
})

/** `{ data, error }`: exactly one of the two is null. */
export type Result<T> = { data: T; error: null } | { data: null; error: ErrorResponse }

/** Builds a local failure (`statusCode: null`, `response: null`). */
export function localError(type: ErrorType, message: string): ErrorResponse {
  return { message, statusCode: null, type, response: null }
}

/** Shorthand for a failed result. */
export function fail<T = never>(type: ErrorType, message: string): Result<T> {
  return { data: null, error: localError(type, message) }
}

/**
 * Internal control-flow error of the verification pipeline. Each stage throws it with a
 * reason code; `verify` turns it into an `ErrorResponse` and never lets anything escape.
 */
export class VerificationError extends Error {
  readonly type: VerifyErrorType
  /** Seconds the sender should wait before retrying (set for transient failures). */
  readonly retryAfter: number | undefined
  /** `options.cause`: the underlying failure (a replay store's error), for logs; never sent to the sender. */
  constructor (type: VerifyErrorType, message: string, retryAfter?: number, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'VerificationError'
    this.type = type
    this.retryAfter = retryAfter
  }
}
