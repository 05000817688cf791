import type { ServerResponse } from 'node:http'
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
