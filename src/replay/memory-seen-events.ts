// Deprecated path: the store is ./memory-claim-store.ts. Kept for imports outside src/replay until they move.
export * from './memory-claim-store.js'
