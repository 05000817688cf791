// The inspector page: plain HTML, CSS and a script, kept as strings so the built package serves
// them with no build step, no framework and nothing fetched from another origin. The markup holds
// no data and no secret: the script fetches both (with the key from the link's fragment) and puts
// every value in the page as text.
import { APP_JS } from './page-script.js'

export { APP_JS }

/** Which side the page is for: the sandbox (it sends) or `inspect` (it receives). */
export type InspectorMode = 'sandbox' | 'receiver'

const TITLES: Record<InspectorMode, string> = {
  sandbox: 'MailChannels sandbox inspector',
  receiver: 'MailChannels webhook inspector',
}

/** The page's markup for one side: the sandbox (sends) or `inspect` (receives). */
export function pageHtml (mode: InspectorMode): string {
  const actions = mode === 'sandbox'
    ? `
    <section id="actions" class="panel" aria-labelledby="actions-title" hidden>
      <h2 id="actions-title">Send</h2>
      <fieldset id="types">
        <legend>Event types in the batch (one event of each)</legend>
        <div id="type-list" class="checks"></div>
      </fieldset>
      <div class="buttons">
        <button type="button" id="send" class="primary">Send batch</button>
        <button type="button" id="send-body" data-tamper="body" title="The body is changed after signing: a receiver answers digest_mismatch">Send tampered</button>
        <button type="button" id="send-expired" data-tamper="expired" title="Signed an hour ago: a receiver answers signature_expired">Send expired</button>
        <button type="button" id="send-signature" data-tamper="signature" title="Signed with a key the sandbox does not serve: signature_invalid">Send bad signature</button>
        <button type="button" id="send-replay" data-tamper="replay" title="An exact copy of the last accepted delivery: a receiver with replay protection answers it as a duplicate">Send replay</button>
        <button type="button" id="rotate">Rotate key</button>
      </div>
      <p id="send-target" class="hint"></p>
      <form id="enroll" class="inline">
        <label for="enroll-url">Enroll an endpoint</label>
        <input id="enroll-url" type="url" required placeholder="http://127.0.0.1:3000/webhooks" autocomplete="off" spellcheck="false">
        <button type="submit">Enroll</button>
      </form>
    </section>`
    : ''
  return `<!doctype html>
<html lang="en" data-mode="${mode}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta name="referrer" content="no-referrer">
<title>${TITLES[mode]}</title>
<link rel="icon" href="/inspector/icon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/inspector/app.css">
<script src="/inspector/app.js" defer></script>
</head>
<body>
<a class="skip" href="#list-title">Skip to the deliveries</a>
<header class="top">
  <h1>${TITLES[mode]}</h1>
  <dl id="info" class="info"></dl>
  <p id="live" class="live" role="status" aria-live="polite">Connecting…</p>
</header>
<main>
  <section id="login" class="panel" aria-labelledby="login-title" hidden>
    <h2 id="login-title">Key needed</h2>
    <p id="login-why">Open the link printed when this server started: it carries this run's key.</p>
    <form id="login-form" class="inline">
      <label for="login-key">API key</label>
      <input id="login-key" type="password" required autocomplete="off" spellcheck="false">
      <button type="submit" class="primary">Open</button>
    </form>
  </section>${actions}
  <p id="status" class="status" role="status" aria-live="polite"></p>
  <div class="split">
    <section id="deliveries" class="panel" aria-labelledby="list-title" hidden>
      <h2 id="list-title" tabindex="-1">Deliveries <span class="hint">newest first</span></h2>
      <form id="filters" class="filters" role="search" aria-label="Filter the deliveries">
        <span class="field"><label for="filter-outcome">Outcome</label>
        <select id="filter-outcome">
          <option value="">any</option>
          <option value="problem">not accepted</option>
          <option value="accepted">accepted</option>
          <option value="duplicate">duplicate</option>
          <option value="rejected">rejected</option>
          <option value="failed">failed</option>
          <option value="redirected">redirected</option>
          <option value="no_response">no response</option>
        </select></span>
        <span class="field"><label for="filter-type">Event type</label>
        <select id="filter-type"><option value="">any</option></select></span>
        <span class="field"><label for="filter-search">Search</label>
        <input id="filter-search" type="search" placeholder="request id or recipient" autocomplete="off" spellcheck="false"></span>
        <span id="filter-count" class="hint" role="status" aria-live="polite"></span>
      </form>
      <table id="list">
        <thead><tr><th scope="col" class="time">Time</th><th scope="col">${mode === 'sandbox' ? 'Batch' : 'Delivery'}</th><th scope="col" class="endpoint">${mode === 'sandbox' ? 'Endpoint' : 'Path'}</th><th scope="col">Events</th><th scope="col">Status</th><th scope="col" class="duration">Duration</th><th scope="col">Outcome</th></tr></thead>
        <tbody></tbody>
      </table>
      <p id="empty" class="empty">${mode === 'sandbox' ? 'Nothing sent yet.' : 'Nothing received yet.'}</p>
      <p id="no-match" class="empty" hidden>No delivery matches these filters.</p>
    </section>
    <section id="dead-letters" class="panel" aria-labelledby="dead-letters-title" hidden>
      <h2 id="dead-letters-title">Dead letters <span class="hint">events the router parked after their handlers failed, newest first</span></h2>
      <table id="dead-letter-list">
        <thead><tr><th scope="col">Parked</th><th scope="col">Type</th><th scope="col">Attempts</th><th scope="col">Last error</th><th scope="col">Fingerprint</th><th scope="col"></th></tr></thead>
        <tbody></tbody>
      </table>
      <p id="dead-letters-empty" class="empty">No dead letters.</p>
    </section>
    <section id="detail" class="panel detail" aria-labelledby="detail-title" hidden>
      <div class="detail-head">
        <div class="detail-name">
          <h2 id="detail-title" tabindex="-1"></h2>
          <p id="detail-endpoint" class="mono"></p>
        </div>
        <button type="button" id="detail-close" aria-label="Close the details (Escape)">Close</button>
      </div>
      <div id="detail-body"></div>
    </section>
  </div>
</main>
</body>
</html>
`
}

