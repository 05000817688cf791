// The guard of a route marked @MailChannelsWebhook() and the filter that sends the library's
// replies. A guard runs before every interceptor, pipe and the handler; what it throws goes to the
// exception filters, and Nest consults a method's own filters before the app's global ones
// (https://docs.nestjs.com/exception-filters#binding-filters), so the library's reply is sent as
// it is, whatever filters, pipes and interceptors the app has.
import { Catch, Inject, Injectable, type ArgumentsHost, type CanActivate, type ExceptionFilter, type ExecutionContext } from '@nestjs/common'
import { HttpAdapterHost } from '@nestjs/core'
import { JSON_CONTENT_TYPE, type Reply } from '../receiver/reply.js'
import { MailChannelsWebhooksReceiver } from './receiver.js'

/**
 * What the guard throws to have the library's reply sent (a refusal, a duplicate, or the answer of
 * the handlers or the queue): only `MailChannelsWebhookReplyFilter`, on the same route, catches it.
 */
export class MailChannelsWebhookReply extends Error {
  constructor (readonly reply: Reply) {
    super(`mailchannels webhook answered ${reply.status}`)
    this.name = 'MailChannelsWebhookReply'
  }
}

/** Verifies each delivery to a route marked `@MailChannelsWebhook()` (applied by that decorator). */
export class MailChannelsWebhookGuard implements CanActivate {
  constructor (private readonly receiver: MailChannelsWebhooksReceiver) {}

  canActivate (context: ExecutionContext): boolean | Promise<boolean> {
    if (context.getType() !== 'http') throw new Error('@MailChannelsWebhook() marks HTTP routes only')
    const http = context.switchToHttp()
    const verdict = this.receiver.verify(http.getRequest(), http.getResponse())
    return verdict instanceof Promise ? verdict.then(pass) : pass(verdict)
  }
}

function pass (reply: Reply | null): boolean {
  if (reply !== null) throw new MailChannelsWebhookReply(reply)
  return true
}

/** Sends the library's reply, status, headers and JSON body, through the app's HTTP adapter. */
export class MailChannelsWebhookReplyFilter implements ExceptionFilter<MailChannelsWebhookReply> {
  constructor (private readonly adapterHost: HttpAdapterHost) {}

  catch (exception: MailChannelsWebhookReply, host: ArgumentsHost): void {
    const adapter = this.adapterHost.httpAdapter
    const res = host.switchToHttp().getResponse<unknown>()
    // Something else already answered (a timeout, say): end the response rather than answer twice.
    if (adapter.isHeadersSent(res)) {
      adapter.end(res)
      return
    }
    const { reply } = exception
    adapter.setHeader(res, 'content-type', JSON_CONTENT_TYPE)
    for (const name in reply.headers) adapter.setHeader(res, name, reply.headers[name]!)
    adapter.reply(res, reply.body, reply.status)
  }
}

// Decorators applied as calls, with explicit injection tokens: the module needs neither the
// compiler's decorator support nor `emitDecoratorMetadata` (esbuild, swc without it, tsx).
Injectable()(MailChannelsWebhookGuard)
Inject(MailChannelsWebhooksReceiver)(MailChannelsWebhookGuard, undefined, 0)
Catch(MailChannelsWebhookReply)(MailChannelsWebhookReplyFilter)
Injectable()(MailChannelsWebhookReplyFilter)
Inject(HttpAdapterHost)(MailChannelsWebhookReplyFilter, undefined, 0)
