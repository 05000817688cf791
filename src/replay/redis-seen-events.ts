// Deprecated path: the store is ./redis-claim-store.ts. Kept for imports outside src/replay until they move.
export * from './redis-claim-store.js'
