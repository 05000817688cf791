// A loopback port nothing listens on, for "the server is down" cases. A port merely released
// (bound to 0, then closed) can be handed to the very next server that listens on port 0, and
// then the "down" server answers (seen once on CI: a key fetch got the test's own app, 404,
// `unknown_key` instead of `key_unavailable`).
import { readFileSync } from 'node:fs'
import net from 'node:net'

/**
 * The low end of the OS's ephemeral range (where every `listen(0)` in these tests gets its
 * port), or 0 where it cannot be read or leaves no room below it.
 */
function ephemeralLow (): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0])
    return Number.isSafeInteger(low) && low > 21_000 ? low : 0
  } catch {
    return 0
  }
}

/** Whether a connection to `port` on loopback is refused right now. */
async function refuses (port: number): Promise<boolean> {
  return await new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port })
    socket.once('connect', () => { socket.destroy(); resolve(false) })
    socket.once('error', (err: NodeJS.ErrnoException) => { resolve(err.code === 'ECONNREFUSED') })
  })
}

/**
 * A port on 127.0.0.1 that refuses connections and stays so: one below the ephemeral range
 * (20000 and up, no well-known service) that refuses now, since no server of these tests can be
 * given it. Where the range is unknown (not Linux), a released port.
 */
export async function closedPort (): Promise<number> {
  const low = ephemeralLow()
  for (let i = 0; low > 0 && i < 50; i++) {
    const port = 20_000 + Math.floor(Math.random() * (low - 20_000))
    if (await refuses(port)) return port
  }
  const server = net.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as net.AddressInfo).port
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}
