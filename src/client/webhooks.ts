// The webhook lifecycle operations of the client: enroll, list, delete, validate, resendBatch.
// Each validates its input first (no HTTP call on a bad one), makes one logical call through
// the shared transport, checks the reply's shape, and resolves { data, error }.
import { isLoopbackHost } from '../base-url.js'
import { localError, type ErrorResponse, type Result } from '../errors.js'
import { abortedError, isRecord, requestJson, type ApiRequest, type Transport } from './http.js'
import { checkRequestOptions, type RequestOptions } from './request-options.js'

/** The longest endpoint URL the API accepts. */
export const MAX_ENDPOINT_CHARS = 8000
/** The longest `request_id` of a validation. */
export const MAX_REQUEST_ID_CHARS = 28
const MAX_CUSTOMER_HANDLE_CHARS = 255

/** What `enroll` resolves: the endpoint now enrolled. */
export interface EnrolledWebhook {
  endpoint: string
}

/** What `delete` resolves. */
export interface DeletedWebhooks {
  deleted: true
}

/** What one enrolled endpoint answered to the `test` event of `validate`. */
export interface WebhookValidationResult {
  /** `passed` when the endpoint answered with a 2xx. */
  result: 'passed' | 'failed'
  /** The endpoint URL. */
  webhook: string
  /** The endpoint's status and (the start of) its body; `null` when it did not answer. */
  response: { status: number, body: string } | null
}

/** What `validate` resolves. */
export interface WebhookValidation {
  /** True when every enrolled endpoint answered with a 2xx. */
  allPassed: boolean
  results: WebhookValidationResult[]
}

/** Options of `resendBatch`. */
export interface ResendBatchOptions {
  /**
   * Sent as `X-Customer-Handle` (the API's reference names this header for the route): the
   * account or sub-account the batch belongs to, as the listing's `customerHandle` says.
   * @default none (the header is not sent)
   */
  customerHandle?: string
}

/**
 * What `resendBatch` resolves: the outcome of the new delivery attempt. The API answers once
 * it has made the attempt, whatever your endpoint answered: check `statusCode`.
 */
export interface ResentBatch {
  batchId: number
  customerHandle: string
  webhook: string
  /** ISO 8601, as the service sends it. */
  createdAt: string
  eventCount: number
  /** How long the attempt took, when the service reports it. */
  durationInMs: number | null
  /** What your endpoint answered; `null` when it did not answer. */
  statusCode: number | null
}

/** The lifecycle methods, as the client's `webhooks` holds them. */
export interface WebhookLifecycleApi {
  /**
   * Enrolls `endpoint` to receive the account's events (`POST /tx/v1/webhook?endpoint=`).
   * An endpoint already enrolled gives `conflict_error` (409). Never throws.
   */
  enroll (endpoint: string, request?: RequestOptions): Promise<Result<EnrolledWebhook>>
  /** The enrolled endpoint URLs (`GET /tx/v1/webhook`). Never throws. */
  list (request?: RequestOptions): Promise<Result<string[]>>
  /** Removes **every** enrolled endpoint (`DELETE /tx/v1/webhook`). Never throws. */
  delete (request?: RequestOptions): Promise<Result<DeletedWebhooks>>
  /**
   * Has the service POST a signed `test` event to each enrolled endpoint and reports what each
   * answered (`POST /tx/v1/webhook/validate`). `requestId` (at most 28 characters) becomes the
   * event's `request_id`; the service makes one up otherwise. No endpoint enrolled gives
   * `not_found` (404). Never throws.
   */
  validate (requestId?: string, request?: RequestOptions): Promise<Result<WebhookValidation>>
  /**
   * Has the service deliver batch `batchId` again (`POST /tx/v1/webhook-batch/{id}/resend`),
   * signed afresh, and reports the attempt: `data.statusCode` is what your endpoint answered.
   * An unknown batch gives `not_found` (404). Not retried after a 5xx unless
   * `request.retryNonIdempotent`. Never throws.
   */
  resendBatch (batchId: number | string, options?: ResendBatchOptions, request?: RequestOptions): Promise<Result<ResentBatch>>
}

type Checked<T> = { value: T, error: null } | { value: null, error: ErrorResponse }
const invalid = (message: string): { value: null, error: ErrorResponse } => ({ value: null, error: localError('validation_error', message) })

/**
 * Checks an endpoint URL as the service will use it: absolute, `https:` (or `http:` on a
 * loopback host, for local testing), no credentials or fragment, at most 8,000 characters.
 * The text is kept as given: the batch listing's `webhook` filter matches it exactly.
 */
