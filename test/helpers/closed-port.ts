// A loopback port nothing listens on, for "the server is down" cases. A port merely released
// (bound to 0, then closed) can be handed to the very next server that listens on port 0, and
// then the "down" server answers (seen once on CI: a key fetch got the test's own app, 404,
// `unknown_key` instead of `key_unavailable`).
import net from 'node:net'
import { PORT_RANGES } from './server-ports.js'

/** Whether a connection to `port` on loopback is refused right now. */
async function refuses (port: number): Promise<boolean> {
  return await new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port })
    socket.once('connect', () => { socket.destroy(); resolve(false) })
    socket.once('error', (err: NodeJS.ErrnoException) => { resolve(err.code === 'ECONNREFUSED') })
  })
}

/**
 * A port on 127.0.0.1 that refuses connections and stays so: one of `PORT_RANGES.refused`, below
 * the ephemeral range and apart from every range the tests' servers are given, that refuses now.
 */
export async function closedPort (): Promise<number> {
  const { from, to } = PORT_RANGES.refused
  for (let i = 0; i < 200; i++) {
    const port = from + Math.floor(Math.random() * (to - from + 1))
    if (await refuses(port)) return port
  }
  throw new Error(`no port of ${from}-${to} refuses connections on 127.0.0.1`)
}
