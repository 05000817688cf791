// The seen-events stores, one door for the router, the entries and the PostgreSQL and SQLite
// stores: the contract (seen-events-types.ts), one store per file (memory-seen-events.ts,
// redis-seen-events.ts) and the per-event helpers (seen-events-helpers.ts).
export { isTransactionalStore, claimTokens } from './seen-events-types.js'
export type { EventClaim, EventClaimResult, SeenEventsStore, TransactionalSeenEventsStore, SeenEventsStoreOptions } from './seen-events-types.js'
export { MemorySeenEventsStore, synchronousSeenEvents, CLAIMED, PROCESSING, DONE, REPEATED } from './memory-seen-events.js'
export type { MemorySeenEventsStoreOptions, SynchronousSeenEvents } from './memory-seen-events.js'
export { RedisSeenEventsStore } from './redis-seen-events.js'
export type { RedisSeenEventsStoreOptions } from './redis-seen-events.js'
export { filterUnseen, markSeen, claimUnseen } from './seen-events-helpers.js'
