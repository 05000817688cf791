import crypto from 'node:crypto'
import { noopLogger, type Logger } from '../../logger.js'
import { parseTarget } from './delivery.js'
import type { SandboxOptions } from './types.js'

/** `SandboxOptions` checked once, with their defaults. */
export interface ResolvedSandboxOptions {
  /** The endpoints enrolled at the start (`target`, if given). */
  endpoints: string[]
  port: number
  rate: number
  batchSize: number
  customerHandle: string
  apiKey: string
  deliveryTimeout: number
  maxAttempts: number
  retryDelay: number
  tamperEvery: number
  maxInFlight: number
  maxKeys: number
  logger: Logger
  onAttempt: SandboxOptions['onAttempt']
}

export function number (value: unknown, option: string, fallback: number, min: number, max: number, integer = true): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isFinite(value) || (integer && !Number.isInteger(value)) || value < min || value > max) {
    throw new TypeError(`${option} must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}`)
  }
  return value
}

function text (value: unknown, option: string, fallback: string): string {
  if (value === undefined) return fallback
  if (typeof value !== 'string' || value.trim() === '' || value.length > 255) throw new TypeError(`${option} must be a non-empty string of at most 255 characters`)
  return value
}

/** Checks `createSandbox`'s options, in the order they are documented; a bad value throws a TypeError naming the option. */
export function resolveSandboxOptions (options: SandboxOptions): ResolvedSandboxOptions {
  if (options === null || typeof options !== 'object') throw new TypeError('createSandbox options must be an object')
  const endpoints: string[] = options.target === undefined ? [] : [parseTarget(options.target)]
  const port = number(options.port, 'port', 0, 0, 65535)
  const rate = number(options.rate, 'rate', 1, 0.001, 100, false)
  const batchSize = number(options.batchSize, 'batchSize', 10, 1, 1000)
  const customerHandle = text(options.customerHandle, 'customerHandle', 'sandbox')
  // 192 random bits: a page or a process that cannot read the sandbox's output cannot guess it.
  const apiKey = text(options.apiKey, 'apiKey', crypto.randomBytes(24).toString('base64url'))
  // The same rule as the API client's, so the key works with new MailChannels(apiKey).
  if (!/^[\x21-\x7e]+$/.test(apiKey)) throw new TypeError('apiKey must be printable ASCII without spaces or control characters')
  const deliveryTimeout = number(options.deliveryTimeout, 'deliveryTimeout', 10_000, 1, 600_000)
  const maxAttempts = number(options.maxAttempts, 'maxAttempts', 3, 1, 10)
  const retryDelay = number(options.retryDelay, 'retryDelay', 1000, 0, 600_000)
  const tamperEvery = number(options.tamperEvery, 'tamperEvery', 0, 0, 1_000_000)
  const maxInFlight = number(options.maxInFlight, 'maxInFlight', 4, 1, 100)
  const maxKeys = number(options.maxKeys, 'maxKeys', 5, 1, 100)
  const logger = options.logger ?? noopLogger
  const onAttempt = options.onAttempt
  if (onAttempt !== undefined && typeof onAttempt !== 'function') throw new TypeError('onAttempt must be a function')
  return { endpoints, port, rate, batchSize, customerHandle, apiKey, deliveryTimeout, maxAttempts, retryDelay, tamperEvery, maxInFlight, maxKeys, logger, onAttempt }
}
