import { bodyText, classify, curlCommand, describeDigest, describeSignature, eventsAtAGlance, reasonOf, type InspectedDetail, type InspectedSummary } from '../inspector/describe.js'
import type { Journal } from '../inspector/journal.js'
import type { SignedWebhook } from '../sign-webhook.js'
import type { SandboxBatch } from './batch-query.js'
import type { PostOutcome } from './delivery.js'
import type { AttemptDetail } from './types.js'

/** One attempt as sent and answered, for the inspector. */
export interface Capture { signed: SignedWebhook, outcome: PostOutcome, eventTypes: string[] }

const WARNINGS = {
  tampered: 'The receiver accepted a delivery spoiled on purpose: it should have rejected it.',
  replay: 'The receiver accepted an exact copy of an earlier delivery as new: with replay protection it answers it as a duplicate.',
} as const

/** What the inspector's detail view shows of an attempt: built only when someone opens it. */
const inspectedDetail = (summary: InspectedSummary, { signed, outcome }: Capture): InspectedDetail => ({
  ...summary,
  request: {
    method: 'POST',
    url: summary.endpoint,
    headers: outcome.requestHeaders,
    body: bodyText(signed.body, signed.body.length).text,
    bodyBytes: signed.body.length,
    bodyTruncated: false,
  },
  signature: describeSignature(outcome.requestHeaders),
  digest: describeDigest(outcome.requestHeaders, signed.body),
  curl: curlCommand(summary.endpoint, outcome.requestHeaders, signed.body),
  response: outcome.statusCode === null ? null : { headers: outcome.responseHeaders ?? [], body: outcome.body ?? '', truncated: outcome.bodyTruncated },
  remoteAddress: null,
})

/** Adds an attempt to the inspector's journal. */
export function journalAttempt (journal: Journal, batch: SandboxBatch, detail: AttemptDetail, capture: Capture): void {
  const answer = capture.outcome.body
  const outcome = classify(batch.status_code, answer)
  const spoiled = detail.tamper !== null && detail.tamper !== 'replay' && (outcome === 'accepted' || outcome === 'duplicate')
  const warning = spoiled ? WARNINGS.tampered : detail.tamper === 'replay' && outcome === 'accepted' ? WARNINGS.replay : null
  // What the page's search matches, read from the body as sent (a tampered one included).
  const { requestIds, addresses } = eventsAtAGlance(capture.signed.body)
  journal.add({
    at: batch.created_at,
    endpoint: batch.webhook,
    batchId: batch.batch_id,
    attempt: detail.attempt,
    eventCount: batch.event_count,
    eventTypes: capture.eventTypes,
    requestIds,
    addresses,
    statusCode: batch.status_code,
    durationMs: batch.duration.value,
    outcome,
    reason: reasonOf(answer),
    tamper: detail.tamper,
    resend: detail.resend,
    retryInMs: detail.retryInMs,
    error: detail.error,
    warning,
  }, (summary) => inspectedDetail(summary, capture), capture.signed.body.length + (answer?.length ?? 0))
}
