// OpenTelemetry spans for the MailChannels webhook receivers. The receivers publish a
// TracingChannel around each delivery and the key store a message per key fetch, on
// node:diagnostics_channel; this turns them into spans. Call it once at startup, after your
// OpenTelemetry SDK is set up:
//
//   import { traceWebhookDeliveries } from './metrics/opentelemetry.js'
//   traceWebhookDeliveries()
//
// Spans: `mailchannels.webhook.receive` per delivery (from the whole body in hand to the answer,
// a child of the active span, e.g. your HTTP server span), with a `mailchannels.webhook.handler`
// child for the handler's share; `mailchannels.webhook.key_fetch` per request to the public-key endpoint;
// `mailchannels.webhook.dead_letter` when an event is parked, retried or discarded.
import diagnosticsChannel from 'node:diagnostics_channel'
import { context, SpanStatusCode, trace, type Span, type Tracer } from '@opentelemetry/api'
import { DEAD_LETTER_DIAGNOSTICS_CHANNEL, KEY_FETCH_DIAGNOSTICS_CHANNEL, RECEIVE_TRACING_CHANNEL, type DeadLetterMessage, type KeyFetchMessage, type WebhookReceiveContext } from 'mailchannels-webhooks'

/** Subscribes; returns a function that unsubscribes. */
export function traceWebhookDeliveries (tracer: Tracer = trace.getTracer('mailchannels-webhooks')): () => void {
  const receive = diagnosticsChannel.tracingChannel<unknown, WebhookReceiveContext>(RECEIVE_TRACING_CHANNEL)
  const spans = new WeakMap<WebhookReceiveContext, Span>()
  const handlers = {
    start (ctx: WebhookReceiveContext): void {
      spans.set(ctx, tracer.startSpan('mailchannels.webhook.receive', { attributes: { 'http.request.body.size': ctx.bodyBytes } }, context.active()))
    },
    end (): void {},
    asyncStart (): void {},
    // The delivery's outcome is known at asyncEnd (ctx.result).
    asyncEnd (ctx: WebhookReceiveContext): void {
      const span = spans.get(ctx)
      const m = ctx.result
      if (span === undefined || m === undefined) return
      spans.delete(ctx)
      span.setAttributes({
        'mailchannels.webhook.outcome': m.outcome,
        'mailchannels.webhook.event_count': m.eventCount,
        'http.response.status_code': m.status,
      })
      if (m.keyId !== null) span.setAttribute('mailchannels.webhook.key_id', m.keyId)
      if (m.type !== null) span.setAttribute('error.type', m.type)
      // As for HTTP server spans: a 4xx is the sender's problem, a 5xx ours.
      if (m.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: m.type ?? undefined })
      if (m.outcome === 'accepted' || m.outcome === 'failed') {
        const end = Date.now()
        tracer.startSpan('mailchannels.webhook.handler', { startTime: end - m.handlerDurationMs }, trace.setSpan(context.active(), span)).end(end)
      }
      span.end()
    },
    error (): void {},
  }
  receive.subscribe(handlers)

  const onKeyFetch = (message: unknown): void => {
    const m = message as KeyFetchMessage
    const end = Date.now()
    const span = tracer.startSpan('mailchannels.webhook.key_fetch', {
      startTime: end - m.durationMs,
      attributes: { 'mailchannels.webhook.key_id': m.keyId, 'mailchannels.webhook.key_fetch.outcome': m.outcome, 'mailchannels.webhook.key_fetch.refresh': m.refresh, 'server.address': new URL(m.baseUrl).hostname },
    }, context.active())
    if (m.status !== null) span.setAttribute('http.response.status_code', m.status)
    if (m.outcome !== 'fetched') {
      span.setAttribute('error.type', m.cause ?? m.outcome)
      span.setStatus({ code: SpanStatusCode.ERROR, message: m.cause ?? m.outcome })
    }
    span.end(end)
  }
  diagnosticsChannel.subscribe(KEY_FETCH_DIAGNOSTICS_CHANNEL, onKeyFetch)

  // A dead letter parked, retried or discarded: an instant span in the active context (the
  // delivery's or the retry's), an error when parked, so it shows in the trace that parked it.
  const onDeadLetter = (message: unknown): void => {
    const m = message as DeadLetterMessage
    const span = tracer.startSpan('mailchannels.webhook.dead_letter', {
      attributes: { 'mailchannels.webhook.dead_letter.action': m.action, 'mailchannels.webhook.event_type': m.type, 'mailchannels.webhook.fingerprint': m.fingerprint, 'mailchannels.webhook.attempts': m.attempts, 'mailchannels.webhook.dead_letter.source': m.source },
    }, context.active())
    if (m.action === 'parked') span.setStatus({ code: SpanStatusCode.ERROR, message: 'parked' })
    span.end()
  }
  diagnosticsChannel.subscribe(DEAD_LETTER_DIAGNOSTICS_CHANNEL, onDeadLetter)

  return () => {
    receive.unsubscribe(handlers)
    diagnosticsChannel.unsubscribe(KEY_FETCH_DIAGNOSTICS_CHANNEL, onKeyFetch)
    diagnosticsChannel.unsubscribe(DEAD_LETTER_DIAGNOSTICS_CHANNEL, onDeadLetter)
  }
}
