// The SQLite driver of the stores in this folder: `node:sqlite` where the Node line has it, else
// better-sqlite3, chosen when a store opens a file; and the few checks on files and errors they share.
import { closeSync, constants, openSync } from 'node:fs'
import { createRequire } from 'node:module'

/** A prepared statement of `node:sqlite` (`StatementSync`) or better-sqlite3 (`Statement`). */
export interface SqliteStatementLike {
  run (...params: any[]): { changes: number | bigint }
  all (...params: any[]): unknown[]
}

/** An open database of `node:sqlite` (`DatabaseSync`) or better-sqlite3 (`Database`). */
export interface SqliteDatabaseLike {
  exec (sql: string): unknown
  prepare (sql: string): SqliteStatementLike
  close (): unknown
}

/** Whether `file` names an in-memory (or temporary) database rather than a file: https://www.sqlite.org/inmemorydb.html */
export function isMemoryPath (file: string): boolean {
  return file === ':memory:' || file === '' || (/^file:/i.test(file) && (/^file::memory:/i.test(file) || /[?&]mode=memory(&|$)/i.test(file)))
}

/** SQLITE_BUSY and its extended codes (https://www.sqlite.org/rescode.html#busy): another connection holds the lock. */
export function isBusy (err: unknown): boolean {
  const e = err as { code?: unknown, errcode?: unknown } | null
  if (e === null || typeof e !== 'object') return false
  if (typeof e.errcode === 'number') return (e.errcode & 0xff) === 5
  return typeof e.code === 'string' && e.code.startsWith('SQLITE_BUSY')
}

/** Creates `file` with mode 0600 if it does not exist, so SQLite's -wal and -shm files, which take the database file's mode, are 0600 too. */
export function createPrivately (file: string): void {
  if (/^file:/i.test(file)) return
  try {
    closeSync(openSync(file, constants.O_CREAT | constants.O_EXCL | constants.O_WRONLY, 0o600))
  } catch {
    // It exists (its mode is its owner's), or cannot be created: opening it reports that.
  }
}

/** Opens `file` with the driver this Node line has: `node:sqlite`, else better-sqlite3. */
export function openDatabase (file: string): SqliteDatabaseLike {
  let builtin: { DatabaseSync?: new (path: string) => SqliteDatabaseLike } | undefined
  try {
    builtin = process.getBuiltinModule?.('node:sqlite') as typeof builtin
  } catch {
    builtin = undefined
  }
  if (builtin?.DatabaseSync !== undefined) return new builtin.DatabaseSync(file)
  let Database: new (path: string) => SqliteDatabaseLike
  try {
    Database = createRequire(import.meta.url)('better-sqlite3') as typeof Database
  } catch (err) {
    throw new TypeError(`sqliteSeenEvents needs node:sqlite (Node 22.13 or later) or the better-sqlite3 package on this Node ${process.version}: npm install better-sqlite3 (${err instanceof Error ? err.message.split('\n')[0] : String(err)})`)
  }
  return new Database(file)
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/

/**
 * The options every SQLite store of the package shares, checked once for all of them: exactly
 * one of `path` and `database`, and a plain identifier as `table`. `factory` names the function
 * in the message (`sqliteSeenEvents`, `sqliteDeadLetters`).
 */
export function checkDatabaseOptions (factory: string, path: unknown, database: unknown, table: unknown): void {
  if ((path === undefined) === (database === undefined)) throw new TypeError(`give ${factory} exactly one of path (a database file to open) or database (your own open node:sqlite or better-sqlite3 database)`)
  if (path !== undefined && typeof path !== 'string') throw new TypeError('path must be the database file name (a string)')
  const db = database as Partial<SqliteDatabaseLike> | null | undefined
  if (database !== undefined && (db === null || typeof db !== 'object' || typeof db.prepare !== 'function' || typeof db.exec !== 'function')) {
    throw new TypeError('database must be an open node:sqlite DatabaseSync or better-sqlite3 Database (with prepare and exec)')
  }
  if (typeof table !== 'string' || !IDENTIFIER.test(table)) throw new TypeError('table must be a SQLite identifier of letters, digits and underscores (at most 63)')
}
