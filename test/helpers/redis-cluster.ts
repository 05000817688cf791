// A real local Redis Cluster for tests: three masters and three replicas from Debian's
// redis-server on free loopback ports (their cluster bus ports free too: test/helpers/server-ports.ts),
// built with `redis-cli --cluster create`, a short cluster-node-timeout so a killed master is
// replaced within seconds. Every process is killed by its PID in `close` (call it from
// t.teardown, so it also runs when a test fails).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Cluster, Redis, type ClusterOptions } from 'ioredis'
import { keySlot } from '../../src/replay/redis-client.js'
import { PORT_RANGES, serverPorts } from './server-ports.js'

const HOST = '127.0.0.1'
/** ms without an answer before a node is deemed failing and its replica takes over. */
export const NODE_TIMEOUT = 1000

/**
 * Fail-fast Cluster client settings (the ones docs/replay.md recommends): no offline queue on the
 * cluster or its node connections, a short command timeout, one retry per request; the
 * cluster-level retries are short so a failover heals within a bounded wait.
 */
export const CLUSTER_FAIL_FAST: ClusterOptions = {
  enableOfflineQueue: false,
  // Node connections: ioredis forces their own offline queue on; the cluster-level
  // `enableOfflineQueue: false` is what refuses commands for a node that is not connected.
  redisOptions: { commandTimeout: 250, maxRetriesPerRequest: 1, connectTimeout: 500 },
  clusterRetryStrategy: () => 100,
  retryDelayOnFailover: 100,
  retryDelayOnClusterDown: 100,
  retryDelayOnTryAgain: 100,
  maxRedirections: 4,
  slotsRefreshTimeout: 500,
}

export interface ClusterNode {
  readonly port: number
  readonly id: string
  readonly role: 'master' | 'replica'
  /** For a replica, the id of its master. */
  readonly masterId: string | null
  /** Slots served (masters). */
  readonly slots: number
}

export interface LocalRedisCluster {
  /** Every node's port (masters and replicas). */
  readonly ports: readonly number[]
  readonly startupNodes: ReadonlyArray<{ host: string, port: number }>
  /** The nodes as the cluster currently sees them (live nodes only). */
  nodes (): Promise<ClusterNode[]>
  /** The port of the master serving `key` now. */
  masterOf (key: string): Promise<number>
  /** A Cluster client (fail-fast settings unless overridden), once ready; closed by `close`. */
  client (options?: ClusterOptions): Promise<Cluster>
  /** A plain connection to one node (admin: INFO, CLUSTER ...); closed by `close`. */
  node (port: number): Redis
  /** Kills a node with SIGKILL (a crash) and waits for the process to exit. */
  kill (port: number): Promise<void>
  /**
   * Cuts a master off from its replicas while clients still reach it (a partition between
   * them): it drops its replicas and asks new connections for a password they do not have.
   * Writes it acknowledges from then on are not replicated.
   */
  cutOffReplicas (port: number): Promise<void>
  /** Undoes `cutOffReplicas`: its replicas reconnect; waits until they are back in sync. */
  reconnectReplicas (port: number): Promise<void>
  /** Starts a killed node again (same port and config file): it rejoins as a replica; waits until it is in sync. */
  restart (port: number): Promise<void>
  /** Waits until a replica of the killed master `port` serves its slots and every live node says `cluster_state:ok`; returns its port. */
  waitForPromotion (port: number, ms?: number): Promise<number>
  /** Disconnects every client and kills every process; removes the temp dirs. */
  close (): Promise<void>
}

/** Why a local cluster cannot be started here, or null when it can. */
export function clusterUnavailable (): string | null {
  for (const bin of ['redis-server', 'redis-cli']) {
    const found = spawnSync(bin, ['--version'], { encoding: 'utf8' })
    if (found.error !== undefined || found.status !== 0) {
      return `${bin} is not installed (apt-get install -y redis-server redis-tools; .ci/run does this on CI)`
    }
  }
  return null
}

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

/**
 * The longest the cluster may take to reach a state it is waited for (started, in sync, failed
 * over). `until` returns as soon as it holds, in a second or two on an idle machine; four test
 * files at once on two cores can take many times that, which must not fail a run.
 */