export function checkEndpoint (endpoint: unknown, option = 'endpoint'): Checked<string> {
  if (typeof endpoint !== 'string' || endpoint === '') return invalid(`The ${option} must be a URL string, e.g. https://example.com/webhooks/mailchannels.`)
  if (endpoint.length > MAX_ENDPOINT_CHARS) return invalid(`The ${option} must be at most ${MAX_ENDPOINT_CHARS} characters.`)
  if (/[\u0000-\u0020\u007f]/.test(endpoint)) return invalid(`The ${option} must not contain spaces or control characters (percent-encode them).`)
  let url: URL
  try {
    url = new URL(endpoint)
  } catch {
    return invalid(`The ${option} must be an absolute URL, e.g. https://example.com/webhooks/mailchannels.`)
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopbackHost(url.hostname))) {
    return invalid(`The ${option} must use https: (http: is accepted only for a loopback host such as 127.0.0.1, for local testing).`)
  }
  if (url.username !== '' || url.password !== '') return invalid(`The ${option} must not contain credentials (user:password@).`)
  if (endpoint.includes('#')) return invalid(`The ${option} must not have a fragment (#...): it is never sent.`)
  return { value: endpoint, error: null }
}

/** Checks a batch id: a positive safe integer, or its decimal string. */
export function checkBatchId (batchId: unknown): Checked<number> {
  const n = typeof batchId === 'string' && /^[1-9]\d{0,15}$/.test(batchId) ? Number(batchId) : batchId
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1) {
    return invalid('The batchId must be a positive integer (a number or its decimal string), e.g. 1234.')
  }
  return { value: n, error: null }
}

/** Checks a validation's `requestId`: 1 to 28 characters, no control characters. */
export function checkRequestId (requestId: unknown): Checked<string> {
  if (typeof requestId !== 'string' || requestId === '' || requestId.length > MAX_REQUEST_ID_CHARS || /[\u0000-\u001f\u007f]/.test(requestId)) {
    return invalid(`The requestId must be a string of 1 to ${MAX_REQUEST_ID_CHARS} characters without control characters.`)
  }
  return { value: requestId, error: null }
}

/** Checks a customer handle: 1 to 255 printable ASCII characters without spaces. */
export function checkCustomerHandle (handle: unknown): Checked<string> {
  if (typeof handle !== 'string' || !/^[\x21-\x7e]+$/.test(handle) || handle.length > MAX_CUSTOMER_HANDLE_CHARS) {
    return invalid(`The customerHandle must be 1 to ${MAX_CUSTOMER_HANDLE_CHARS} printable ASCII characters without spaces.`)
  }
  return { value: handle, error: null }
}

