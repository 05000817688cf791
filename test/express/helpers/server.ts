// A real Express server on 127.0.0.1 (port 0) and a small HTTP client for the tests, and the
// two Express majors the middleware supports: each conformance file runs its cases on both.
import http from 'node:http'
import type net from 'node:net'
import express5 from 'express'
import express4 from 'express4'
import type { Test } from 'tap'

/** The Express module (typed as Express 5; Express 4 offers everything these tests use). */
export type Express = typeof express5

/** Express 5 (`express`) and Express 4 (the `express4` npm alias of express@4). */
export const EXPRESS_VERSIONS: ReadonlyArray<readonly [string, Express]> = [
  ['express 5', express5],
  ['express 4', express4 as unknown as Express],
]

type Case = readonly [string, (t: Test) => Promise<void>]

/**
 * Collects a file's test cases (`test(name, fn)`) and runs them once per Express version,
 * calling `use(express)` first so the file's helpers build apps with that version.
 */
export function conformance (use: (express: Express) => void): { test: (name: string, fn: (t: Test) => Promise<void>) => void, run: (t: Test) => void } {
  const cases: Case[] = []
  return {
    test: (name, fn) => { cases.push([name, fn]) },
    run: (t) => {
      for (const [version, express] of EXPRESS_VERSIONS) {
        t.test(version, async (t) => {
          use(express)
          for (const [name, fn] of cases) await t.test(name, fn)
        })
      }
    },
  }
}

export * from '../../fastify/helpers/fixtures.js'

export async function serve (t: Test, app: http.RequestListener): Promise<number> {
  const server = http.createServer(app)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return (server.address() as net.AddressInfo).port
}

export interface Reply { status: number, headers: http.IncomingHttpHeaders, text: string, json: () => Record<string, unknown> }

/** POSTs a body (a Buffer, or chunks sent without Content-Length) and resolves with the reply. */
export async function post (port: number, path: string, headers: Record<string, string>, body: Buffer | Buffer[] = Buffer.alloc(0)): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const h: Record<string, string> = { ...headers }
    if (Buffer.isBuffer(body)) h['content-length'] = String(body.length)
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', headers: h, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) as Record<string, unknown> })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    if (Buffer.isBuffer(body)) req.end(body)
    else {
      for (const c of body) req.write(c)
      req.end()
    }
  })
}