const SETTLE_MS = 60_000

async function until (check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check().catch((err: unknown) => { if (err instanceof NodeExitedError) throw err; return false })) return
    await sleep(50)
  }
  throw new Error(`local Redis Cluster: timed out waiting for ${what}`)
}

function parseNodes (text: string): ClusterNode[] {
  const nodes: ClusterNode[] = []
  for (const line of text.trim().split('\n')) {
    const [id, address, flags, master, , , , link, ...slots] = line.split(' ')
    if (id === undefined || address === undefined || flags === undefined || master === undefined) continue
    const flagSet = flags.split(',')
    if (flagSet.includes('fail') || flagSet.includes('fail?') || flagSet.includes('noaddr') || link !== 'connected') continue
    const port = Number(address.split('@')[0]?.split(':')[1])
    let count = 0
    for (const range of slots) {
      if (range.startsWith('[')) continue
      const [from, to] = range.split('-').map(Number)
      count += to === undefined ? 1 : to - (from ?? to) + 1
    }
    nodes.push({ port, id, role: flagSet.includes('master') ? 'master' : 'replica', masterId: master === '-' ? null : master, slots: count })
  }
  return nodes
}

/** A node's cluster bus listens this far above its port (test/helpers/server-ports.ts). */
const BUS_OFFSET = 10000
/** Starts tried before giving up (each on new ports). */
const START_ATTEMPTS = 3

/**
 * Starts the cluster, three masters with a replica each, and waits until every node reports
 * `cluster_state:ok` and the replicas are in sync; tried again on other ports if a node's port was
 * taken meanwhile.
 */
export async function startRedisCluster (): Promise<LocalRedisCluster> {
  const reason = clusterUnavailable()
  if (reason !== null) throw new Error(reason)
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOn(await serverPorts(PORT_RANGES.redisCluster, 6, BUS_OFFSET))
    } catch (err) {
      if (attempt >= START_ATTEMPTS || !(err instanceof NodeExitedError)) throw err
    }
  }
}

/** A node process ended while the cluster was starting (its port taken, most likely): the start is tried again. */
class NodeExitedError extends Error {}

