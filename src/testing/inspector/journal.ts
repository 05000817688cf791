// The inspector's memory: the most recent deliveries, bounded in count and bytes, and the
// listeners (the page's live streams) told about each new one.
import type { InspectedDetail, InspectedSummary } from './describe.js'

/** What a live stream is told: a new delivery, or that the server's description changed (a key rotation). */
export type JournalNews = { kind: 'attempt', summary: InspectedSummary } | { kind: 'info' }

interface Entry {
  summary: InspectedSummary
  /** Built when the detail view asks for it: nothing is parsed or hashed for deliveries nobody opens. */
  detail: () => InspectedDetail
  bytes: number
}

/** Deliveries kept by default. */
export const MAX_ENTRIES = 500
/** Body bytes kept by default (the oldest deliveries are forgotten past it; the newest always stays). */
export const MAX_BYTES = 32 * 1024 * 1024

export class Journal {
  private readonly entries: Entry[] = []
  private readonly listeners = new Set<(news: JournalNews) => void>()
  private bytes = 0
  private nextSeq = 1

  constructor (private readonly maxEntries = MAX_ENTRIES, private readonly maxBytes = MAX_BYTES) {}

  /** Records a delivery; `bytes` is what its detail holds on to. Returns its summary with its `seq`. */
  add (summary: Omit<InspectedSummary, 'seq'>, detail: (summary: InspectedSummary) => InspectedDetail, bytes: number): InspectedSummary {
    const full: InspectedSummary = { seq: this.nextSeq++, ...summary }
    this.entries.push({ summary: full, detail: () => detail(full), bytes })
    this.bytes += bytes
    while (this.entries.length > 1 && (this.entries.length > this.maxEntries || this.bytes > this.maxBytes)) {
      this.bytes -= this.entries.shift()!.bytes
    }
    this.tell({ kind: 'attempt', summary: full })
    return full
  }

  /** The kept deliveries after `after` (a `seq`), oldest first. */
  list (after = 0): InspectedSummary[] {
    return this.entries.filter((e) => e.summary.seq > after).map((e) => e.summary)
  }

  /** One delivery's detail; `null` when it is unknown or no longer kept. */
  get (seq: number): InspectedDetail | null {
    const entry = this.entries.find((e) => e.summary.seq === seq)
    return entry === undefined ? null : entry.detail()
  }

  get size (): number {
    return this.entries.length
  }

  /** Tells the live streams that the server's description changed. */
  infoChanged (): void {
    this.tell({ kind: 'info' })
  }

  subscribe (listener: (news: JournalNews) => void): () => void {
    this.listeners.add(listener)
    return () => { this.listeners.delete(listener) }
  }

  get subscribers (): number {
    return this.listeners.size
  }

  private tell (news: JournalNews): void {
    for (const listener of this.listeners) {
      try {
        listener(news)
      } catch {
        // A stream that fails to write is closed by its own error handler.
      }
    }
  }
}
