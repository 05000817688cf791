// A real PostgreSQL server for one test file: Debian's binaries, a fresh cluster in a temp folder,
// a free loopback port, stopped by PID. initdb refuses to run as root, so when the tests run as
// root the cluster and the server run as the `postgres` user, on a folder it owns.
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import pg from 'pg'
import { PORT_RANGES, serverPorts } from './server-ports.js'

export interface PostgresServer {
  readonly port: number
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication: no password). */
  readonly url: string
  /** Starts it (again, on the same port and data) and waits until it accepts connections. */
  start (): Promise<void>
  /** Stops it: SIGKILL (a crash; the next start recovers from the WAL) or a fast shutdown (SIGINT). */
  stop (how?: 'kill' | 'fast'): Promise<void>
  /** A pool on this server with an 'error' listener (a pool without one crashes the process when the server stops); ended by `close`. */
  pool (options?: pg.PoolConfig): pg.Pool
  /** A fresh database of its own (so test cases sharing the server never see each other's tables); its URL. */
  createDatabase (): Promise<string>
  /** Ends every pool and stops the server, then removes its folder. */
  close (): Promise<void>
}

/** The folder holding initdb and postgres: `pg_config --bindir`, else the newest /usr/lib/postgresql/N/bin. */
export function postgresBinDir (): string | undefined {
  const config = spawnSync('pg_config', ['--bindir'], { encoding: 'utf8' })
  const fromConfig = config.status === 0 ? config.stdout.trim() : ''
  if (fromConfig !== '' && existsSync(path.join(fromConfig, 'initdb'))) return fromConfig
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return undefined
  const versions = readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a))
  for (const v of versions) {
    const bin = path.join(root, v, 'bin')
    if (existsSync(path.join(bin, 'initdb')) && existsSync(path.join(bin, 'postgres'))) return bin
  }
  return undefined
}

function requireBinDir (): string {
  const bin = postgresBinDir()
  if (bin === undefined) {
    throw new Error('PostgreSQL is not installed: the PostgreSQL store tests need a real server. ' +
      'Install it with `apt-get install -y postgresql` (.ci/run does this on CI).')
  }
  return bin
}

/** Who runs initdb and postgres: the `postgres` user when we are root (initdb refuses root). */
function runAs (): { uid: number, gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined
  const uid = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' })
  const gid = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' })
  if (uid.status !== 0 || gid.status !== 0) throw new Error('Running as root, and there is no `postgres` user to run initdb and postgres as (Debian\'s postgresql package creates it).')
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) }
}

async function accepts (url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 500 })
  client.on('error', () => {})
  try {
    await client.connect()
    await client.query('SELECT 1')
    return true
  } catch {
    return false
  } finally {
    await client.end().catch(() => {})
  }
}

function childPids (pid: number | undefined): number[] {
  if (pid === undefined) return []
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so read after the last ')'.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) pids.push(Number(entry))
    } catch {}
  }
  return pids
}

function alive (pid: number): boolean {
  try { process.kill(pid, 0); return true } catch { return false }
}

/** Starts a PostgreSQL server on a free loopback port. Call `close` in t.teardown. */
export async function startPostgres (): Promise<PostgresServer> {
  const bin = requireBinDir()
  const user = runAs()
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mcwh-pg-'))
  const data = path.join(dir, 'data')
  if (user !== undefined) chownSync(dir, user.uid, user.gid)
  const init = spawnSync(path.join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-N', '-E', 'UTF8', '--locale=C'],
    { encoding: 'utf8', ...user, cwd: dir })
  if (init.status !== 0) {
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`initdb failed: ${(init.stderr ?? '').trim() || String(init.error)}`)
  }
  const [port] = await serverPorts(PORT_RANGES.postgres) as [number]
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`
  let child: ChildProcess | null = null
  let stderr = ''
  const pools: pg.Pool[] = []
  let databases = 0

  const start = async (): Promise<void> => {
    if (child !== null) return
    stderr = ''
    const proc = spawn(path.join(bin, 'postgres'), ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1',
      // fsync=off only risks data on an OS crash; a killed server recovers every commit from the WAL.
      '-c', 'fsync=off', '-c', 'max_connections=200'],
    { stdio: ['ignore', 'ignore', 'pipe'], ...user, cwd: dir })
    proc.stderr?.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-4000) })
    child = proc
    proc.once('exit', () => { if (child === proc) child = null })
    // A deadline for a server that never comes up; under load (four test files on two cores) a
    // start can take many seconds.
    const deadline = Date.now() + 90_000
    while (Date.now() < deadline) {
      if (await accepts(url)) return
      if (child === null) break
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    throw new Error(`postgres did not accept connections on 127.0.0.1:${port}. ${stderr.trim()}`)
  }

  const stop = async (how: 'kill' | 'fast' = 'kill'): Promise<void> => {
    const proc = child
    if (proc === null) return
    child = null
    // The postmaster's children (backends, checkpointer...) outlive a SIGKILLed postmaster for a
    // moment and keep its shared memory: the next start waits until they are gone.
    const children = how === 'kill' ? childPids(proc.pid) : []
    await new Promise<void>((resolve) => {
      proc.once('exit', () => resolve())
      proc.kill(how === 'kill' ? 'SIGKILL' : 'SIGINT')
    })
    const deadline = Date.now() + 60_000
    while (Date.now() < deadline && children.some(alive)) await new Promise((resolve) => setTimeout(resolve, 25))
  }

  await start()
  return {
    port,
    url,
    start,
    stop,
    pool (options: pg.PoolConfig = {}): pg.Pool {
      const pool = new pg.Pool({ connectionString: url, connectionTimeoutMillis: 2000, ...options })
      // An idle client whose server went away emits 'error' on the pool: without a listener it crashes the process.
      pool.on('error', () => {})
      pools.push(pool)
      return pool
    },
    async createDatabase (): Promise<string> {
      const name = `t${process.pid}_${++databases}`
      const client = new pg.Client({ connectionString: url })
      client.on('error', () => {})
      await client.connect()
      try { await client.query(`CREATE DATABASE ${name}`) } finally { await client.end() }
      return `postgres://postgres@127.0.0.1:${port}/${name}`
    },
    async close (): Promise<void> {
      await Promise.all(pools.splice(0).map(async (p) => { await p.end().catch(() => {}) }))
      await stop('fast')
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
