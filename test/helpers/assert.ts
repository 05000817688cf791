import { HTTP_STATUS_BY_TYPE, type Result, type VerifyErrorType } from '../../src/errors.js'

import type { Test } from 'tap'

type T = Test

/** Asserts a failed verify: exact type, the HTTP status of its row in test/README.md through HTTP_STATUS_BY_TYPE, statusCode/data/response null. */
export function assertRejected (t: T, r: Result<unknown>, type: VerifyErrorType | 'validation_error', status?: number): void {
  t.equal(r.data, null, 'data is null')
  t.ok(r.error !== null, 'an error is returned')
  if (r.error === null) return
  t.equal(r.error.type, type, `type is ${type} (message: ${r.error.message})`)
  t.equal(r.error.statusCode, null, 'statusCode is null')
  t.equal(r.error.response, null, 'response is null')
  t.equal(typeof r.error.message, 'string')
  if (status !== undefined && type !== 'validation_error') {
    t.equal(HTTP_STATUS_BY_TYPE[type], status, `maps to HTTP ${status}`)
  }
}

/** Asserts an accepted verify and returns its events. */
export function assertAccepted<E> (t: T, r: Result<E[]>): E[] {
  t.equal(r.error, null, r.error === null ? 'accepted' : `accepted (got ${r.error.type}: ${r.error.message})`)
  t.ok(Array.isArray(r.data), 'data is an array')
  return r.data ?? []
}
