// Compile-time test of the router's typing: `npx tsc -p tsconfig.json` checks it (it is not a
// runtime test file; test/dispatch/router.test.ts asserts the behaviour). Every
// `@ts-expect-error` line must fail to compile, or the type-check fails.
import { WebhookEventRouter, type DispatchReport, type HardBouncedEvent, type OpenEvent, type ClickEvent, type UnknownWebhookEvent, type WebhookEvent } from '../../src/index.js'
import type { Logger } from '../../src/logger.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

export function narrowing (): void {
  const router = new WebhookEventRouter()
  router.on('hard-bounced', (e) => {
    assertType<Equal<typeof e, HardBouncedEvent>>(true)
    const status: string | undefined = e.status
    // @ts-expect-error `url` exists only on click events
    void e.url
    return status
  })
  router.on(['open', 'click'], (e) => {
    assertType<Equal<typeof e, OpenEvent | ClickEvent>>(true)
    const ip: string | undefined = e.ip
    // @ts-expect-error `url` is only on click: narrow first
    void e.url
    if (e.event === 'click') void e.url
    return ip
  })
  router.on('unknown', (e) => {
    assertType<Equal<typeof e, UnknownWebhookEvent>>(true)
    const name: string = e.eventName
    const fields: Record<string, unknown> = e.fields
    void name; void fields
  })
  router.on('*', (e, context) => {
    assertType<Equal<typeof e, WebhookEvent>>(true)
    const fingerprint: string = context.fingerprint
    const signal: AbortSignal = context.signal
    const log: Logger = context.log
    void fingerprint; void signal; void log
  })
  // Chaining returns the router.
  const chained: WebhookEventRouter = router.on('open', () => {}).on('click', async () => {})
  void chained

  // @ts-expect-error not an event type
  router.on('bounced', () => {})
  // @ts-expect-error '*' goes alone, not in a list
  router.on(['*', 'open'], () => {})
  // @ts-expect-error the handler must be a function
  router.on('open', 'handler')
}

export async function context (events: WebhookEvent[]): Promise<void> {
  const router = new WebhookEventRouter<{ keyId: string }>()
  router.on('delivered', (e, context) => {
    assertType<Equal<typeof context.keyId, string>>(true)
    // @ts-expect-error not in the context
    void context.tenant
    void e
  })
  const report = await router.dispatch(events, { keyId: 'k1', signal: new AbortController().signal })
  assertType<Equal<typeof report, DispatchReport>>(true)
  // @ts-expect-error keyId must be a string
  await router.dispatch(events, { keyId: 1 })

  const plain = new WebhookEventRouter()
  await plain.dispatch(events)
  await plain.dispatch(events, { log: console as unknown as Logger })
  for (const outcome of report.outcomes) {
    if (outcome.status === 'failed') void outcome.error
    // @ts-expect-error only a failed outcome has an error
    else void outcome.error
  }

  // @ts-expect-error concurrency is a number
  void new WebhookEventRouter({ concurrency: '2' })
}
