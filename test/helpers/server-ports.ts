// Ports for the real servers the tests start (redis-server, a Redis Cluster, PostgreSQL, child
// processes told their port). A port
// the kernel picks (`listen(0)`) comes from its ephemeral range (32768-60999 on Linux), the range
// every outgoing connection of every test takes its local port from: a server that the tests stop
// and start again on its port can find it taken meanwhile, and a Redis Cluster node needs port +
// 10000 (its cluster bus) free as well, which above 55535 does not exist. So servers take ports
// below that range, each range apart, each port checked free; what another test file took
// between the check and the server's start makes that server fail to start (the helpers say so).
import net from 'node:net'

/**
 * The ranges, apart from one another: ports no server is given (`closedPort`), servers of child
 * processes the tests start on a port they choose (the README's receiver and sandbox), Redis
 * Cluster nodes (their buses at +10000: 30000-32767), single Redis servers, PostgreSQL.
 */
export const PORT_RANGES = {
  refused: { from: 10000, to: 11999 },
  children: { from: 12000, to: 19999 },
  redisCluster: { from: 20000, to: 22767 },
  redisServer: { from: 23000, to: 26999 },
  postgres: { from: 27000, to: 29999 },
} as const

/** Whether nothing listens on 127.0.0.1:`port` (nor holds it otherwise). */
async function isFree (port: number): Promise<boolean> {
  return await new Promise((resolve) => {
    const server = net.createServer()
    server.once('error', () => { resolve(false) })
    server.listen(port, '127.0.0.1', () => { server.close(() => { resolve(true) }) })
  })
}

/**
 * `count` distinct free ports of `range`, picked at random (test files started together rarely
 * pick the same); with `alsoFree`, the port `alsoFree` above each must be free too.
 */
export async function serverPorts (range: { from: number, to: number }, count = 1, alsoFree?: number): Promise<number[]> {
  const ports: number[] = []
  for (let tries = 0; ports.length < count; tries++) {
    if (tries > 10_000) throw new Error(`no ${count} free ports in ${range.from}-${range.to} on 127.0.0.1`)
    const p = range.from + Math.floor(Math.random() * (range.to - range.from + 1))
    if (!ports.includes(p) && await isFree(p) && (alsoFree === undefined || await isFree(p + alsoFree))) ports.push(p)
  }
  return ports
}
