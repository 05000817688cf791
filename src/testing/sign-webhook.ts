import crypto, { type KeyObject } from 'node:crypto'
import type { WebhookEvent } from '../events/types.js'

/** A key pair for signing test deliveries. */
export interface SigningKeyPair {
  /** The public key as the public-key endpoint serves it: base64 SPKI DER (`MCowBQYDK2VwAyEA…`). */
  publicKey: string
  /** The same public key as PEM. */
  publicKeyPem: string
  /** The private key; keep it in tests. */
  privateKey: KeyObject
}

/** Generates an Ed25519 key pair shaped like MailChannels' signing key. */
export function generateSigningKeyPair (): SigningKeyPair {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519')
  return {
    publicKey: publicKey.export({ format: 'der', type: 'spki' }).toString('base64'),
    publicKeyPem: publicKey.export({ format: 'pem', type: 'spki' }).toString(),
    privateKey,
  }
}

/** An event as it travels on the wire (snake_case). */
export type WireEvent = Record<string, unknown> & { event: string, customer_handle: string, timestamp: number }

const WIRE_NAMES: Record<string, string> = {
  customerHandle: 'customer_handle',
  requestId: 'request_id',
  smtpId: 'smtp_id',
  campaignId: 'campaign_id',
  userAgent: 'user_agent',
}

/** Maps a `WebhookEvent` back to the wire's snake_case shape (an unknown event gets its original name back; every event its `fields`). */
export function toWireEvent (event: WebhookEvent | WireEvent): WireEvent {
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(event)) {
    if (value === undefined || key === 'eventName' || key === 'fields') continue
    out[WIRE_NAMES[key] ?? key] = value
  }
  if (event.event === 'unknown' && 'eventName' in event) {
    out.event = event.eventName
    Object.assign(out, event.fields)
  } else if ('customerHandle' in event && event.fields !== undefined) {
    Object.assign(out, event.fields) // a known type's fields it does not model, as sent
  }
  return out as WireEvent
}

export interface SignWebhookOptions {
  /** The exact body to sign. Give this or `events`. */
  payload?: string | Uint8Array
  /** Events to serialise as the body (`WebhookEvent`s or snake_case wire events). Give this or `payload`. */
  events?: ReadonlyArray<WebhookEvent | WireEvent>
  /** The Ed25519 private key (a `KeyObject` or PKCS#8 PEM). */
  privateKey: KeyObject | string
  /**
   * The `keyid`.
   * @default "mckey"
   */
  keyId?: string
  /**
   * The `created` time, Unix seconds.
   * @default now
   */
  created?: number
  /**
   * The signature label.
   * @default sig_<created>
   */
  label?: string
}

/** A delivery exactly as MailChannels sends it. */
export interface SignedWebhook {
  /**
   * The raw body bytes: a `Buffer` over an `ArrayBuffer`, so TypeScript takes it as a `fetch`,
   * `Request` or `Response` body (DOM and undici `BodyInit` refuse a `Buffer<ArrayBufferLike>`),
   * and as an `inject` payload.
   */
  body: Buffer<ArrayBuffer>
  /** `content-type`, `content-digest`, `signature-input`, `signature` (lower-case names). */
  headers: {
    'content-type': string
    'content-digest': string
    'signature-input': string
    signature: string
  }
}

/**
 * Signs a delivery the way MailChannels does: Content-Digest sha-256
 * over the body, and an Ed25519 RFC 9421 signature over `content-digest` with parameters
 * `created`, `alg`, `keyid` in that order.
 */
export function signWebhook (options: SignWebhookOptions): SignedWebhook {
  const { payload, events, keyId = 'mckey' } = options
  if ((payload === undefined) === (events === undefined)) throw new TypeError('signWebhook needs exactly one of payload or events')
  const created = options.created ?? Math.floor(Date.now() / 1000)
  if (!Number.isSafeInteger(created)) throw new TypeError('created must be an integer number of seconds')
  const label = options.label ?? `sig_${created}`
  const body: Buffer<ArrayBuffer> = payload !== undefined
    ? Buffer.from(typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload)
    : Buffer.from(JSON.stringify(events!.map(toWireEvent)), 'utf8')
  const privateKey = typeof options.privateKey === 'string' ? crypto.createPrivateKey(options.privateKey) : options.privateKey
  const contentDigest = `sha-256=:${crypto.hash('sha256', body, 'base64')}:`
  const params = `("content-digest");created=${created};alg="ed25519";keyid="${keyId}"`
  const base = `"content-digest": ${contentDigest}\n"@signature-params": ${params}`
  const signature = crypto.sign(null, Buffer.from(base, 'utf8'), privateKey).toString('base64')
  return {
    body,
    headers: {
      'content-type': 'application/json',
      'content-digest': contentDigest,
      'signature-input': `${label}=${params}`,
      signature: `${label}=:${signature}:`,
    },
  }
}
