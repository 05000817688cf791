// Shared pieces of the BullMQ tests: sample events of every shape, and queues on a real redis-server.
import type { Test } from 'tap'
import { Queue, type QueueOptions } from 'bullmq'
import type { Redis } from 'ioredis'
import type { WebhookEvent } from '../../src/events/types.js'
import type { WebhookEventJobData } from '../../src/bullmq/index.js'
import type { RedisServer } from '../replay/helpers/redis-server.js'

export const CUSTOMER = 'acct_queue'

let seq = 0
/** `count` distinct events of mixed types, one of them of a type this version does not know (nested extra fields). */
export function sampleEvents (count: number, tag = `${process.pid}-${Date.now()}-${++seq}`): WebhookEvent[] {
  const events: WebhookEvent[] = []
  for (let i = 0; i < count; i++) {
    const base = { customerHandle: CUSTOMER, timestamp: 1_760_000_000 + i, requestId: `${tag}-${i}`, email: `s${i}@example.com`, recipients: [`b${i}@example.net`, `a${i}@example.net`] }
    switch (i % 4) {
      case 0: events.push({ ...base, event: 'hard-bounced', status: '5.1.1', reason: 'no such user' }); break
      case 1: events.push({ ...base, event: 'click', url: 'https://example.com/?a=1&b=2', ip: '192.0.2.1', userAgent: 'UA/1' }); break
      case 2: events.push({ ...base, event: 'delivered' }); break
      default: events.push({ ...base, event: 'unknown', eventName: 'future-thing', fields: { nested: { b: [1, 2, { c: null }], a: 'x' }, 'ünï': true } })
    }
  }
  return events
}

/** A unique queue name per call, so tests on one server never share a queue. */
export function queueName (label: string): string {
  return `${label}-${process.pid}-${++seq}`
}

/** A Queue on the test server with a fail-fast producer connection (as the README recommends), closed at teardown. */
export async function testQueue (t: Test, server: RedisServer, options: Partial<QueueOptions> & { name?: string } = {}): Promise<{ queue: Queue<WebhookEventJobData>, connection: Redis }> {
  const connection = await server.client({ enableOfflineQueue: false, commandTimeout: undefined, maxRetriesPerRequest: 1 })
  const { name = queueName('q'), ...rest } = options
  const queue = new Queue<WebhookEventJobData>(name, { connection, prefix: '{mailchannels-webhooks}', ...rest })
  queue.on('error', () => {})
  t.teardown(async () => { await queue.close().catch(() => {}) })
  return { queue, connection }
}

/** A logger that remembers every line, for asserting what was (not) logged. */
export function memoryLogger (): { lines: Array<{ level: string, obj: object, msg?: string }>, debug: (o: object, m?: string) => void, info: (o: object, m?: string) => void, warn: (o: object, m?: string) => void, error: (o: object, m?: string) => void } {
  const lines: Array<{ level: string, obj: object, msg?: string }> = []
  const at = (level: string) => (obj: object, msg?: string): void => { lines.push({ level, obj, msg }) }
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}
