// For this repository's type-check only (Deno has these types built in; Deno never loads this file).
declare namespace Deno {
  const env: { get (name: string): string | undefined }
  function serve (options: { hostname?: string, port?: number, onListen?: (addr: { hostname: string, port: number }) => void }, handler: (request: Request) => Response | Promise<Response>): { finished: Promise<void> }
}
