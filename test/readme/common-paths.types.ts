// Compile-time test (checked by `npx tsc -p tsconfig.json`): the paths README.md shows type-check
// without casts. test/readme/readme.test.ts checks the README's own snippets the same way, in a
// fresh project with the DOM library too.
import { HTTP_STATUS_BY_TYPE, verifyWebhook, type ErrorType, type VerifyErrorType } from '../../src/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

// signWebhook().body goes to fetch, Request and Response as it is: the DOM's BodyInit takes a
// Uint8Array over an ArrayBuffer, never one over an ArrayBufferLike (it may be shared).
const keys = generateSigningKeyPair()
const signed = signWebhook({ events: [{ event: 'delivered', customerHandle: 'abc123', timestamp: 1 }], privateKey: keys.privateKey })
const bytes: Uint8Array<ArrayBuffer> = signed.body
const buffer: Buffer = signed.body // still a Buffer for those who use it as one
void bytes
void buffer
export async function post (url: string): Promise<Response> {
  return await fetch(url, { method: 'POST', headers: signed.headers, body: signed.body })
}
void new Request('http://127.0.0.1/', { method: 'POST', body: signed.body })

// HTTP_STATUS_BY_TYPE[error.type] on a verify error: no cast to VerifyErrorType.
export async function statusOf (payload: Uint8Array, headers: Record<string, string>): Promise<number> {
  const { error } = await verifyWebhook({ payload, headers, customerHandles: ['abc123'] })
  if (error === null) return 200
  return HTTP_STATUS_BY_TYPE[error.type] ?? 400
}
assertType<Equal<(typeof HTTP_STATUS_BY_TYPE)[VerifyErrorType], number>>(true)
assertType<Equal<(typeof HTTP_STATUS_BY_TYPE)[ErrorType], number | undefined>>(true)
// @ts-expect-error an API error type has no status here: a number is never promised for it
const apiStatus: number = HTTP_STATUS_BY_TYPE.conflict_error
void apiStatus
