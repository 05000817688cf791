// The inspector's HTTP side, shared by the sandbox and `inspect`: the page and its files (no
// secret in them), and its API (the run's key required): the info, the list, one delivery's
// detail and a live stream of server-sent events.
import type http from 'node:http'
import { APP_CSS, APP_JS, ICON_SVG, pageHtml, type InspectorMode } from './page.js'
import type { Journal, JournalNews } from './journal.js'

/** What the inspector routes need from the server that mounts them. */
export interface InspectorSite {
  mode: InspectorMode
  journal: Journal
  /** The description the page shows in its header (no secret). */
  info (): Record<string, unknown>
}

/**
 * Sent with every inspector response. The policy allows this origin's script and style files
 * only: no inline script, no other origin, no framing, no form posts. Even if text from a
 * delivery reached the markup, the browser would not run it.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-store',
})

/** Live streams one server keeps open at most (each is a page left open). */
export const MAX_STREAMS = 16
const HEARTBEAT_MS = 15_000

/** The page's own files, by path. */
const FILES: Record<string, { type: string, body: (mode: InspectorMode) => string }> = {
  '/': { type: 'text/html; charset=utf-8', body: pageHtml },
  '/inspector/app.js': { type: 'text/javascript; charset=utf-8', body: () => APP_JS },
  '/inspector/app.css': { type: 'text/css; charset=utf-8', body: () => APP_CSS },
  '/inspector/icon.svg': { type: 'image/svg+xml', body: () => ICON_SVG },
}

/** The paths of the page's API (all need the key). */
export const API_INFO = '/inspector/api/info'
export const API_ATTEMPTS = '/inspector/api/attempts'
export const API_ATTEMPT = /^\/inspector\/api\/attempts\/([1-9]\d{0,15})$/
export const API_STREAM = '/inspector/api/stream'

/** True for a path of the page or one of its files (served without the key). */
export function isPageFile (pathname: string): boolean {
  return Object.hasOwn(FILES, pathname)
}

/** True for any path the inspector owns: `/` and everything under `/inspector/`. */
export function isInspectorPath (pathname: string): boolean {
  return pathname === '/' || pathname.startsWith('/inspector/')
}

export function sendInspectorJson (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const json = JSON.stringify(body)
  res.writeHead(status, { ...SECURITY_HEADERS, ...headers, 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(json) })
  res.end(json)
}

export function sendPageFile (res: http.ServerResponse, pathname: string, mode: InspectorMode): void {
  const file = FILES[pathname]!
  const body = file.body(mode)
  res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': file.type, 'content-length': Buffer.byteLength(body) })
  res.end(body)
}

/**
 * Answers a GET of the inspector's API (the caller checked the Host and the key). Returns
 * false when `pathname` is not one of its routes.
 */
export function serveInspectorApi (req: http.IncomingMessage, res: http.ServerResponse, url: URL, site: InspectorSite, streams: Set<http.ServerResponse>): boolean {
  const { pathname } = url
  if (pathname === API_INFO) {
    sendInspectorJson(res, 200, { mode: site.mode, ...site.info() })
    return true
  }
  if (pathname === API_ATTEMPTS) {
    sendInspectorJson(res, 200, { attempts: site.journal.list() })
    return true
  }
  const one = API_ATTEMPT.exec(pathname)
  if (one !== null) {
    const detail = site.journal.get(Number(one[1]))
    if (detail === null) sendInspectorJson(res, 404, { errors: ['This delivery is not kept any more (the inspector keeps the most recent ones).'] })
    else sendInspectorJson(res, 200, detail)
    return true
  }
  if (pathname === API_STREAM) {
    openStream(req, res, url, site.journal, streams)
    return true
  }
  return false
}

/** A server-sent event stream: the deliveries after `?after=`, then each new one as it is recorded. */
function openStream (req: http.IncomingMessage, res: http.ServerResponse, url: URL, journal: Journal, streams: Set<http.ServerResponse>): void {
  const raw = url.searchParams.get('after') ?? '0'
  if (!/^\d{1,15}$/.test(raw)) return sendInspectorJson(res, 400, { errors: ['after must be a delivery number (0 for all).'] })
  if (streams.size >= MAX_STREAMS) {
    return sendInspectorJson(res, 503, { errors: [`At most ${MAX_STREAMS} inspector pages can follow this server at once; close one.`] }, { 'retry-after': '5' })
  }
  streams.add(res)
  res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', 'x-accel-buffering': 'no' })
  // JSON never holds a raw line break, so each event is one `data:` line.
  const send = (news: JournalNews): void => {
    if (news.kind === 'attempt') res.write(`event: attempt\ndata: ${JSON.stringify(news.summary)}\n\n`)
    else res.write('event: info\ndata: {}\n\n')
  }
  for (const summary of journal.list(Number(raw))) send({ kind: 'attempt', summary })
  res.write(': live\n\n')
  const unsubscribe = journal.subscribe(send)
  const heartbeat = setInterval(() => res.write(': keep-alive\n\n'), HEARTBEAT_MS)
  heartbeat.unref()
  const end = (): void => {
    unsubscribe()
    clearInterval(heartbeat)
    streams.delete(res)
  }
  res.on('close', end)
  res.on('error', end)
  req.on('error', end)
}
