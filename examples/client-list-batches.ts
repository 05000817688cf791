// Lists webhook delivery batches page by page with iterateBatches().
//
//   MAILCHANNELS_API_KEY=... npx tsx examples/client-list-batches.ts          # the real API
//   MAILCHANNELS_BASE_URL=http://127.0.0.1:8787 MAILCHANNELS_API_KEY=... npx tsx examples/client-list-batches.ts
//   npx tsx examples/client-list-batches.ts                                   # a local sandbox
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { MailChannels, MailChannelsError } from 'mailchannels-webhooks'
import { createSandbox } from 'mailchannels-webhooks/testing'

async function main (): Promise<void> {
  let baseUrl = process.env.MAILCHANNELS_BASE_URL
  // The client refuses a key with surrounding whitespace (a trailing newline from a file or a
  // shell), so trim what you read.
  let apiKey = process.env.MAILCHANNELS_API_KEY?.trim()
  const cleanup: Array<() => Promise<void>> = []

  if (apiKey === undefined) {
    // No credentials: a sandbox plays the API, delivering a few batches to a local receiver.
    const receiver = http.createServer((_req, res) => { res.statusCode = 204; res.end() })
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
    const sandbox = await createSandbox({ target: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/webhooks` })
    cleanup.push(() => sandbox.close(), () => new Promise<void>((resolve) => receiver.close(() => resolve())))
    for (let i = 0; i < 5; i++) await sandbox.deliver()
    baseUrl = sandbox.baseUrl
    apiKey = sandbox.apiKey
  }

  const client = new MailChannels(apiKey, { baseUrl, timeout: 10_000 })
  const createdAfter = new Date(Date.now() - 24 * 3600_000) // the last day
  // Ctrl-C cancels the page in flight (its connection is closed) and ends the listing.
  const stop = new AbortController()
  const onInterrupt = (): void => stop.abort()
  process.once('SIGINT', onInterrupt)
  try {
    let n = 0
    for await (const batch of client.webhooks.iterateBatches({ createdAfter, limit: 2 }, { signal: stop.signal })) {
      n++
      // The API's strings are outside text: JSON.stringify escapes control characters for the terminal.
      console.log(`${JSON.stringify(batch.createdAt)}  #${batch.batchId}  ${JSON.stringify(batch.status)} (${batch.statusCode ?? '-'})  ${batch.eventCount} events  ${JSON.stringify(batch.webhook)}`)
    }
    console.log(`${n} batches`)
  } catch (err) {
    // iterateBatches is the one API that throws; err.error is the ErrorResponse.
    if (err instanceof MailChannelsError) console.error(`listing failed: ${err.type} ${err.statusCode ?? ''} ${err.message}`)
    else throw err
    process.exitCode = 1
  } finally {
    process.removeListener('SIGINT', onInterrupt)
    for (const c of cleanup) await c()
  }
}

await main()