/** Builds the lifecycle methods over a client's transport. */
export function createWebhookLifecycle (transport: (withKey: boolean) => Transport, baseUrl: string): WebhookLifecycleApi {
  const api = (path: string): URL => new URL(`${baseUrl}/tx/v1${path}`)

  /** Runs the per-call checks and one call; `map` turns the reply into `data` (or an error message). */
  async function call<T> (what: string, request: unknown, build: (retry: boolean) => ApiRequest, map: (body: unknown) => T | string): Promise<Result<T>> {
    try {
      const checked = checkRequestOptions(request)
      if (checked.error !== null) return { data: null, error: checked.error }
      const { signal, retryNonIdempotent } = checked.request
      if (signal?.aborted === true) return { data: null, error: abortedError(what) }
      const outcome = await requestJson(transport(true), build(retryNonIdempotent), what, signal)
      if (!outcome.ok) return { data: null, error: outcome.error }
      const data = map(outcome.body)
      if (typeof data === 'string') return { data: null, error: localError('api_error', `Failed to ${what}: ${data}.`) }
      return { data, error: null }
    } catch {
      /* c8 ignore next */
      return { data: null, error: localError('application_error', `Failed to ${what}.`) }
    }
  }

  return {
    async enroll (endpoint, request) {
      const checked = checkEndpoint(endpoint)
      if (checked.error !== null) return { data: null, error: checked.error }
      const url = api('/webhook')
      url.searchParams.set('endpoint', checked.value)
      return call('enroll the webhook endpoint', request, (retry) => ({
        method: 'POST',
        url,
        ok: [200, 201],
        json: false,
        idempotent: retry,
        statusText: { 409: 'Conflict. A webhook endpoint is already enrolled for this account (see list(); delete() removes every endpoint).' },
      }), () => ({ endpoint: checked.value }))
    },

    async list (request) {
      return call('list the webhook endpoints', request, () => ({ method: 'GET', url: api('/webhook') }), (body) => {
        if (!Array.isArray(body)) return 'the response is not a list of {"webhook"}'
        const endpoints: string[] = []
        for (const item of body) {
          if (!isRecord(item) || typeof item.webhook !== 'string') return 'the response is not a list of {"webhook"}'
          endpoints.push(item.webhook)
        }
        return endpoints
      })
    },

    async delete (request) {
      // Idempotent: deleting twice leaves the same state, so it is retried like a GET.
      return call('delete the webhook endpoints', request, () => ({ method: 'DELETE', url: api('/webhook'), ok: [200, 204], json: false }), () => ({ deleted: true as const }))
    },

    async validate (requestId, request) {
      if (requestId !== undefined) {
        const checked = checkRequestId(requestId)
        if (checked.error !== null) return { data: null, error: checked.error }
      }
      return call('validate the webhook endpoints', request, (retry) => ({
        method: 'POST',
        url: api('/webhook/validate'),
        body: requestId === undefined ? {} : { request_id: requestId },
        idempotent: retry,
        statusText: { 404: 'Not found. No webhook endpoint is enrolled for this account: enroll one first.' },
      }), mapValidation)
    },

    async resendBatch (batchId, options, request) {
      const id = checkBatchId(batchId)
      if (id.error !== null) return { data: null, error: id.error }
      if (options !== undefined && options !== null && !isRecord(options)) return { data: null, error: localError('validation_error', 'resendBatch options must be an object.') }
      const opts = (options ?? {}) as Record<string, unknown>
      for (const key of Object.keys(opts)) {
        if (key !== 'customerHandle') return { data: null, error: localError('validation_error', `Unknown option '${key.slice(0, 40)}'. Valid options are: customerHandle.`) }
      }
      const headers: Record<string, string> = {}
      if (opts.customerHandle !== undefined) {
        const handle = checkCustomerHandle(opts.customerHandle)
        if (handle.error !== null) return { data: null, error: handle.error }
        headers['x-customer-handle'] = handle.value
      }
      return call('resend the webhook batch', request, (retry) => ({
        method: 'POST',
        url: api(`/webhook-batch/${id.value}/resend`),
        headers,
        idempotent: retry,
        statusText: {
          400: 'Bad request. The batch id is invalid.',
          404: 'Not found. No batch with this id exists for this account.',
        },
      }), mapResend)
    },
  }
}

function mapValidation (body: unknown): WebhookValidation | string {
  const bad = 'the response is not {"all_passed", "results"}'
  if (!isRecord(body) || typeof body.all_passed !== 'boolean' || !Array.isArray(body.results)) return bad
  const results: WebhookValidationResult[] = []
  for (const item of body.results as unknown[]) {
    if (!isRecord(item) || (item.result !== 'passed' && item.result !== 'failed') || typeof item.webhook !== 'string') return bad
    const r = item.response
    let response: WebhookValidationResult['response'] = null
    if (r !== null && r !== undefined) {
      if (!isRecord(r) || !Number.isInteger(r.status) || (r.body !== undefined && r.body !== null && typeof r.body !== 'string')) return bad
      response = { status: r.status as number, body: typeof r.body === 'string' ? r.body : '' }
    }
    results.push({ result: item.result, webhook: item.webhook, response })
  }
  return { allPassed: body.all_passed, results }
}

function mapResend (body: unknown): ResentBatch | string {
  const bad = (why: string): string => `the response is not a resend result (${why})`
  if (!isRecord(body)) return bad('not a JSON object')
  if (!Number.isSafeInteger(body.batch_id)) return bad('"batch_id" is not an integer')
  if (typeof body.customer_handle !== 'string') return bad('"customer_handle" is not a string')
  if (typeof body.webhook !== 'string') return bad('"webhook" is not a string')
  if (typeof body.created_at !== 'string') return bad('"created_at" is not a string')
  if (!Number.isSafeInteger(body.event_count) || (body.event_count as number) < 0) return bad('"event_count" is not a non-negative integer')
  const nullableInt = (v: unknown): boolean => v === undefined || v === null || Number.isSafeInteger(v)
  if (!nullableInt(body.duration_in_ms)) return bad('"duration_in_ms" is not an integer or null')
  if (!nullableInt(body.status_code)) return bad('"status_code" is not an integer or null')
  return {
    batchId: body.batch_id as number,
    customerHandle: body.customer_handle,
    webhook: body.webhook,
    createdAt: body.created_at,
    eventCount: body.event_count as number,
    durationInMs: (body.duration_in_ms ?? null) as number | null,
    statusCode: (body.status_code ?? null) as number | null,
  }
}
