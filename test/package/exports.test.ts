import { execFileSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const root = fileURLToPath(new URL('../../', import.meta.url))
const dist = path.join(root, 'dist')
const tsc = path.join(root, 'node_modules/.bin/tsc')
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { name: string, dependencies: Record<string, string>, exports: Record<string, unknown>, imports?: Record<string, Record<string, string>> }

/**
 * The emitted files a package-internal `#` import may load: every `dist/` target of its
 * conditions, or only the one a runtime without Node takes (`default`).
 */
function internalTargets (spec: string, which: 'all' | 'default'): string[] {
  const map = pkg.imports?.[spec] ?? {}
  const targets = which === 'all' ? Object.values(map) : [map.default ?? '']
  return targets.filter((v) => v.startsWith('./dist/')).map((v) => path.join(root, v))
}

t.before(() => {
  // `npm test` builds first; when run alone, build once.
  if (!existsSync(path.join(dist, 'index.js')) || !existsSync(path.join(dist, 'web/index.js')) || !existsSync(path.join(dist, 'hono/index.js'))) execFileSync(tsc, ['-p', 'tsconfig.build.json'], { cwd: root, stdio: 'pipe' })
})

const SUBPATHS = ['.', './testing', './fastify', './express', './web', './hono', './nestjs'] as const
const specifier = (sub: string): string => (sub === '.' ? pkg.name : `${pkg.name}/${sub.slice(2)}`)

t.test('package.json exports list exactly the ten entry points (plus package.json)', async (t) => {
  t.strictSame(Object.keys(pkg.exports).sort(), ['.', './bullmq', './express', './fastify', './hono', './nestjs', './package.json', './postgres', './sqlite', './testing', './web'])
})

t.test('import() and require() by package name resolve every subpath', async (t) => {
  const expected: Record<string, string[]> = {
    '.': ['verifyWebhook', 'MailChannels', 'KeyStore', 'HTTP_STATUS_BY_TYPE', 'VerifyErrorType', 'WEBHOOK_EVENT_TYPES'],
    './testing': ['generateSigningKeyPair', 'signWebhook', 'toWireEvent'],
    './fastify': ['default'],
    './express': ['mailchannelsWebhooks'],
    './web': ['createWebhookHandler', 'verifyWebhookRequest', 'MemoryClaimStore'],
    './hono': ['mailchannelsWebhooks'],
    './bullmq': ['bullmqEnqueue', 'createWebhookEventQueue', 'createWebhookEventWorker'],
    './nestjs': ['MailChannelsWebhooksModule', 'MailChannelsWebhook', 'WebhookEvents', 'OnWebhookEvent', 'MailChannelsWebhooksReceiver'],
  }
  // A plain `node` child, not this test process: the test runner's TypeScript loader hooks
  // require() and would hand back its own transpiled copy instead of Node's require(esm).
  const script = `
    const expected = ${JSON.stringify(Object.fromEntries(SUBPATHS.map((sub) => [specifier(sub), expected[sub]])))}
    ;(async () => {
      const out = {}
      for (const [name, keys] of Object.entries(expected)) {
        const viaRequire = require(name)
        const viaImport = await import(name)
        out[name] = { file: require.resolve(name), keys: keys.map((k) => [k, viaImport[k] !== undefined, viaRequire[k] === viaImport[k]]) }
      }
      process.stdout.write(JSON.stringify(out))
    })().catch((err) => { process.stderr.write(String(err && err.stack || err)); process.exit(1) })`
  const env = { ...process.env, NODE_OPTIONS: '' }
  const out = JSON.parse(execFileSync(process.execPath, ['-e', script], { cwd: root, env, encoding: 'utf8' })) as Record<string, { file: string, keys: Array<[string, boolean, boolean]> }>
  for (const sub of SUBPATHS) {
    const name = specifier(sub)
    const got = out[name]!
    t.ok(got.file.startsWith(dist), `${name} resolves into dist/ (${path.relative(root, got.file)})`)
    for (const [key, imported, same] of got.keys) {
      t.ok(imported, `import('${name}').${key}`)
      t.ok(same, `require('${name}').${key} is the same binding`)
    }
  }
  // the built package verifies a delivery signed by its own test kit
  const { verifyWebhook } = await import(pkg.name) as typeof import('../../src/index.js')
  const { generateSigningKeyPair, signWebhook } = await import(`${pkg.name}/testing`) as typeof import('../../src/testing/index.js')
  const keys = generateSigningKeyPair()
  const signed = signWebhook({ events: [{ event: 'delivered', customer_handle: 'acct_1', timestamp: 1 }], privateKey: keys.privateKey })
  const r = await verifyWebhook({ payload: signed.body, headers: signed.headers, publicKey: keys.publicKey })
  t.equal(r.error, null)
  t.equal(r.data?.[0]?.event, 'delivered')
})

/** Static and dynamic import specifiers of an emitted ES module. */
/** `tsc -p <dir>/tsconfig.json`: its exit code and everything it printed. */
function typeCheck (dir: string): { code: number, output: string } {
  try {
    return { code: 0, output: execFileSync(tsc, ['-p', path.join(dir, 'tsconfig.json')], { cwd: dir, encoding: 'utf8', stdio: 'pipe' }) }
  } catch (err) {
    const e = err as { status: number, stdout: string, stderr: string }
    return { code: e.status, output: `${e.stdout}${e.stderr}` }
  }
}

function specifiers (code: string): string[] {
  // Block comments hold TSDoc examples (`import { … } from 'mailchannels-webhooks'`), not imports.
  const source = code.replace(/\/\*[\s\S]*?\*\//g, '')
  const out: string[] = []
  const patterns = [
    /\bimport\s+(?:[\w*{}\s,$]+\s+from\s+)?['"]([^'"]+)['"]/g,
    /\bexport\s+[\w*{}\s,$]+\s+from\s+['"]([^'"]+)['"]/g,
    /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g,
    /\brequire\s*\(\s*['"]([^'"]+)['"]\s*\)/g,
  ]
  for (const re of patterns) for (const m of source.matchAll(re)) out.push(m[1]!)
  return out
}

t.test('the core never imports fastify, express or nest (scan of emitted files)', async (t) => {
  const visited = new Set<string>()
  const bare = new Set<string>()
  const queue = [path.join(dist, 'index.js'), path.join(dist, 'testing/index.js')]
  while (queue.length > 0) {
    const file = queue.pop()!
    if (visited.has(file)) continue
    visited.add(file)
    for (const spec of specifiers(readFileSync(file, 'utf8'))) {
      if (spec.startsWith('.')) queue.push(path.resolve(path.dirname(file), spec))
      else if (spec.startsWith('#')) queue.push(...internalTargets(spec, 'all'))
      else bare.add(spec)
    }
  }
  t.ok(visited.size > 10, `scanned ${visited.size} emitted files`)
  for (const file of visited) {
    const rel = path.relative(dist, file)
    t.notOk(rel.startsWith('fastify') || rel.startsWith('express') || rel.startsWith('nestjs'), `core reaches no adapter file (${rel})`)
  }
  const packages = [...bare].map((s) => s.startsWith('@') ? s.split('/').slice(0, 2).join('/') : s.split('/')[0]!)
  for (const name of packages) {
    t.notOk(/^(fastify|express|@fastify\/|fastify-plugin|body-parser|@nestjs\/|reflect-metadata|rxjs)/.test(name), `core does not import ${name}`)
    const builtin = name.startsWith('node:') || builtinModules.includes(name)
    t.ok(builtin || Object.hasOwn(pkg.dependencies, name), `${name} is a builtin or a runtime dependency`)
  }
  t.notOk(packages.includes('fastify') || packages.includes('express'))
})

t.test('the web and hono entries load no Node built-in and no hono code at run time (scan of emitted files)', async (t) => {
  for (const entry of ['web/index.js', 'hono/index.js']) {
    const visited = new Set<string>()
    const bare = new Set<string>()
    const queue = [path.join(dist, entry)]
    while (queue.length > 0) {
      const file = queue.pop()!
      if (visited.has(file)) continue
      visited.add(file)
      for (const spec of specifiers(readFileSync(file, 'utf8'))) {
        if (spec.startsWith('.')) queue.push(path.resolve(path.dirname(file), spec))
        else if (spec.startsWith('#')) queue.push(...internalTargets(spec, 'default'))
        else bare.add(spec)
      }
    }
    for (const file of visited) {
      const rel = path.relative(dist, file)
      t.notOk(/^(fastify|express|testing|receiver\/node)\b/.test(rel), `${entry} reaches no Node adapter file (${rel})`)
    }
    for (const spec of bare) {
      t.notOk(spec.startsWith('node:') || builtinModules.includes(spec), `${entry} imports no Node built-in (${spec})`)
      t.not(spec, 'hono', `${entry} does not load hono (types only)`)
    }
  }
})

t.test('a TypeScript consumer (module nodenext) type-checks against every subpath', async (t) => {
  const dir = mkdtempSync(path.join(root, 'test/package/fixtures/.consumer-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(path.join(dir, 'consumer.ts'), `
import { verifyWebhook, MailChannels, KeyStore, HTTP_STATUS_BY_TYPE, type WebhookEvent, type ErrorResponse, type VerifyOptions, type Result } from 'mailchannels-webhooks'
import { generateSigningKeyPair, signWebhook } from 'mailchannels-webhooks/testing'
import mailchannelsWebhooks from 'mailchannels-webhooks/fastify'
import { mailchannelsWebhooks as expressWebhooks } from 'mailchannels-webhooks/express'
import { createWebhookHandler, verifyWebhookRequest, type WebhookHandler } from 'mailchannels-webhooks/web'
import { mailchannelsWebhooks as honoWebhook, type MailChannelsWebhooksEnv } from 'mailchannels-webhooks/hono'
import { Hono } from 'hono'

export async function run (): Promise<string[]> {
  const keys = generateSigningKeyPair()
  const signed = signWebhook({ events: [{ event: 'delivered', customer_handle: 'acct_1', timestamp: 1 }], privateKey: keys.privateKey })
  const options: VerifyOptions = { payload: signed.body, headers: signed.headers, publicKey: keys.publicKey, customerHandles: ['acct_1'] }
  const r: Result<WebhookEvent[]> = await verifyWebhook(options)
  const r2 = await new MailChannels('key', { baseUrl: 'http://127.0.0.1:1' }).webhooks.verify({ ...options, keyStore: new KeyStore() })
  if (r.error !== null) {
    const e: ErrorResponse = r.error
    const status: number | undefined = HTTP_STATUS_BY_TYPE[e.type]   // any ErrorType indexes it, no cast
    return [String(status)]
  }
  const out: string[] = []
  for (const event of r.data) {
    switch (event.event) {
      case 'click': out.push(event.url ?? ''); break
      case 'hard-bounced': out.push(event.status ?? ''); break
      case 'unknown': out.push(event.eventName); break
      default: out.push(event.customerHandle)
    }
  }
  void r2
  void mailchannelsWebhooks
  void expressWebhooks
  const handler: WebhookHandler = createWebhookHandler({ customerHandles: ['acct_1'], publicKey: keys.publicKey, onEvents: (events) => { out.push(String(events.length)) } })
  const verified = await verifyWebhookRequest(new Request('http://127.0.0.1/', { method: 'POST', body: new Uint8Array(signed.body), headers: signed.headers }), { publicKey: keys.publicKey })
  const app = new Hono<MailChannelsWebhooksEnv>()
  app.post('/hook', honoWebhook({ customerHandles: ['acct_1'] }), (c) => c.json(c.get('webhookEvents').map((e: WebhookEvent) => e.event)))
  void handler
  void verified.error?.type
  return out
}
`)
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', strict: true, noEmit: true, types: ['node'], typeRoots: [path.join(root, 'node_modules/@types')], skipLibCheck: true },
    files: ['consumer.ts'],
  }))
  const { code, output } = typeCheck(dir)
  t.equal(code, 0, `tsc --noEmit exits 0${output ? `:\n${output}` : ''}`)
})

t.test('a Workers-style TypeScript project (lib dom, no Node types) type-checks against ./web and ./hono', async (t) => {
  const dir = mkdtempSync(path.join(root, 'test/package/fixtures/.consumer-web-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(path.join(dir, 'worker.ts'), `
import { createWebhookHandler, verifyWebhookRequest, type WebhookEvent, type ReplayStore } from 'mailchannels-webhooks/web'
import { mailchannelsWebhooks, type MailChannelsWebhooksEnv } from 'mailchannels-webhooks/hono'
import { Hono } from 'hono'

const store: ReplayStore = { claim: async () => 'claimed', complete: async () => {}, release: async () => {} }
const handler = createWebhookHandler({ customerHandles: ['acct_1'], replay: store, onEvents: (events: WebhookEvent[]) => Response.json(events.length) })
const app = new Hono<MailChannelsWebhooksEnv>()
app.post('/hook', mailchannelsWebhooks({ customerHandles: ['acct_1'], keyIds: ['k1'] }), (c) => c.json(c.get('webhookEvents').length))
export default {
  async fetch (request: Request): Promise<Response> {
    if (request.method === 'PUT') {
      const { data, error } = await verifyWebhookRequest(request, { customerHandles: ['acct_1'], bodyLimit: 65536 })
      return Response.json(error === null ? data.length : error.type)
    }
    return new URL(request.url).pathname === '/hono' ? app.fetch(request) : handler(request)
  },
}
`)
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { module: 'esnext', moduleResolution: 'bundler', target: 'es2022', lib: ['es2022', 'dom', 'dom.iterable'], types: [], strict: true, noEmit: true, skipLibCheck: false },
    files: ['worker.ts'],
  }))
  const { code, output } = typeCheck(dir)
  // Errors inside hono's own declarations are hono's business; ours must be clean.
  const ours = output.split('\n').filter((line) => line.trim() !== '' && !line.includes('node_modules/hono/'))
  t.equal(code === 0 ? 0 : ours.length, 0, `no type errors from the package or the consumer:\n${ours.join('\n')}`)
})

/**
 * Every name each entry exports (values and types), as `import { … }` sees it: the public surface
 *. A change here is a change of the API: list it in CHANGELOG.md.
 */
const SURFACE: Record<string, string[]> = {
  'index': [
    'ApiErrorType', 'BatchesOptions', 'ClaimStore', 'ClaimStoreOptions', 'ClickEvent', 'Clock',
    'ComplainedEvent', 'CryptoKeyLike', 'DEAD_LETTER_DIAGNOSTICS_CHANNEL', 'DELIVERY_DIAGNOSTICS_CHANNEL',
    'DeadLetter', 'DeadLetterAction', 'DeadLetterError', 'DeadLetterFailure', 'DeadLetterMessage',
    'DeadLetterOptions', 'DeadLetterPage', 'DeadLetterQuery', 'DeadLetterRetry', 'DeadLetterRetryResult',
    'DeadLetterStore', 'DeletedWebhooks', 'DeliveredEvent', 'DeliveryReplayStore', 'DispatchContext',
    'DispatchInput', 'DispatchReport', 'DroppedEvent', 'EnqueueContext', 'Enqueuer', 'EnrolledWebhook',
    'ErrorResponse', 'ErrorType', 'EventHandlerContext', 'EventOf', 'EventOutcome', 'HTTP_STATUS_BY_TYPE',
    'HardBouncedEvent', 'HeadersInput', 'IterateBatchesOptions', 'KEY_FETCH_DIAGNOSTICS_CHANNEL',
    'KeyFetchCause', 'KeyFetchMessage', 'KeyFetchOutcome', 'KeyObjectLike', 'KeyStore', 'KeyStoreOptions',
    'KeyStoreStats', 'Logger', 'MailChannels', 'MailChannelsError', 'MailChannelsOptions',
    'MemoryClaimStore', 'MemoryClaimStoreOptions', 'MemoryDeadLetterStore', 'MemoryDeadLetterStoreOptions',
    'OpenEvent', 'ProcessedEvent', 'RECEIVE_TRACING_CHANNEL', 'ReconcileBatchResult', 'ReconcileOptions',
    'ReconcileProgress', 'ReconcileReport', 'ReconcileSettled', 'ReconcileSkipReason', 'ReconcileStop',
    'RecordedFailure', 'RedisClaimStore', 'RedisClaimStoreOptions', 'RedisClientLike',
    'RedisDeadLetterStore', 'RedisDeadLetterStoreOptions', 'RedisStoreOptions', 'ReplayStore',
    'ReplayStoreError', 'RequestOptions', 'ResendBatchOptions', 'ResentBatch', 'Result', 'SigningKey',
    'SoftBouncedEvent', 'StoreClaim', 'StoreClaimResult', 'TestEvent', 'TransactionalClaimStore',
    'UnknownWebhookEvent', 'UnsubscribedEvent', 'VerifyConfig', 'VerifyErrorType', 'VerifyOptions',
    'WEBHOOK_EVENT_TYPES', 'WebhookDeliveryErrorType', 'WebhookDeliveryMessage', 'WebhookDeliveryOutcome',
    'WebhookEvent', 'WebhookEventBase', 'WebhookEventHandler', 'WebhookEventName', 'WebhookEventRouter',
    'WebhookEventRouterOptions', 'WebhookEventType', 'WebhookReceiveContext', 'WebhookValidation',
    'WebhookValidationResult', 'WebhooksApi', 'WebhooksBatch', 'WebhooksBatchResponseStatus',
    'WebhooksBatchStatus', 'deadLetterError', 'deliveryClaimKey', 'eventFingerprint', 'verifyWebhook',
  ],
  'fastify/index': [
    'BatchesAuthorize', 'BatchesClient', 'BatchesErrorBody', 'BatchesPage', 'BatchesRouteOptions',
    'ClaimStore', 'DeliveryErrorCode', 'DeliveryReplayStore', 'DispatchedBody', 'EnqueueContext',
    'Enqueuer', 'EventHandlerContext', 'MailChannelsWebhooksOptions', 'QueuedBody', 'ReplayStore',
    'WebhookErrorBody', 'WebhookEvent', 'WebhookReceiverOptions', 'WebhookRouteOptions', 'batchesRoute',
    'default', 'mailchannelsWebhooks', 'webhookEventsOf',
  ],
  'express/index': [
    'BatchesAuthorize', 'BatchesClient', 'BatchesErrorBody', 'BatchesMiddleware', 'BatchesPage',
    'BatchesRouteOptions', 'BatchesRouteRequest', 'ClaimStore', 'DeliveryErrorCode', 'DeliveryReplayStore',
    'DispatchedBody', 'EnqueueContext', 'Enqueuer', 'EventHandlerContext', 'Logger',
    'MailChannelsWebhooksOptions', 'QueuedBody', 'ReplayStore', 'WebhookErrorBody', 'WebhookEvent',
    'WebhookLocals', 'WebhookMiddleware', 'WebhookReceiverOptions', 'WebhookRequest', 'batchesRoute',
    'captureRawBody', 'mailchannelsWebhooks', 'webhookEventsOf',
  ],
  'web/index': [
    'ClaimStore', 'ClaimStoreOptions', 'DeliveryErrorCode', 'DeliveryReplayStore', 'DispatchedBody',
    'EnqueueContext', 'EnqueueOptions', 'Enqueuer', 'ErrorResponse', 'EventHandlerContext',
    'HandlersOptions', 'Logger', 'MemoryClaimStore', 'MemoryClaimStoreOptions', 'OnEventsOptions',
    'OnEventsResult', 'QueuedBody', 'ReplayStore', 'Result', 'StoreClaim', 'StoreClaimResult',
    'VerifyWebhookRequestOptions', 'WebhookEvent', 'WebhookHandler', 'WebhookHandlerCommonOptions',
    'WebhookHandlerOptions', 'createWebhookHandler', 'verifyWebhookRequest',
  ],
  'hono/index': [
    'DeliveryErrorCode', 'DispatchedBody', 'EnqueueContext', 'Enqueuer', 'EventHandlerContext',
    'MailChannelsWebhooksEnv', 'MailChannelsWebhooksOptions', 'QueuedBody', 'WebhookEvent',
    'mailchannelsWebhooks',
  ],
  'testing/index': [
    'AttemptDetail', 'DeliverOptions', 'Inspector', 'InspectorOptions', 'SampleEventsOptions', 'Sandbox',
    'SandboxBatch', 'SandboxBatchStatus', 'SandboxOptions', 'SandboxResend', 'SandboxStats',
    'SandboxValidation', 'SignWebhookOptions', 'SignedWebhook', 'SigningKeyPair', 'StartOptions',
    'TamperKind', 'WireEvent', 'createInspector', 'createSandbox', 'generateSigningKeyPair', 'sampleEvents',
    'signWebhook', 'toWireEvent',
  ],
  'bullmq/index': [
    'BullmqEnqueueOptions', 'BullmqEnqueuer', 'ClusterPrefixError', 'DEFAULT_JOB_OPTIONS', 'DEFAULT_PREFIX',
    'DEFAULT_QUEUE_NAME', 'EnqueueTimeoutError', 'EventInProgressError', 'ReplicaWaitError',
    'WebhookEventJob', 'WebhookEventJobContext', 'WebhookEventJobData', 'WebhookEventJobDispatcher',
    'WebhookEventJobOptions', 'WebhookEventJobResult', 'WebhookEventQueueOptions',
    'WebhookEventWorkerOptions', 'bullmqEnqueue', 'createWebhookEventQueue', 'createWebhookEventWorker',
  ],
  'postgres/index': [
    'DeliveryTransaction', 'DeliveryTransactionStore', 'HandlerTimeoutError', 'InboxTransactionError',
    'PgPoolClientLike', 'PgPoolLike', 'PgQueryResultLike', 'PgQueryableLike', 'PgTransactionClient',
    'PostgresDeadLetterStore', 'PostgresDeadLettersOptions', 'PostgresSeenEventsOptions',
    'PostgresSeenEventsStore', 'PostgresTransaction', 'StoreClaim', 'TransactionContext',
    'TransactionalClaimStore', 'TransactionalPostgresSeenEventsStore', 'postgresDeadLetters',
    'postgresDeadLettersSchema', 'postgresSeenEvents', 'postgresSeenEventsSchema',
  ],
  'sqlite/index': [
    'SqliteDatabaseLike', 'SqliteDeadLetterStore', 'SqliteDeadLettersOptions', 'SqliteSeenEventsOptions',
    'SqliteSeenEventsStore', 'SqliteStatementLike', 'StoreClaim', 'TransactionContext',
    'TransactionalClaimStore', 'TransactionalSqliteSeenEventsStore', 'sqliteDeadLetters',
    'sqliteSeenEvents',
  ],
  'nestjs/index': [
    'AnswerMode', 'ClickEvent', 'ComplainedEvent', 'DeliveredEvent', 'DeliveryErrorCode', 'DispatchContext',
    'DispatchedBody', 'DroppedEvent', 'EnqueueContext', 'Enqueuer', 'EventHandlerContext', 'EventOf',
    'HardBouncedEvent', 'Logger', 'MAILCHANNELS_WEBHOOKS_OPTIONS', 'MailChannelsWebhook',
    'MailChannelsWebhookGuard', 'MailChannelsWebhookReply', 'MailChannelsWebhookReplyFilter',
    'MailChannelsWebhooksModule', 'MailChannelsWebhooksModuleOptions', 'MailChannelsWebhooksReceiver',
    'OnWebhookEvent', 'OpenEvent', 'ProcessedEvent', 'QueuedBody', 'SoftBouncedEvent', 'TestEvent',
    'TransactionContext', 'UnknownWebhookEvent', 'UnsubscribedEvent', 'WEBHOOK_EVENT_TYPES',
    'WebhookErrorBody', 'WebhookEvent', 'WebhookEventBase', 'WebhookEventMethod', 'WebhookEventName',
    'WebhookEventType', 'WebhookEvents',
  ],
}

t.test('each entry exports exactly the names of its public surface (values and types)', async (t) => {
  const ts = (await import('typescript')).default
  const files = Object.keys(SURFACE).map((entry) => path.join(dist, `${entry}.d.ts`))
  const program = ts.createProgram(files, { noEmit: true, skipLibCheck: true, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext })
  const checker = program.getTypeChecker()
  for (const [entry, names] of Object.entries(SURFACE)) {
    const source = program.getSourceFile(path.join(dist, `${entry}.d.ts`))!
    const exported = checker.getExportsOfModule(checker.getSymbolAtLocation(source)!).map((s) => s.getName()).sort()
    t.strictSame(exported, names, `${entry}: its exports are the listed surface`)
  }
})

