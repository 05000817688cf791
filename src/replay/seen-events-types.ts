// Deprecated path: the contract is ./claim-store.ts. Kept for imports outside src/replay until they move.
export * from './claim-store.js'
