// Starts the Nest app of app.module.ts on Express (the default) or, with PLATFORM=fastify, on
// Fastify. See README.md in this folder.
import { NestFactory } from '@nestjs/core'
import type { INestApplication } from '@nestjs/common'
import { ExpressAdapter } from '@nestjs/platform-express'
import { FastifyAdapter } from '@nestjs/platform-fastify'
import { AppModule } from './app.module.js'

const adapter = process.env.PLATFORM === 'fastify' ? new FastifyAdapter() : new ExpressAdapter()
// rawBody: true keeps the exact bytes of each request body, which the signature is verified over.
const app: INestApplication = await NestFactory.create(AppModule, adapter, { rawBody: true, logger: ['error', 'warn'] })
app.enableShutdownHooks()
await app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1')
console.log(`Listening on ${(await app.getUrl()).replace('[::1]', '127.0.0.1')}`)
