// A real Nest application for the module's tests: built with @nestjs/testing on
// @nestjs/platform-express or @nestjs/platform-fastify, listening on 127.0.0.1 port 0.
import type { DynamicModule, INestApplication, NestApplicationOptions, Provider, Type } from '@nestjs/common'
import { ExpressAdapter } from '@nestjs/platform-express'
import { FastifyAdapter } from '@nestjs/platform-fastify'
import { Test as NestTest } from '@nestjs/testing'
import type { Test } from 'tap'

export type Platform = 'express' | 'fastify'
export const PLATFORMS: readonly Platform[] = ['express', 'fastify']

export interface AppSpec {
  imports: Array<DynamicModule | Type>
  controllers?: Type[]
  providers?: Provider[]
  /** Nest's application options. @default { rawBody: true } */
  options?: NestApplicationOptions
  /** Called before the app initializes (global pipes, filters). */
  setup?: (app: INestApplication) => void
}

export interface RunningApp {
  app: INestApplication
  url: string
}

/** Creates, initializes and starts the app on 127.0.0.1:0; closed at teardown. */
export async function startApp (t: Test, platform: Platform, spec: AppSpec): Promise<RunningApp> {
  const moduleRef = await NestTest.createTestingModule({ imports: spec.imports, controllers: spec.controllers ?? [], providers: spec.providers ?? [] }).compile()
  const adapter = platform === 'fastify' ? new FastifyAdapter() : new ExpressAdapter()
  const app = moduleRef.createNestApplication(adapter, { logger: false, rawBody: true, ...spec.options })
  t.teardown(() => app.close())
  spec.setup?.(app)
  await app.listen(0, '127.0.0.1')
  const address = app.getHttpServer().address() as { port: number }
  return { app, url: `http://127.0.0.1:${address.port}` }
}

/** Initializes the app without listening; resolves with what `init()` threw, or null. */
export async function initError (t: Test, platform: Platform, spec: AppSpec): Promise<Error | null> {
  let moduleRef
  try {
    moduleRef = await NestTest.createTestingModule({ imports: spec.imports, controllers: spec.controllers ?? [], providers: spec.providers ?? [] }).compile()
  } catch (err) {
    return err as Error
  }
  const adapter = platform === 'fastify' ? new FastifyAdapter() : new ExpressAdapter()
  const app = moduleRef.createNestApplication(adapter, { logger: false, rawBody: true, ...spec.options })
  t.teardown(() => app.close())
  try {
    await app.init()
  } catch (err) {
    return err as Error
  }
  return null
}

export interface Answer { status: number, headers: Headers, text: string, json: () => any }

/** POSTs bytes to the app and resolves with its answer. */
export async function post (url: string, headers: Record<string, string>, body: Uint8Array | string): Promise<Answer> {
  const res = await fetch(url, { method: 'POST', headers, body, signal: AbortSignal.timeout(15_000) })
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) }
}