export const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#0969da"/><path d="M6 10h20v12H6z" fill="none" stroke="#fff" stroke-width="2"/><path d="M6 10l10 7 10-7" fill="none" stroke="#fff" stroke-width="2"/></svg>
`

export const APP_CSS = `:root {
  color-scheme: light dark;
  --bg: #ffffff; --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --panel: #f6f8fa; --row: #eef3f8;
  --ok: #116329; --ok-bg: #dafbe1; --bad: #a40e26; --bad-bg: #ffebe9; --warn: #7d4e00; --warn-bg: #fff8c5;
  --accent: #0969da; --accent-fg: #ffffff; --code: #eff2f5;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1; --line: #3d444d; --panel: #151b23; --row: #1c2530;
    --ok: #56d364; --ok-bg: #12261e; --bad: #ff8182; --bad-bg: #2d1618; --warn: #e3b341; --warn-bg: #272115;
    --accent: #4493f8; --accent-fg: #0d1117; --code: #1f2630;
  }
}
* { box-sizing: border-box; }
html { background: var(--bg); color: var(--fg); }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
a { color: var(--accent); }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.skip, .offscreen { position: absolute; left: -9999px; }
.skip:focus { left: 8px; top: 8px; background: var(--bg); padding: 4px 8px; z-index: 10; }
.top { padding: 12px 20px; border-bottom: 1px solid var(--line); display: flex; flex-wrap: wrap; gap: 6px 24px; align-items: baseline; }
h1 { font-size: 18px; margin: 0; }
h2 { font-size: 15px; margin: 0 0 8px; }
h3 { font-size: 13px; margin: 16px 0 6px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
.hint { font-weight: normal; color: var(--muted); font-size: 12px; }
.info { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 0; color: var(--muted); }
.info div { display: flex; gap: 6px; }
.info dt { font-weight: 600; }
.info dd { margin: 0; color: var(--fg); overflow-wrap: anywhere; }
.live { margin: 0 0 0 auto; color: var(--muted); font-size: 12px; }
.live.on::before { content: "\\25CF "; color: var(--ok); }
main { padding: 12px 20px 40px; }
.panel { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; margin-bottom: 12px; }
fieldset { border: 1px solid var(--line); border-radius: 6px; margin: 0 0 10px; padding: 6px 10px 8px; }
legend { color: var(--muted); padding: 0 4px; }
.checks { display: flex; flex-wrap: wrap; gap: 4px 14px; }
.checks label { display: inline-flex; gap: 4px; align-items: center; }
.buttons { display: flex; flex-wrap: wrap; gap: 8px; margin-bottom: 10px; }
button, input { font: inherit; color: inherit; }
button { background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 5px 12px; cursor: pointer; }
button:hover { border-color: var(--accent); }
button[aria-busy=true] { opacity: .6; cursor: progress; }
button.primary { background: var(--accent); border-color: var(--accent); color: var(--accent-fg); font-weight: 600; }
button.link { background: none; border: 0; padding: 0; color: var(--accent); text-decoration: underline; font-weight: 600; }
.inline { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; }
input[type=url], input[type=password] { background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 5px 8px; min-width: 22em; }
.status { min-height: 1.5em; margin: 0 0 8px; }
.status:empty { min-height: 0; margin: 0; }
.status.bad { color: var(--bad); }
.split { display: grid; grid-template-columns: minmax(0, 1fr); gap: 12px; }
@media (min-width: 1200px) {
  .split.open { grid-template-columns: minmax(0, 1fr) minmax(0, 1.15fr); }
  /* Beside the detail view the list keeps what tells rows apart, and where each went. */
  .split.open .duration, .split.open .types { display: none; }
  .split.open td.endpoint { max-width: 12em; }
}
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; }
tbody tr { cursor: pointer; }
tbody tr:hover, tbody tr.selected { background: var(--row); }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.name { white-space: nowrap; }
td.endpoint { max-width: 22em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
td.events { max-width: 18em; }
.split.open td.events { white-space: nowrap; }
.types { color: var(--muted); font-size: 12px; }
.badge { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 12px; font-weight: 600; border: 1px solid transparent; }
.badge.ok { color: var(--ok); background: var(--ok-bg); border-color: var(--ok); }
.badge.bad { color: var(--bad); background: var(--bad-bg); border-color: var(--bad); }
.badge.warn { color: var(--warn); background: var(--warn-bg); border-color: var(--warn); }
.tag { display: inline-block; margin-left: 6px; font-size: 12px; color: var(--muted); }
.outcome code { margin-left: 6px; }
.warning { color: var(--warn); font-weight: 600; }
.empty { color: var(--muted); }
.filters { display: flex; flex-wrap: wrap; gap: 6px 8px; align-items: center; margin: 0 0 8px; }
.filters .field { display: inline-flex; gap: 6px; align-items: center; }
.filters label { color: var(--muted); font-size: 12px; }
select, input[type=search] { font: inherit; color: inherit; background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 3px 6px; }
input[type=search] { min-width: 16em; }
/* The head of a detail (which delivery, where it went, Close) stays in view while the detail scrolls. */
.detail-head { display: flex; justify-content: space-between; align-items: flex-start; gap: 8px; position: sticky; top: 0; z-index: 1; background: var(--panel); margin: -12px -14px 0; padding: 12px 14px 8px; border-bottom: 1px solid var(--line); border-radius: 8px 8px 0 0; }
.detail-name { min-width: 0; }
.detail-name h2 { margin: 0; }
#detail-endpoint { margin: 2px 0 0; overflow-wrap: anywhere; }
.copy { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 10px 0 0; }
.scroll { overflow-x: auto; }
/* Addresses wrap between words; request ids (random letters) anywhere. */
table.events td { cursor: auto; overflow-wrap: break-word; }
table.events td.mono, table.events tr.more td { overflow-wrap: anywhere; }
table.events td.nowrap { white-space: nowrap; }
table.events tr { cursor: auto; }
table.events tr:hover { background: none; }
table.events tr.main td { border-bottom: 0; padding-bottom: 0; }
table.events tr.more td { color: var(--muted); font-size: 12px; padding-top: 0; }
table.events tr.more span { margin-right: 14px; }
table.events tbody.event:not(:has(tr.more)) tr.main td { border-bottom: 1px solid var(--line); padding-bottom: 5px; }
.facts { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 2px 14px; margin: 0; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; overflow-wrap: anywhere; }
.reason { border-left: 4px solid var(--bad); background: var(--bad-bg); padding: 6px 10px; margin: 10px 0; border-radius: 0 6px 6px 0; }
.reason.ok { border-color: var(--ok); background: var(--ok-bg); }
.reason.warn { border-color: var(--warn); background: var(--warn-bg); }
.reason p { margin: 2px 0; overflow-wrap: anywhere; }
pre { background: var(--code); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; margin: 0; overflow: auto; max-height: 28em; white-space: pre-wrap; overflow-wrap: anywhere; }
table.headers td:first-child { white-space: nowrap; color: var(--muted); width: 1%; }
table.headers td { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; overflow-wrap: anywhere; cursor: auto; }
table.headers tr { cursor: auto; }
table.headers tr:hover { background: none; }
@media (max-width: 700px) { td.endpoint { max-width: 10em; } input[type=url], input[type=password], input[type=search] { min-width: 0; width: 100%; } }
/* A narrow window (a phone, a side-by-side editor): the list keeps what says whether a delivery
   worked (which one, its events, status, outcome); time, endpoint and duration are in its detail. */
@media (max-width: 640px) {
  .top { padding: 10px 10px; }
  main { padding: 8px 8px 32px; }
  .panel { padding: 10px 8px; }
  .detail-head { margin: -10px -8px 0; padding: 10px 8px 8px; }
  .time, .endpoint, .duration, .types { display: none; }
  th, td { padding: 4px 5px; }
  td.outcome { overflow-wrap: anywhere; }
  .filters .field { flex: 1 1 100%; }
  .filters .field select, .filters .field input { flex: 1; }
  table.events td { overflow-wrap: anywhere; }
}
`