async function startOn (ports: number[]): Promise<LocalRedisCluster> {
  const dirs: string[] = []
  const children = new Map<number, ChildProcess>()
  const admins = new Map<number, Redis>()
  const clients: Cluster[] = []
  const output = new Map<number, string>()

  const dirOf = new Map<number, string>()
  const spawnNode = (port: number): void => {
    const proc = spawn('redis-server', ['--port', String(port), '--bind', HOST, '--dir', dirOf.get(port)!,
      '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', String(NODE_TIMEOUT),
      // A replica always takes over (whatever its data age) and syncs without a disk or a delay.
      '--cluster-replica-validity-factor', '0', '--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0',
      '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction'], { stdio: ['ignore', 'pipe', 'pipe'] })
    // redis-server logs to stdout (why it would not start, among the rest): the last of it is kept.
    const keep = (chunk: Buffer): void => { output.set(port, ((output.get(port) ?? '') + chunk.toString()).slice(-2000)) }
    proc.stdout?.on('data', keep)
    proc.stderr?.on('data', keep)
    children.set(port, proc)
  }

  const node = (port: number): Redis => {
    let c = admins.get(port)
    if (c === undefined) {
      // The helper's own connections (admin commands, the probes of masterOf): a loaded machine
      // must not fail them, so their timeouts are deadlines for hangs; waits retry on their own.
      c = new Redis({ host: HOST, port, enableOfflineQueue: true, maxRetriesPerRequest: 1, connectTimeout: 5000, commandTimeout: 5000, retryStrategy: () => 100 })
      c.on('error', () => {})
      admins.set(port, c)
    }
    return c
  }

  /** The replicas of each killed master, as they were just before the kill. */
  const replicasOf = new Map<number, number[]>()
  let closing = false
  const kill = async (port: number): Promise<void> => {
    const proc = children.get(port)
    if (proc === undefined) return
    // Not while closing: it would open admin connections to nodes about to go, which retry forever.
    const other = closing ? undefined : [...children.keys()].find((p) => p !== port)
    const text = other === undefined ? null : await node(other).cluster('NODES').catch(() => null)
    if (typeof text === 'string') {
      const all = parseNodes(text)
      const id = all.find((n) => n.port === port)?.id
      replicasOf.set(port, all.filter((n) => n.masterId === id).map((n) => n.port))
    }
    children.delete(port)
    if (proc.exitCode !== null || proc.signalCode !== null) return
    await new Promise<void>((resolve) => {
      proc.once('exit', () => resolve())
      proc.kill('SIGKILL')
    })
    admins.get(port)?.disconnect()
    admins.delete(port)
  }

  const close = async (): Promise<void> => {
    closing = true
    for (const c of clients) c.disconnect()
    for (const c of admins.values()) c.disconnect()
    admins.clear()
    await Promise.all([...children.keys()].map(kill))
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  }

  try {
    for (const port of ports) {
      const dir = mkdtempSync(join(tmpdir(), 'mcwh-cluster-'))
      dirs.push(dir)
      dirOf.set(port, dir)
      spawnNode(port)
    }
    await until(async () => {
      const gone = ports.find((p) => { const c = children.get(p); return c !== undefined && (c.exitCode !== null || c.signalCode !== null) })
      if (gone !== undefined) throw new NodeExitedError(`local Redis Cluster: redis-server on port ${gone} exited while starting`)
      return (await Promise.all(ports.map(async (p) => await node(p).ping()))).every((r) => r === 'PONG')
    }, SETTLE_MS, 'every node to answer PING')

    const created = await new Promise<{ code: number | null, out: string }>((resolve) => {
      const cli = spawn('redis-cli', ['--cluster', 'create', ...ports.map((p) => `${HOST}:${p}`), '--cluster-replicas', '1', '--cluster-yes'],
        { stdio: ['ignore', 'pipe', 'pipe'] })
      let out = ''
      cli.stdout.on('data', (c: Buffer) => { out += c.toString() })
      cli.stderr.on('data', (c: Buffer) => { out += c.toString() })
      cli.once('exit', (code) => resolve({ code, out }))
    })
    if (created.code !== 0) throw new Error(`redis-cli --cluster create failed: ${created.out.slice(-500)}`)

    await until(async () => {
      for (const p of ports) {
        const info = await node(p).cluster('INFO') as string
        if (!info.includes('cluster_state:ok') || !info.includes('cluster_slots_assigned:16384') || !info.includes('cluster_known_nodes:6')) return false
      }
      const nodes = parseNodes(await node(ports[0]!).cluster('NODES') as string)
      if (nodes.filter((n) => n.role === 'master' && n.slots > 0).length !== 3 || nodes.filter((n) => n.role === 'replica').length !== 3) return false
      // Replicas in sync, so WAIT can be satisfied.
      for (const n of nodes.filter((x) => x.role === 'replica')) {
        const repl = await node(n.port).info('replication')
        if (!repl.includes('master_link_status:up')) return false
      }
      return true
    }, SETTLE_MS, 'cluster_state:ok on every node, slots assigned, replicas in sync')
  } catch (err) {
    await close()
    const logs = [...output.values()].join('').trim()
    const message = `${err instanceof Error ? err.message : String(err)}${logs === '' ? '' : ` (redis-server: ${logs.slice(-300)})`}`
    throw err instanceof NodeExitedError ? new NodeExitedError(message) : new Error(message)
  }

  const live = (): number[] => ports.filter((p) => children.has(p))
  /** A key in one of the slots the master on `port` serves (for a write and WAIT on its own connection). */
  const keyServedBy = async (port: number): Promise<string> => {
    const shards = await node(port).cluster('SLOTS') as unknown as Array<[number, number, [string, number, ...unknown[]], ...unknown[]]>
    const ranges = shards.filter((s) => s[2][1] === port)
    for (let i = 0; i < 100_000; i++) {
      const key = `mcwh-probe-${i}`
      const slot = keySlot(key)
      if (ranges.some(([from, to]) => slot >= from && slot <= to)) return key
    }
    throw new Error(`local Redis Cluster: no probe key found for the slots of ${port}`)
  }
  const nodes = async (): Promise<ClusterNode[]> => {
    for (const p of live()) {
      const text = await node(p).cluster('NODES').catch(() => null)
      if (typeof text === 'string') return parseNodes(text).filter((n) => children.has(n.port))
    }
    throw new Error('local Redis Cluster: no live node answered CLUSTER NODES')
  }

  return {
    ports,
    startupNodes: ports.map((port) => ({ host: HOST, port })),
    nodes,
    node,
    kill,
    close,
    async masterOf (key: string): Promise<number> {
      const probe = node(live()[0]!)
      const slot = await probe.cluster('KEYSLOT', key) as number
      const shards = await probe.cluster('SLOTS') as unknown as Array<[number, number, [string, number, ...unknown[]], ...unknown[]]>
      const shard = shards.find(([from, to]) => slot >= from && slot <= to)
      if (shard === undefined) throw new Error(`local Redis Cluster: slot ${slot} is not served`)
      return shard[2][1]
    },
    async client (options: ClusterOptions = {}): Promise<Cluster> {
      const c = new Cluster(live().map((port) => ({ host: HOST, port })), { ...CLUSTER_FAIL_FAST, ...options })
      // Node errors are expected while a master is down; commands still reject.
      c.on('error', () => {})
      clients.push(c)
      if (c.status !== 'ready') await new Promise<void>((resolve, reject) => { c.once('ready', resolve); c.once('end', () => reject(new Error('cluster client ended'))) })
      return c
    },
    async cutOffReplicas (port: number): Promise<void> {
      const admin = node(port)
      await admin.config('SET', 'requirepass', randomBytes(16).toString('hex'))
      await admin.client('KILL', 'TYPE', 'replica')
      // Its replicas cannot come back: replication stays down.
      await until(async () => (await admin.info('replication')).includes('connected_slaves:0'), SETTLE_MS, `the replicas of ${port} to be cut off`)
    },
    async reconnectReplicas (port: number): Promise<void> {
      const admin = node(port)
      await admin.config('SET', 'requirepass', '')
      // A replica retries its master about once a second. One whose handshake straddled the
      // password change came through with some of its REPLCONF steps refused (NOAUTH, which a
      // replica treats as non-fatal): it shows `port=0` and its acknowledged offsets can trail
      // the master's for good, so WAIT never counts it. Such a link is cut again (the next
      // handshake is clean) until a write on this master is acknowledged by a replica.
      const probe = await keyServedBy(port)
      await until(async () => {
        const repl = await admin.info('replication')
        if (!repl.includes('state=online')) return false
        if (/slave\d+:ip=[^,]*,port=0,/.test(repl)) {
          await admin.client('KILL', 'TYPE', 'replica')
          return false
        }
        await admin.set(probe, String(Date.now()))
        if (await admin.wait(1, 500) >= 1) return true
        await admin.client('KILL', 'TYPE', 'replica')
        return false
      }, SETTLE_MS, `the replicas of ${port} to reconnect and acknowledge writes`)
    },
    async restart (port: number): Promise<void> {
      if (children.has(port)) return
      spawnNode(port)
      await until(async () => {
        const repl = await node(port).info('replication')
        return repl.includes('role:slave') && repl.includes('master_link_status:up')
      }, SETTLE_MS, `node ${port} to rejoin as a replica`)
    },
    async waitForPromotion (port: number, ms = SETTLE_MS): Promise<number> {
      const candidates = replicasOf.get(port) ?? []
      let promoted = 0
      await until(async () => {
        const now = await nodes()
        const replacement = now.find((n) => n.role === 'master' && n.slots > 0 && candidates.includes(n.port))
        if (replacement === undefined || now.filter((n) => n.role === 'master' && n.slots > 0).length !== 3) return false
        for (const p of live()) {
          const info = await node(p).cluster('INFO') as string
          if (!info.includes('cluster_state:ok')) return false
        }
        promoted = replacement.port
        return true
      }, ms, `a replica of ${port} to take over`)
      return promoted
    },
  }
}
