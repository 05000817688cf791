// Type test (compiled by tsc, never run): an ioredis `Cluster` is as good a client for the
// Redis stores as a `Redis`.
import { Cluster, Redis } from 'ioredis'
import { RedisClaimStore, type RedisClientLike } from '../../src/index.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'

export function clients (): void {
  const single: RedisClientLike = new Redis({ lazyConnect: true })
  const cluster: RedisClientLike = new Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true })
  void [single, cluster]
  void new RedisClaimStore(new Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true }), { waitForReplicas: 1, waitTimeout: 100 })
  void new RedisReplayStore(new Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true }), { waitForReplicas: 1 })
  void new RedisClaimStore(new Redis({ lazyConnect: true }))
  // @ts-expect-error a client without eval/evalsha is not one
  const partial: RedisClientLike = { get: async () => null, del: async () => 0 }
  void partial
}
