import type { ServerResponse } from 'node:http'
import type { AcceptedOutcome, SettleHandler } from '../pipeline.js'
import { JSON_CONTENT_TYPE, type Reply } from '../reply.js'

/** Writes a reply on a node:http response (the Express adapters): status, JSON body, its headers. */
export function writeReply (res: ServerResponse, reply: Reply): void {
  const body = JSON.stringify(reply.body)
  res.statusCode = reply.status
  res.setHeader('content-type', JSON_CONTENT_TYPE)
  res.setHeader('content-length', Buffer.byteLength(body))
  for (const name in reply.headers) res.setHeader(name, reply.headers[name]!)
  res.end(body)
}

/**
 * The handler's outcome on a node:http response (Express) is the status it answers with: the
 * first `res.end()` (behind `res.json`, `res.send`, a piped stream, Express' final error handler)
 * settles the claim with `res.statusCode`, whether or not the socket is still open. The wrapper
 * stays in place after that first call (a flag, not a second write of `res.end`: Express gives
 * every response a prototype of its own app, so each property written builds a hidden class).
 */
export function settleOnEnd (res: ServerResponse, outcome: AcceptedOutcome, settle: SettleHandler): void {
  const end = res.end as (...a: unknown[]) => ServerResponse
  let settled = false
  res.end = function (this: ServerResponse) {
    if (!settled) {
      settled = true
      settle(outcome, res.statusCode)
    }
    // `arguments` as given (no rest array per request), so end() sees exactly its caller's arguments.
    // eslint-disable-next-line prefer-rest-params
    return end.apply(this, arguments as unknown as unknown[])
  } as ServerResponse['end']
}
