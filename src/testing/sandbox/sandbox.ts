import crypto, { type KeyObject } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { WEBHOOK_EVENT_TYPES } from '../../events/types.js'
import { Journal } from '../inspector/journal.js'
import { generateSigningKeyPair } from '../sign-webhook.js'
import { parseTarget } from './delivery.js'
import { resolveSandboxOptions } from './options.js'
import { createApiHandler, TAMPER_KINDS, type SandboxCore } from './routes.js'
import { sampleEvent } from './sample-events.js'
import { createSender } from './sender.js'
import type { Sandbox, SandboxOptions, SandboxStats } from './types.js'

export { isLoopbackHostHeader } from './routes.js'
export type { EndpointAnswer } from './answer.js'
export type { SandboxResend, SandboxValidation, TamperKind } from './routes.js'
export type { SandboxOptions, AttemptDetail, DeliverOptions, SandboxStats, StartOptions, Sandbox } from './types.js'

// The sandbox put together: its options (options.ts), signing keys, enrolled endpoints, the
// delivery loop (sender.ts), the HTTP API (routes.ts) and the `Sandbox` object.

interface ServedKey { id: string, publicKey: string, privateKey: KeyObject }

const randomKeyId = (): string => `sandbox-${crypto.randomBytes(8).toString('hex')}`

/** Endpoints one sandbox accepts at most. */
const MAX_ENDPOINTS = 10

/**
 * Starts a sandbox: an API server on 127.0.0.1 that serves MailChannels' webhook routes in the
 * service's wire format (`GET /tx/v1/webhook/public-key`, `GET /tx/v1/webhook-batch`,
 * `POST|GET|DELETE /tx/v1/webhook`, `POST /tx/v1/webhook/validate`,
 * `POST /tx/v1/webhook-batch/{id}/resend`, plus `POST /sandbox/rotate-key` and
 * `POST /sandbox/deliver`), the inspector page at `/` (open `inspectorUrl`), and a sender that
 * POSTs signed batches to the enrolled endpoints.
 */
export async function createSandbox (options: SandboxOptions = {}): Promise<Sandbox> {
  const settings = resolveSandboxOptions(options)
  const { endpoints, port, customerHandle, apiKey, maxKeys, logger } = settings

  const keys = new Map<string, ServedKey>()
  let current!: ServedKey
  const rotateKey = (): { keyId: string, publicKey: string } => {
    const pair = generateSigningKeyPair()
    current = { id: randomKeyId(), publicKey: pair.publicKey, privateKey: pair.privateKey }
    keys.set(current.id, current)
    // A Map iterates in insertion order: the first key is the oldest.
    while (keys.size > maxKeys) keys.delete(keys.keys().next().value!)
    logger.info({ keyId: current.id }, 'sandbox signing key rotated')
    journal.infoChanged()
    return { keyId: current.id, publicKey: current.publicKey }
  }

  const journal = new Journal()
  rotateKey()
  const stats: SandboxStats = { publicKeyRequests: 0, batchListRequests: 0, attempts: 0, validations: 0, resends: 0 }
  const sender = createSender(settings, { endpoints, journal, stats, signingKey: () => current })
  const { batches, deliverDetailed, resend, validate } = sender

  const enroll = (endpoint: string | URL, option = 'endpoint'): boolean => {
    const href = parseTarget(endpoint, option)
    // Kept as given when it is clean text: the listing's `webhook` filter matches it exactly.
    const url = typeof endpoint === 'string' && !/[\u0000-\u0020\u007f]/.test(endpoint) ? endpoint : href
    if (endpoints.includes(url)) return false
    if (endpoints.length >= MAX_ENDPOINTS) throw new TypeError(`${option}: the sandbox takes at most ${MAX_ENDPOINTS} endpoints; remove them first`)
    endpoints.push(url)
    logger.info({ endpoint: url }, 'sandbox endpoint enrolled')
    journal.infoChanged()
    return true
  }

  let baseUrl = ''
  const removeEndpoints = (): void => {
    endpoints.length = 0
    journal.infoChanged()
  }
  const core: SandboxCore = {
    apiKey,
    customerHandle,
    get batches () { return batches },
    get endpoints () { return endpoints },
    publicKey: (id) => keys.get(id)?.publicKey ?? null,
    countRequest: (kind) => { if (kind === 'publicKey') stats.publicKeyRequests++; else stats.batchListRequests++ },
    enroll: (endpoint) => enroll(endpoint),
    removeEndpoints,
    validate,
    resend,
    rotateKey,
    deliverOne: async (tamper, types, attempts) => {
      if (endpoints.length === 0) return null
      const events = types?.map((type) => sampleEvent(type, customerHandle))
      return await deliverDetailed(events, { ...(tamper !== undefined ? { tamper } : {}), ...(attempts !== undefined ? { maxAttempts: attempts } : {}) })
    },
    inspector: {
      mode: 'sandbox',
      journal,
      info: () => ({ baseUrl, customerHandle, keyId: current.id, endpoints: [...endpoints], eventTypes: WEBHOOK_EVENT_TYPES, tamperKinds: TAMPER_KINDS }),
    },
  }

  const server = http.createServer(createApiHandler(core, logger))
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address() as AddressInfo
  baseUrl = `http://127.0.0.1:${address.port}`
  let closed: Promise<void> | null = null

  const sandbox: Sandbox = {
    baseUrl,
    get publicKey () { return current.publicKey },
    get keyId () { return current.id },
    apiKey: '',
    inspectorUrl: '',
    customerHandle,
    get target () { return endpoints[0] ?? null },
    get endpoints () { return [...endpoints] },
    get batches () { return batches },
    get stats () { return { ...stats } },
    enroll: (endpoint) => enroll(endpoint),
    removeEndpoints,
    validate: async (requestId) => {
      if (requestId !== undefined && (typeof requestId !== 'string' || requestId === '' || requestId.length > 28)) throw new TypeError('requestId must be a string of 1 to 28 characters')
      return validate(requestId)
    },
    resend: async (batchId) => {
      if (!Number.isSafeInteger(batchId) || batchId < 1) throw new TypeError('batchId must be a positive integer')
      return resend(batchId)
    },
    rotateKey,
    sign: (events) => sender.sign(events),
    deliver: sender.deliver,
    start (opts = {}) {
      if (opts === null || typeof opts !== 'object') throw new TypeError('start options must be an object')
      if (opts.count !== undefined && (!Number.isSafeInteger(opts.count) || opts.count < 1)) throw new TypeError('count must be a positive integer')
      if (opts.target !== undefined) enroll(opts.target, 'target')
      sender.start(opts.count)
    },
    stop: sender.stop,
    finished: sender.finished,
    close () {
      closed ??= (async () => {
        await sender.abort()
        await new Promise<void>((resolve) => {
          server.close(() => resolve())
          server.closeAllConnections()
        })
        sender.dispose()
      })()
      return closed
    },
  }
  // Not enumerable: readable where it is needed, absent from inspect output, logs and JSON.
  Object.defineProperty(sandbox, 'apiKey', { value: apiKey, enumerable: false, writable: false })
  Object.defineProperty(sandbox, 'inspectorUrl', { value: `${baseUrl}/#key=${encodeURIComponent(apiKey)}`, enumerable: false, writable: false })
  return sandbox
}
