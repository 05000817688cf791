// For this repository's type-check only (Bun has these types built in; Bun never loads this file).
declare namespace Bun {
  const env: Record<string, string | undefined>
  function serve (options: { hostname?: string, port?: number, fetch: (request: Request) => Response | Promise<Response> }): { url: URL, port: number, stop: () => void }
}
