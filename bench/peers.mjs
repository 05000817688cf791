// Other packages that verify the same deliveries, for comparison. Both are optional: a peer that
// is not installed is reported and skipped. Neither parses the events, so both are compared
// with the ideal receiver without JSON.parse.
import crypto from 'node:crypto'
import { installedVersion } from './lib/env.mjs'
import { KEY_ID } from './lib/fixtures.mjs'

async function importPeer (pkg) {
  try {
    return await import(pkg)
  } catch (err) {
    if (err?.code === 'ERR_MODULE_NOT_FOUND') return null
    throw err
  }
}

const PEERS = [
  {
    pkg: 'mailchannels-sdk',
    // Webhooks.verify (static) with the key given, so no network. It takes the payload as a
    // string (made outside the timed region), imports the key with WebCrypto on every call and
    // returns a boolean.
    async load (mod) {
      const { Webhooks } = mod
      return {
        name: `mailchannels-sdk ${installedVersion('mailchannels-sdk')} Webhooks.verify`,
        payloadType: 'string',
        verify: (payload, headers, publicKey) => Webhooks.verify({ payload, headers, publicKey }),
      }
    },
  },
  {
    pkg: 'http-message-signatures',
    // httpbis.verifyMessage with an Ed25519 verifier over a cached KeyObject. It checks the
    // signature over the Content-Digest header only, so the body's digest is checked here the
    // same way the ideal receiver does (otherwise a tampered body would pass).
    async load (mod, publicKey) {
      const { httpbis, createVerifier } = mod
      const key = crypto.createPublicKey({ key: Buffer.from(publicKey, 'base64'), format: 'der', type: 'spki' })
      const verifier = { id: KEY_ID, algs: ['ed25519'], verify: createVerifier(key, 'ed25519') }
      const keyLookup = async (params) => (params.keyid === KEY_ID ? verifier : null)
      return {
        name: `http-message-signatures ${installedVersion('http-message-signatures')} verifyMessage (+ digest)`,
        payloadType: 'buffer',
        async verify (payload, headers) {
          const digest = headers['content-digest']
          if (!digest?.startsWith('sha-256=:') || digest.slice(9, -1) !== crypto.hash('sha256', payload, 'base64')) return false
          return httpbis.verifyMessage(
            { keyLookup, maxAge: 300, requiredFields: ['content-digest'] },
            { method: 'POST', url: 'http://127.0.0.1/webhook', headers },
          )
        },
      }
    },
  },
]

/**
 * The installed peers, ready to time, and a line for each missing one.
 * @returns {Promise<{ peers: Array<{name: string, payloadType: 'string'|'buffer', verify: Function}>, missing: string[] }>}
 */
export async function loadPeers (publicKey) {
  const peers = []
  const missing = []
  for (const p of PEERS) {
    const mod = await importPeer(p.pkg)
    if (mod === null) missing.push(`${p.pkg} is not installed: its comparison is skipped (npm install --no-save ${p.pkg} to include it).`)
    else peers.push(await p.load(mod, publicKey))
  }
  return { peers, missing }
}
