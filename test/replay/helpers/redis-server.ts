import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import net from 'node:net'
import { once } from 'node:events'
import { PORT_RANGES, serverPorts } from '../../helpers/server-ports.js'
import { Redis, type RedisOptions } from 'ioredis'

/** A real redis-server on a loopback port, no persistence, for one test file. */
export interface RedisServer {
  readonly port: number
  /** Starts it (again, on the same port) and waits until PING answers. */
  start (): Promise<void>
  /** Stops it (SIGKILL, like a crash) and waits for the process to exit. */
  stop (): Promise<void>
  /** Freezes it (SIGSTOP): connections stay open, nothing is answered until `resume`. */
  pause (): void
  /** Thaws it (SIGCONT): everything sent meanwhile is then executed. */
  resume (): void
  /** A client configured to fail fast, as the README recommends, once it is ready; closed by `close`. */
  client (options?: RedisOptions): Promise<Redis>
  /** Disconnects every client and stops the server. */
  close (): Promise<void>
}

/** Recommended fail-closed ioredis options (README): no offline queue, short command timeout, one retry. */
export const FAIL_FAST: RedisOptions = {
  enableOfflineQueue: false,
  commandTimeout: 250,
  maxRetriesPerRequest: 1,
  // Reconnect quickly in tests so recovery after a restart is seen within a bounded wait.
  retryStrategy: () => 50,
  lazyConnect: false,
}

function requireRedisServer (): void {
  const found = spawnSync('redis-server', ['--version'], { encoding: 'utf8' })
  if (found.error !== undefined || found.status !== 0) {
    throw new Error('redis-server is not installed: the Redis replay-store tests need a real one. ' +
      'Install it with `apt-get install -y redis-server` (.ci/run does this on CI).')
  }
}

async function ping (port: number): Promise<boolean> {
  return await new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' })
    let data = ''
    socket.setTimeout(200)
    socket.on('connect', () => socket.write('PING\r\n'))
    socket.on('data', (chunk) => {
      data += chunk.toString()
      if (data.includes('\r\n')) { socket.destroy(); resolve(data.startsWith('+PONG')) }
    })
    socket.on('timeout', () => { socket.destroy(); resolve(false) })
    socket.on('error', () => { socket.destroy(); resolve(false) })
  })
}

/** Starts a redis-server on a free loopback port. Call `close` in t.teardown. */
export async function startRedisServer (): Promise<RedisServer> {
  requireRedisServer()
  const [port] = await serverPorts(PORT_RANGES.redisServer) as [number]
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-redis-'))
  let child: ChildProcess | null = null
  const clients: Redis[] = []
  let output = ''

  const start = async (): Promise<void> => {
    if (child !== null) return
    output = ''
    // Its own temporary folder: a replica's full sync writes an RDB file there, never in the project.
    const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--maxmemory-policy', 'noeviction', '--dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] })
    // redis-server says why it would not start on stdout: the last of it is kept.
    const keep = (chunk: Buffer): void => { output = (output + chunk.toString()).slice(-2000) }
    proc.stdout?.on('data', keep)
    proc.stderr?.on('data', keep)
    child = proc
    proc.once('exit', () => { if (child === proc) child = null })
    // A deadline for hangs: it returns at the first PONG, and fails at once if the server exits.
    const deadline = Date.now() + 60_000
    while (Date.now() < deadline) {
      if (await ping(port)) return
      if (child === null) break
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    throw new Error(`redis-server did not answer PING on 127.0.0.1:${port}. ${output.trim().slice(-500)}`)
  }

  const stop = async (): Promise<void> => {
    const proc = child
    if (proc === null) return
    child = null
    proc.kill('SIGCONT')
    await new Promise<void>((resolve) => {
      proc.once('exit', () => resolve())
      proc.kill('SIGKILL')
    })
  }

  await start()
  return {
    port,
    start,
    stop,
    pause: () => { child?.kill('SIGSTOP') },
    resume: () => { child?.kill('SIGCONT') },
    async client (options: RedisOptions = {}): Promise<Redis> {
      const c = new Redis({ host: '127.0.0.1', port, ...FAIL_FAST, ...options })
      // Connection errors are expected while the server is stopped; commands still reject.
      c.on('error', () => {})
      clients.push(c)
      // Without the offline queue, commands sent before the connection is ready fail.
      if (c.status !== 'ready') await once(c, 'ready')
      return c
    },
    async close (): Promise<void> {
      for (const c of clients) c.disconnect()
      await stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Polls `check` until it returns true or `ms` pass. */
export async function waitFor (check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return true
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  return false
}
