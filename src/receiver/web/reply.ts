import { JSON_CONTENT_TYPE, type Reply } from '../reply.js'

/** A reply as a fetch `Response` (JSON body). `Connection` is the runtime's business, not ours. */
export function replyResponse (reply: Reply): Response {
  const headers = new Headers({ 'content-type': JSON_CONTENT_TYPE })
  for (const name in reply.headers) if (name !== 'connection') headers.set(name, reply.headers[name]!)
  return new Response(JSON.stringify(reply.body), { status: reply.status, headers })
}
