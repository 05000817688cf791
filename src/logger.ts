/**
 * The logger shape the library writes to: structurally a subset of pino's `BaseLogger`,
 * so Fastify's `request.log` or any pino instance fits without a pino type dependency.
 * Object first, message second (pino's convention).
 */
export interface Logger {
  debug (obj: object, msg?: string): void
  info (obj: object, msg?: string): void
  warn (obj: object, msg?: string): void
  error (obj: object, msg?: string): void
}

const noop = (): void => {}

/** The default: the core logs nothing unless given a logger. */
export const noopLogger: Logger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop })
