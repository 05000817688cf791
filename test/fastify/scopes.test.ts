// Every route that opts in with config.mailchannelsWebhooks is verified or refused, whatever the
// scope it is declared in and whenever: refused at ready() where the plugin can
// see it, answered 500 configuration_error before any body is read where it cannot. Over real
// sockets: keys from a loopback key server, a delivery signed with another key than the one it
// serves, and a valid one. The app's own JSON parser counts its runs: it must never run on a
// webhook route, and the route's handler never runs on a delivery that was not verified.
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { AddressInfo } from 'node:net'
import pino from 'pino'
import t, { type Test } from 'tap'
import plugin, { webhookEventsOf } from '../../src/fastify/index.js'
import { delivery, HANDLE, KEYS, logCapture, OTHER_KEYS, startKeyServer } from './helpers/fixtures.js'

const keys = await startKeyServer({ mckey: KEYS.publicKey })
t.teardown(keys.close)
const OPTIONS = { baseUrl: keys.baseUrl, customerHandles: [HANDLE], replay: false as const }
const OPT_IN = { config: { mailchannelsWebhooks: true } }

type Handler = (request: FastifyRequest, reply: FastifyReply) => Promise<object>
type Build = (app: FastifyInstance, handler: Handler) => Promise<void> | void

interface Served {
  ready: (Error & { code?: string }) | null
  /** POSTs a delivery signed with the key the key server serves (`valid`) or with another key (`forged`). */
  post: (url: string, kind: 'valid' | 'forged') => Promise<{ status: number, body: Record<string, unknown> }>
  /** Handler runs, and what it saw as request.body. */
  calls: () => number
  bodies: unknown[]
  /** Runs of the app's own JSON parser. */
  parsed: () => number
  logs: ReturnType<typeof logCapture>
}

/** An app built by `build`, listening on 127.0.0.1 (through its server even if ready() rejected). */
async function serve (t: Test, build: Build): Promise<Served> {
  const logs = logCapture()
  const app = Fastify({ loggerInstance: pino(logs.stream) }) as unknown as FastifyInstance
  let calls = 0
  let parsed = 0
  const bodies: unknown[] = []
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    parsed++
    try { done(null, JSON.parse(body as string)) } catch (err) { done(err as Error) }
  })
  await build(app, async (request) => {
    calls++
    bodies.push(request.body)
    return { handled: webhookEventsOf(request)?.length ?? null }
  })
  const ready = await app.ready().then(() => null, (err: unknown) => err as Error & { code?: string })
  // Fastify's server routes requests whether ready() resolved or not.
  await new Promise<void>((resolve) => app.server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    app.server.closeAllConnections()
    await new Promise((resolve) => app.server.close(resolve))
    await app.close().catch(() => {})
  })
  const port = (app.server.address() as AddressInfo).port
  return {
    ready,
    logs,
    calls: () => calls,
    bodies,
    parsed: () => parsed,
    async post (url, kind) {
      const d = delivery(kind === 'forged' ? { privateKey: OTHER_KEYS.privateKey } : {})
      const res = await fetch(`http://127.0.0.1:${port}${url}`, { method: 'POST', headers: d.headers, body: d.body })
      const text = await res.text()
      return { status: res.status, body: text === '' ? {} : JSON.parse(text) as Record<string, unknown> }
    },
  }
}

async function expectRefused (t: Test, s: Served, route: string): Promise<void> {
  for (const kind of ['forged', 'valid'] as const) {
    const res = await s.post(route, kind)
    t.equal(res.status, 500, `${route}: a ${kind} delivery is answered 500`)
    t.equal(res.body.code, 'configuration_error')
  }
  t.equal(s.calls(), 0, 'the handler never ran')
  t.equal(s.parsed(), 0, "the app's parser never ran on a delivery")
  t.ok(s.logs.lines().some((l) => l.level === 50 && /no registration of the plugin reaches its scope/.test(String(l.msg))), 'logged at error level')
}

/** ready() rejects naming the route and what to do; requests anyway are refused before the handler. */
async function expectRefusedAtReady (t: Test, build: Build, route: string): Promise<void> {
  const s = await serve(t, build)
  t.equal(s.ready?.code, 'FST_MCWH_ROUTE_NOT_REACHED', `${route}: ready() rejects`)
  t.match(s.ready?.message, `POST ${route} opts in with config.mailchannelsWebhooks, but no registration of the plugin reaches its scope`)
  t.match(s.ready?.message, /Declare webhook routes in the scope the plugin is registered in/, 'saying what to do')
  await expectRefused(t, s, route)
}

/** ready() resolves (the plugin cannot see the route at declaration), every request is refused before the handler. */
async function expectRefusedAtRequest (t: Test, build: Build, route: string): Promise<void> {
  const s = await serve(t, build)
  t.equal(s.ready, null, 'ready() resolves')
  await expectRefused(t, s, route)
}

/** A webhook route: a forged delivery refused 401, a valid one handled, the app's parser never run. */
async function expectVerified (t: Test, build: Build, route: string): Promise<void> {
  const s = await serve(t, build)
  t.equal(s.ready, null, 'ready() resolves')
  const forged = await s.post(route, 'forged')
  t.equal(forged.status, 401, `${route}: a delivery signed with another key is refused`)
  t.equal(forged.body.code, 'signature_invalid')
  const valid = await s.post(route, 'valid')
  t.equal(valid.status, 200, `${route}: a valid delivery is handled`)
  t.same(valid.body, { handled: 1 })
  t.equal(s.calls(), 1, 'the handler ran once, for the valid delivery')
  t.ok(s.bodies[0] instanceof Uint8Array, 'it saw the raw bytes')
  t.equal(s.parsed(), 0, "the app's parser never ran on a delivery")
}

t.test('the route in the parent of the scope the plugin is registered in (the issue reproduction)', async (t) => {
  await expectRefusedAtReady(t, (app, h) => {
    app.register(async (p) => {
      await p.register(async (s) => { await s.register(plugin, OPTIONS) })
      p.post('/lost', OPT_IN, h)
    })
  }, '/lost')
})

t.test('the route in a sibling scope under a non-root parent: p -> { s: plugin, t: route }', async (t) => {
  await expectRefusedAtReady(t, (app, h) => {
    app.register(async (p) => {
      p.register(async (s) => { await s.register(plugin, OPTIONS) })
      p.register(async (r) => { r.post('/sibling', OPT_IN, h) })
    })
  }, '/sibling')
})

t.test('the route deep in a sibling scope under a non-root parent: p -> { s: plugin, t -> u: route }', async (t) => {
  await expectRefusedAtReady(t, (app, h) => {
    app.register(async (p) => {
      p.register(async (s) => { await s.register(plugin, OPTIONS) })
      p.register(async (r) => { r.register(async (u) => { u.post('/deep', OPT_IN, h) }) })
    })
  }, '/deep')
})

t.test('a route added later to a child scope created before a registration at the root', async (t) => {
  await expectRefusedAtReady(t, async (app, h) => {
    let child: FastifyInstance | undefined
    app.register(async (c) => { child = c })
    await app.register(plugin, OPTIONS)
    child!.post('/late', OPT_IN, h)
  }, '/late')
})

t.test('a route added later to a scope beside the plugin\'s, created before it', async (t) => {
  await expectRefusedAtReady(t, async (app, h) => {
    let beside: FastifyInstance | undefined
    app.register(async (c) => { beside = c })
    await app.register(async (s) => { await s.register(plugin, OPTIONS) })
    beside!.post('/beside', OPT_IN, h)
  }, '/beside')
})

t.test('a route in a prefixed sibling scope, the plugin in a prefixed scope', async (t) => {
  await expectRefusedAtReady(t, (app, h) => {
    app.register(async (s) => { await s.register(plugin, OPTIONS) }, { prefix: '/v1' })
    app.register(async (r) => { r.post('/hook', OPT_IN, h) }, { prefix: '/v2' })
  }, '/v2/hook')
})

t.test('a route declared before the plugin in a sibling scope under a non-root parent: seen by no onRoute hook, refused at request time', async (t) => {
  await expectRefusedAtRequest(t, (app, h) => {
    app.register(async (p) => {
      p.register(async (r) => { r.post('/early', OPT_IN, h) })
      p.register(async (s) => { await s.register(plugin, OPTIONS) })
    })
  }, '/early')
})

// Autoload-style folders, as @fastify/autoload registers them: each file of plugins/ with
// app.register (wrapped by fastify-plugin or not), then each file of routes/<folder>/ with
// app.register(file, { prefix: '/<folder>' }).
function autoload (app: FastifyInstance, pluginFile: (scope: FastifyInstance) => Promise<void>, routeFile: (scope: FastifyInstance) => Promise<void>): void {
  app.register(pluginFile)
  app.register(routeFile, { prefix: '/webhooks' })
}

t.test('autoload-style folders, plugins/mailchannels.js not wrapped with fastify-plugin: the route in routes/webhooks/ is refused', async (t) => {
  await expectRefusedAtReady(t, (app, h) => {
    autoload(app, async (scope) => { await scope.register(plugin, OPTIONS) }, async (scope) => { scope.post('/mailchannels', OPT_IN, h) })
  }, '/webhooks/mailchannels')
})

t.test('autoload-style folders, plugins/mailchannels.js wrapped with fastify-plugin: the route in routes/webhooks/ is verified', async (t) => {
  await expectVerified(t, (app, h) => {
    autoload(app, fp(async (scope) => { await scope.register(plugin, OPTIONS) }), async (scope) => { scope.post('/mailchannels', OPT_IN, h) })
  }, '/webhooks/mailchannels')
})

t.test('a fastify-plugin-wrapped plugin file under a non-root parent, a routes file beside it: verified', async (t) => {
  await expectVerified(t, (app, h) => {
    app.register(async (p) => {
      p.register(fp(async (s) => { await s.register(plugin, OPTIONS) }))
      p.register(async (r) => { r.post('/sibling', OPT_IN, h) }, { prefix: '/api' })
    })
  }, '/api/sibling')
})

t.test('registered at the root: routes in prefixed child scopes, declared before and after, are verified', async (t) => {
  await expectVerified(t, (app, h) => {
    app.register(async (r) => { r.post('/before', OPT_IN, h) }, { prefix: '/v1' })
    app.register(plugin, OPTIONS)
  }, '/v1/before')
  await expectVerified(t, async (app, h) => {
    await app.register(plugin, OPTIONS)
    app.register(async (r) => { r.register(async (u) => { u.post('/after', OPT_IN, h) }, { prefix: '/v2' }) }, { prefix: '/api' })
  }, '/api/v2/after')
})

t.test('an app with no opted-in route outside the plugin\'s reach still starts, its other routes untouched', async (t) => {
  const s = await serve(t, (app) => {
    app.register(async (p) => {
      p.register(async (s) => { await s.register(plugin, OPTIONS) })
      p.post('/login', async (request) => ({ body: request.body }))
    })
  })
  t.equal(s.ready, null)
  const res = await s.post('/login', 'forged')
  t.equal(res.status, 200)
  t.ok(Array.isArray(res.body.body), "the app's route parsed its JSON as before")
  t.equal(s.parsed(), 1)
})

t.test("a route '/' in a prefixed scope: Fastify declares '/api' and '/api/' from one set of options, both verified", async (t) => {
  for (const url of ['/api', '/api/']) {
    await expectVerified(t, async (app, h) => {
      await app.register(plugin, OPTIONS)
      app.register(async (r) => { r.post('/', OPT_IN, h) }, { prefix: '/api' })
    }, url)
  }
})
