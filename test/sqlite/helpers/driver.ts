// The app's own SQLite connection in the tests, with the driver this Node line can load:
// better-sqlite3 where its native binary loads (it is built for the Node line that ran `npm ci`,
// so on the other lines CI tests it does not), else node:sqlite (Node 22.13+). The store picks
// its driver the same way (src/sqlite/index.ts).
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

/** What the tests use of a connection, in both drivers. */
export interface AppDatabase {
  exec: (sql: string) => unknown
  prepare: (sql: string) => { run: (...values: unknown[]) => unknown, all: (...values: unknown[]) => unknown[] }
  close: () => unknown
}

type Open = (file: string, options?: { timeout?: number }) => AppDatabase

function load (): { driver: 'better-sqlite3' | 'node:sqlite', open: Open } {
  try {
    const Database = require('better-sqlite3') as new (file: string, options?: { timeout?: number }) => AppDatabase
    new Database(':memory:').close()
    return { driver: 'better-sqlite3', open: (file, options) => new Database(file, options) }
  } catch {
    const { DatabaseSync } = require('node:sqlite') as { DatabaseSync: new (file: string, options?: { timeout?: number }) => AppDatabase }
    return { driver: 'node:sqlite', open: (file, options) => new DatabaseSync(file, options ?? {}) }
  }
}

const loaded = load()

/** The driver the tests' own connections use here. */
export const driver = loaded.driver
/** Opens the app's connection to `file` (`timeout`: the driver's busy timeout in milliseconds). */
export const openDatabase: Open = loaded.open
/** Whether a transaction is open on `db` (better-sqlite3 `inTransaction`, node:sqlite `isTransaction`). */
export function inTransaction (db: unknown): boolean {
  const d = db as { inTransaction?: boolean, isTransaction?: boolean }
  return Boolean(d.inTransaction ?? d.isTransaction)
}
/** Why a test of better-sqlite3's own API (`db.transaction()`) does not run here, or false. */
export const needsBetterSqlite3: string | false = driver === 'better-sqlite3' ? false : `better-sqlite3 does not load on Node ${process.version} here (built for the Node line that ran npm ci); its db.transaction() is tested there`

/** SQLite's result code name of a driver error: better-sqlite3's `code`, node:sqlite's `errcode`. */
export function sqliteCode (err: unknown): string | undefined {
  const e = err as { code?: string, errcode?: number } | null
  if (typeof e?.code === 'string' && e.code.startsWith('SQLITE_')) return e.code
  return e?.errcode === undefined ? undefined : ({ 5: 'SQLITE_BUSY', 787: 'SQLITE_CONSTRAINT_FOREIGNKEY' } as Record<number, string>)[e.errcode] ?? `SQLITE_${e.errcode}`
}

/** The error `call` throws (undefined if it does not). */
export function thrown (call: () => unknown): unknown {
  try { call() } catch (err) { return err }
  return undefined
}

/** The file a connection has open (better-sqlite3 `name`, node:sqlite `location()`). */
export function fileOf (db: unknown): string {
  const d = db as { name?: string, location?: () => string | null }
  const file = typeof d.location === 'function' ? d.location() : d.name
  if (typeof file !== 'string') throw new TypeError('the connection has no file')
  return file
}
