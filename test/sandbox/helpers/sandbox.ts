import type { Test } from 'tap'
import { createSandbox, type Sandbox, type SandboxOptions } from '../../../src/testing/index.js'

/** A sandbox with test-speed retries, closed at teardown. */
export async function testSandbox (t: Test, options: SandboxOptions = {}): Promise<Sandbox> {
  const sandbox = await createSandbox({ retryDelay: 5, deliveryTimeout: 2000, ...options })
  t.teardown(() => sandbox.close())
  return sandbox
}

/** GETs a sandbox API path with the sandbox's API key (or `apiKey`), returning status and JSON. */
export async function api (sandbox: Sandbox, path: string, apiKey: string | null = sandbox.apiKey, method = 'GET'): Promise<{ status: number, body: any }> {
  const headers: Record<string, string> = apiKey === null ? {} : { 'x-api-key': apiKey }
  const res = await fetch(`${sandbox.baseUrl}${path}`, { method, headers })
  return { status: res.status, body: await res.json() }
}
