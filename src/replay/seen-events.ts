// The claim stores, one door for the router, the entries and the PostgreSQL and SQLite stores:
// the contract (claim-store.ts), one store per file (memory-claim-store.ts, redis-claim-store.ts).
// The older per-event names are exported too, deprecated, until their importers move.
export { isTransactionalStore, isClaimStore, claimTokens, DEFAULT_CLAIM_TTL } from './claim-store.js'
export type { StoreClaim, StoreClaimResult, ClaimStore, TransactionalClaimStore, ClaimStoreOptions } from './claim-store.js'
export { MemoryClaimStore, synchronousClaims, CLAIMED, PROCESSING, DONE, REPEATED } from './memory-claim-store.js'
export type { MemoryClaimStoreOptions, SynchronousClaims } from './memory-claim-store.js'
export { RedisClaimStore } from './redis-claim-store.js'
export type { RedisClaimStoreOptions } from './redis-claim-store.js'
// Deprecated names.
export { DEFAULT_SEEN_EVENTS_TTL } from './claim-store.js'
export type { EventClaim, EventClaimResult, SeenEventsStore, TransactionalSeenEventsStore, SeenEventsStoreOptions } from './claim-store.js'
export { MemorySeenEventsStore, synchronousSeenEvents } from './memory-claim-store.js'
export type { MemorySeenEventsStoreOptions, SynchronousSeenEvents } from './memory-claim-store.js'
export { RedisSeenEventsStore } from './redis-claim-store.js'
export type { RedisSeenEventsStoreOptions } from './redis-claim-store.js'
