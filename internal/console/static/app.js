// The operators' console: one page, a hash route per section. It reads the API through the
// console's own server (/ui/api/...), which forwards only the routes it allows (locally to the API
// in the same process, against AWS signed with the operator's credentials). Every value from the
// server is put in the page as text (textContent, never innerHTML), so nothing stored in an event
// can run as markup. Every action that changes something (retry, redrive) is a POST that carries
// the session's CSRF token and asks for a confirmation first.
'use strict';

const session = { csrfToken: '', mode: '' };
let timers = [];   // the current page's refreshes, cleared when the page changes
let nav = 0;       // counts navigations: an answer that arrives after the page changed is dropped
let paused = false; // auto-refresh paused by the operator
let samples = []; // the overview's counts over the last minutes, for rates
const rateWindow = 5 * 60 * 1000; // rates are taken over up to this much of the overview's history

// el builds an element: attrs are attributes (on* are listeners, and null skips one), children are
// nodes or text (null and false are skipped, arrays are flattened).
function el(tag, attrs, ...children) {
  const node = tag === 'svg' || tag === 'path' || tag === 'circle' || tag === 'title' || tag === 'g' || tag === 'text'
    ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  const add = (c) => {
    if (c === null || c === undefined || c === false) return;
    if (Array.isArray(c)) { c.forEach(add); return; }
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  };
  children.forEach(add);
  return node;
}

// Stale is thrown by api when the page that asked has been left: its code stops there, so a slow
// answer never draws into the page that replaced it.
class Stale extends Error {}

// status says text on the status line: a string, or an array of strings and nodes (a name, nameNode).
function status(text, isError) {
  const s = document.getElementById('status');
  fill(s, text || '');
  s.classList.toggle('error', !!isError);
}

// fill replaces node's children with content: a string, a node, or an array of them (as text, never
// markup).
function fill(node, content) {
  node.replaceChildren(...[].concat(content).map((c) => c instanceof Node ? c : document.createTextNode(String(c))));
}

// Names (a referenceId, a user id, an entity type, a worker id) are shown so that two different
// names never look alike. The API refuses new names with an invisible or formatting character
// (exactlyonce.Invisible: Unicode's Cf, such as the bidi overrides and isolates U+202A-U+202E and
// U+2066-U+2069, zero-width characters, U+2028, U+2029 and the other default-ignorable code
// points), but a name stored before that rule may hold one: shown as it is, "order-\u202E24" read
// "order-42". So each such character, a control character, a space other than U+0020 and a
// U+0020 at either end is shown as its code point, \u{202E}, marked, and a backslash as \\ (no name
// the API takes holds one), so that the shown text tells the name back; and the name is shown
// left to right in its characters' order, isolated from the text around it (<bdo dir="ltr">),
// so that no right-to-left letter or digit run reorders it: "א1" and "1א" read as they are stored.
const unseenChars = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Zs}\u034F\u115F\u1160\u17B4\u17B5\u2065\u3164\uFFA0\uFFF0-\uFFF8\u{E0000}-\u{E00FF}\u{E01F0}-\u{E0FFF}]/u;

// nameParts splits a name into runs of plain text and marks ({mark, what}).
function nameParts(name) {
  const chars = Array.from(String(name));
  const parts = [];
  chars.forEach((c, i) => {
    let mark = null;
    if (c === '\\') mark = '\\\\';
    else if (unseenChars.test(c) && !(c === ' ' && i > 0 && i < chars.length - 1)) {
      mark = '\\u{' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0') + '}';
    }
    if (mark) parts.push({ mark, what: c === '\\' ? 'a backslash' : 'U+' + mark.slice(3, -1) + ', a character that shows nothing of itself' });
    else if (parts.length && typeof parts[parts.length - 1] === 'string') parts[parts.length - 1] += c;
    else parts.push(c);
  });
  return parts;
}

// shownName is a name as text, its unseen characters written as their code points (for a title or
// an attribute; in the page, nameNode).
function shownName(name) { return nameParts(name).map((p) => typeof p === 'string' ? p : p.mark).join(''); }

// nameNode is a name as the page shows it: left to right in its characters' order, isolated, its
// unseen characters marked.
function nameNode(name) {
  return el('bdo', { dir: 'ltr', class: 'name' }, nameParts(name).map((p) => typeof p === 'string' ? p : el('span', { class: 'unseen', title: p.what }, p.mark)));
}

// api calls the console's server: path is the API's own path ("/agents").
async function api(path, opts = {}) {
  const asked = nav;
  const init = { method: opts.method || 'GET', headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (init.method !== 'GET') {
    init.headers['X-CSRF-Token'] = session.csrfToken;
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.body || {});
  }
  const resp = await fetch('api' + path, init);
  let body = null;
  try { body = parseAnswer(await resp.text()); } catch (e) { body = null; }
  if (asked !== nav && init.method === 'GET') throw new Stale('left');
  if (!resp.ok) {
    const msg = body && body.error ? body.error : 'HTTP ' + resp.status;
    const err = new Error(msg);
    err.status = resp.status;
    throw err;
  }
  return body;
}

// Written is a number of an answer whose text is not the one JavaScript writes for its value: a
// payload's 12345678901234567890 (past 2^53), 1.0, 1e2 or -0, which the API answers byte for byte
// as the producer sent them. It is shown as written (toString, showJSON), and counts as its value
// (valueOf), where JSON.parse alone made 12345678901234567000, 1, 100 and 0 of them.
class Written {
  constructor(source) { this.source = source; }
  valueOf() { return Number(this.source); }
  toString() { return this.source; }
}

// parseAnswer reads an answer's JSON, keeping each number of a payload whose text its value would
// not give back as a Written (JSON.parse's source text: a browser without it reads numbers as
// values, as before). The API's own numbers (ids, counts, durations) stay numbers, as the pages
// compute with them.
function parseAnswer(text) {
  const parsed = JSON.parse(text, function (k, v, ctx) {
    if (typeof v === 'number' && ctx && typeof ctx.source === 'string' && ctx.source !== String(v)) return new Written(ctx.source);
    return v;
  });
  const outside = (v) => {
    if (v instanceof Written) return Number(v.source);
    if (Array.isArray(v)) return v.map(outside);
    if (v !== null && typeof v === 'object') {
      for (const k of Object.keys(v)) if (k !== 'payload') v[k] = outside(v[k]);
    }
    return v;
  };
  return outside(parsed);
}

// showJSON is v as indented JSON, its Written numbers as they were written.
function showJSON(v) {
  const mark = 'written-' + Math.random().toString(36).slice(2) + '-' + Date.now() + ':';
  const sources = [];
  const text = JSON.stringify(v, (k, x) => {
    if (x instanceof Written) { sources.push(x.source); return mark + (sources.length - 1); }
    return x;
  }, 2);
  if (!sources.length) return text;
  return text.replace(new RegExp('"' + mark + '(\\d+)"', 'g'), (m, i) => sources[Number(i)]);
}

function fmtTime(t) {
  if (!t) return '—';
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}
function fmtNum(n) { return n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US'); }
function fmtSeconds(s) {
  if (s === null || s === undefined) return 'nothing waiting';
  if (s < 1) return (s * 1000).toFixed(0) + ' ms';
  if (s < 120) return s.toFixed(1) + ' s';
  if (s < 7200) return (s / 60).toFixed(1) + ' min';
  return (s / 3600).toFixed(1) + ' h';
}
// fmtRate shows a rate (events per second) with two significant digits below 10 and whole above, so
// that a slow rate keeps its digits (one event a minute is 0.017, where one decimal showed 0.0, as if
// nothing happened); none is 0.
function fmtRate(r) {
  if (!(r > 0)) return '0';
  if (r >= 10) return Math.round(r).toLocaleString('en-US');
  return String(Number(r.toPrecision(2)));
}
function badge(state) {
  const cls = { processed: 'ok', completed: 'ok', failed: 'bad', processing: 'info', pending: 'warn', queued: 'warn',
    active: 'ok', expired: 'bad', done: 'info', RUNNING: 'ok', WAITING: 'warn', SUSPENDED: 'bad' }[state] || 'info';
  return el('span', { class: 'badge ' + cls }, state);
}
function eventLink(id) { return el('a', { href: '#/events/' + encodeURIComponent(id) }, String(id)); }
function refLink(ref) { return ref ? el('a', { href: '#/references/' + encodeURIComponent(ref) }, nameNode(ref)) : '—'; }

function table(caption, headers, rows, opts = {}) {
  return el('table', { id: opts.id || null },
    el('caption', null, caption),
    el('thead', null, el('tr', null, headers.map((h) => el('th', { scope: 'col', class: /^(#|sum|version|count|visible|in flight|delayed|attempts|remaining|completed|failed|max|events$)/i.test(h) ? 'num' : null }, h)))),
    el('tbody', null, rows.length ? rows : el('tr', null, el('td', { colspan: headers.length, class: 'muted' }, opts.empty || 'Nothing to show.'))));
}
function row(cells, attrs) { return el('tr', attrs || null, cells.map((c) => (c instanceof Node && (c.tagName === 'TD' || c.tagName === 'TH')) ? c : el('td', null, c))); }
function num(v) { return el('td', { class: 'num' }, fmtNum(v)); }

// confirm asks before a change, in the page's dialog (keyboard: Escape cancels, focus starts on
// Cancel so that Enter alone never confirms).
function confirmAction(title, text) {
  const d = document.getElementById('confirm');
  fill(document.getElementById('confirm-title'), title);
  fill(document.getElementById('confirm-text'), text);
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.returnValue = '';
    d.showModal();
    document.getElementById('confirm-cancel').focus();
  });
}

// every refreshes a part of the current page while it is shown.
function every(ms, fn) {
  const page = nav;
  let id = 0;
  const tick = async () => {
    if (page !== nav) { clearInterval(id); return; }
    if (paused || document.hidden) return;
    try { await fn(); } catch (e) { if (!(e instanceof Stale)) status(e.message, true); }
  };
  id = setInterval(tick, ms);
  timers.push(id);
}

// updated says when a refreshing page last drew, outside the live region (a screen reader would
// otherwise announce it at every refresh).
function updated() {
  const u = document.getElementById('updated');
  if (u) u.textContent = 'Updated ' + new Date().toLocaleTimeString();
}

function pauseButton() {
  return el('button', { type: 'button', id: 'pause', 'aria-pressed': String(paused), onclick: (ev) => {
    paused = !paused;
    ev.currentTarget.setAttribute('aria-pressed', String(paused));
    ev.currentTarget.textContent = paused ? 'Resume auto-refresh' : 'Pause auto-refresh';
  } }, paused ? 'Resume auto-refresh' : 'Pause auto-refresh');
}

// replace swaps a region's content, keeping its place (and the focus of anything outside it).
function replace(id, node) {
  const old = document.getElementById(id);
  if (old) old.replaceWith(node);
}

// ---- Overview

async function overview(main) {
  main.append(el('h1', null, 'Overview'), pauseButton(), el('p', { class: 'muted', id: 'updated' }), el('div', { id: 'ov-body' }, el('p', null, 'Loading…')),
    el('div', { id: 'ov-history' }));
  const draw = async () => {
    const [ov, qs, byPath] = await Promise.all([api('/overview'), api('/queues').catch((e) => ({ error: e.message })),
      api('/rates').catch((e) => ({ unavailable: e.message }))]);
    const now = Date.parse(ov.time) || Date.now();
    const e = ov.events;
    samples = samples.filter((x) => x.at < now && now - x.at <= rateWindow);
    let rates = null;
    if (samples.length) {
      const first = samples[0];
      const dt = (now - first.at) / 1000;
      const rate = (k) => Math.max(0, (e[k] - first.events[k]) / dt);
      rates = { created: rate('total'), processed: rate('processed'), failed: rate('failed'), over: dt };
    }
    samples.push({ at: now, events: e });
    const card = (id, label, value) => el('li', { class: 'card' }, el('span', { class: 'label', id: id + '-label' }, label),
      el('span', { class: 'value', id, 'aria-labelledby': id + '-label ' + id }, value));
    replace('ov-body', el('div', { id: 'ov-body' },
      el('h2', null, 'Events by state'),
      el('ul', { class: 'cards' },
        card('count-pending', 'Pending', fmtNum(e.pending)),
        card('count-processing', 'Processing', fmtNum(e.processing)),
        card('count-queued', 'Queued behind their reference', fmtNum(e.queued)),
        card('count-processed', 'Processed', fmtNum(e.processed)),
        card('count-failed', 'Failed', fmtNum(e.failed)),
        card('count-total', 'Total', fmtNum(e.total))),
      el('h2', null, 'Waiting and rates'),
      el('ul', { class: 'cards' },
        card('oldest-waiting', 'Oldest waiting event', fmtSeconds(ov.oldestWaitingSeconds)),
        card('waiting', 'Waiting for a worker', fmtNum(ov.waiting)),
        card('rate-created', 'Created / s', rates ? fmtRate(rates.created) : '…'),
        card('rate-processed', 'Processed / s', rates ? fmtRate(rates.processed) : '…'),
        card('rate-failed', 'Failed / s', rates ? fmtRate(rates.failed) : '…')),
      el('p', { class: 'muted', id: 'rates-note' }, rates
        ? 'Rates over the last ' + fmtSeconds(rates.over) + ' this page has watched (up to 5 min), on the database clock (' + fmtTime(ov.time) + ').'
        : 'Rates appear at the next refresh.'),
      el('h2', null, 'Processed by path'),
      pathRates(byPath),
      el('h2', null, 'Queues'),
      queuesTable(qs, false)));
    updated();
  };
  await draw();
  every(2000, draw);
  // The history by tier reads every row of `events` (not the packed history): drawn less often.
  const drawHistory = async () => {
    let h;
    try { h = await api('/history'); } catch (e) {
      if (e instanceof Stale) throw e;
      replace('ov-history', el('div', { id: 'ov-history' }, el('h2', null, 'History by tier'),
        el('p', { class: 'muted', id: 'history-unavailable' }, 'The history by tier is unavailable: ' + e.message)));
      return;
    }
    replace('ov-history', historyTiers(h));
  };
  await drawHistory();
  every(10000, drawHistory);
}

// historyTiers shows where the history is (GET /history): rows of the events table, packed pages in
// the database, and page objects archived to S3. The tiers add up to the total count.
function historyTiers(h) {
  const a = h.archive;
  const cell = (id, v) => el('td', { class: 'num', id }, v);
  return el('div', { id: 'ov-history' },
    el('h2', null, 'History by tier'),
    table('Where the ' + fmtNum(h.total) + ' events are', ['Tier', 'Where', 'Events', 'Held in'], [
      row([el('th', { scope: 'row' }, 'Events table'), 'database: events', cell('tier-events', fmtNum(h.events.rows)),
        el('td', { id: 'tier-events-held' }, 'one row an event: open, not packed yet, or failed')]),
      row([el('th', { scope: 'row' }, 'Packed pages'), 'database: event_pages', cell('tier-pages', fmtNum(h.pages.events)),
        el('td', { id: 'tier-pages-held' }, (h.pages.rowsEstimated ? 'about ' : '') + fmtNum(h.pages.rows) + (h.pages.rows === 1 ? ' page row' : ' page rows'))]),
      row([el('th', { scope: 'row' }, 'Archive'), 'S3: the history bucket', cell('tier-archive', a ? fmtNum(a.events) : '—'),
        el('td', { id: 'tier-archive-held' }, a ? fmtNum(a.pages) + (a.pages === 1 ? ' page object' : ' page objects') : 'nothing archived: every page is in the database')]),
    ], { id: 'history-tiers' }),
    el('p', { class: 'muted' }, 'As of ' + fmtTime(h.time) + ' on the database clock. Events are exact and add up to the total; ' +
      'page rows are InnoDB\'s own count of the table\'s rows, which it keeps as rows come and go and may be behind after a restart.'));
}

// pathRates shows the processed events per second of each path, from the system's metrics (the
// database does not record them cheaply): the local run's own counters, or CloudWatch's.
function pathRates(r) {
  if (r.unavailable) return el('p', { class: 'muted', id: 'path-rates' }, 'Rates by path are unavailable: ' + r.unavailable);
  const paths = ['api', 'processor', 'sweeper', 'agent'];
  const unseen = r.notMeasured || [];
  const from = r.source === 'cloudwatch' ? 'CloudWatch metrics (per minute, the last one possibly incomplete)' : 'the local run\'s metrics';
  return el('div', { id: 'path-rates' },
    el('ul', { class: 'cards' }, paths.map((p) => el('li', { class: 'card' }, el('span', { class: 'label', id: 'path-' + p + '-label' }, p + ' / s'),
      el('span', { class: 'value', id: 'path-' + p, 'aria-labelledby': 'path-' + p + '-label path-' + p },
        unseen.includes(p) ? '—' : fmtRate((r.processedPerSecond || {})[p] || 0))))),
    el('p', { class: 'muted' }, 'Events processed per second by each path, over the last ' + fmtSeconds(r.windowSeconds || 0) + ', from ' + from +
      ' (api: events processed at birth by POST /events)' + (unseen.length ? '; not measured here: ' + unseen.join(', ') + '.' : '.')));
}

// ---- Events

const listStates = ['pending', 'processing', 'queued', 'failed', 'processed'];

async function events(main, params) {
  const state = listStates.includes(params.get('state')) ? params.get('state') : 'pending';
  const kind = ['plain', 'task'].includes(params.get('kind')) ? params.get('kind') : '';
  const before = /^\d+$/.test(params.get('before') || '') ? params.get('before') : '';
  const link = (s, k, b) => '#/events?' + new URLSearchParams(Object.entries({ state: s, kind: k, before: b }).filter(([, v]) => v)).toString();
  const kindSelect = el('select', { id: 'kind', name: 'kind' },
    el('option', { value: '', selected: kind === '' }, 'all'),
    el('option', { value: 'plain', selected: kind === 'plain' }, 'plain'),
    el('option', { value: 'task', selected: kind === 'task' }, 'task'));
  const lookup = el('input', { id: 'lookup', name: 'id', inputmode: 'numeric', pattern: '[0-9]+', required: true, size: 12 });
  main.append(el('h1', null, 'Events'),
    el('form', { class: 'inline', role: 'search', onsubmit: (ev) => { ev.preventDefault(); location.hash = '#/events/' + encodeURIComponent(lookup.value.trim()); } },
      el('label', { for: 'lookup' }, 'Look up an event by id', lookup), el('button', { type: 'submit' }, 'Open')),
    el('nav', { 'aria-label': 'Event states' }, el('ul', { class: 'tabs' }, listStates.map((s) =>
      el('li', null, el('a', { href: link(s, kind, ''), 'aria-current': s === state ? 'page' : null }, s))))),
    el('form', { class: 'inline', onsubmit: (ev) => { ev.preventDefault(); location.hash = link(state, kindSelect.value, ''); } },
      el('label', { for: 'kind' }, 'Kind', kindSelect), el('button', { type: 'submit' }, 'Filter')),
    el('div', { id: 'ev-body' }, el('p', null, 'Loading…')));
  const q = new URLSearchParams({ state });
  if (kind) q.set('kind', kind);
  if (before) q.set('before', before);
  const res = await api('/events?' + q.toString());
  const rows = res.events.map((e) => row([eventLink(e.id), e.kind || 'plain', badge(e.state), fmtTime(e.createdAt),
    fmtTime(e.completedAt || e.processedAt), refLink(e.referenceId), el('td', { class: 'num' }, fmtNum(e.attempts || 0)),
    el('td', { class: 'wrap' }, e.exceptionMessage || e.lastError || '')]));
  replace('ev-body', el('div', { id: 'ev-body' },
    table((kind ? kind + ' ' : '') + state + ' events, newest first', ['#', 'kind', 'state', 'created', 'settled', 'reference', 'attempts', 'error'], rows, { id: 'events-table' }),
    el('div', { class: 'pager' },
      before ? el('a', { href: link(state, kind, '') }, 'Newest') : null,
      res.next ? el('a', { href: link(state, kind, res.next), id: 'older' }, 'Older') : null)));
}

async function eventPage(main, id) {
  main.append(el('h1', null, 'Event ' + id), el('div', { id: 'event-body' }, el('p', null, 'Loading…')));
  const e = await api('/events/' + encodeURIComponent(id));
  const fields = el('dl', { class: 'fields', id: 'event-fields' }, Object.entries(e).map(([k, v]) => [
    el('dt', null, k), el('dd', null, k === 'state' ? badge(v) : k === 'referenceId' && typeof v === 'string' ? nameNode(v)
      : (v !== null && typeof v === 'object') ? el('pre', null, showJSON(v)) : (v === null ? '—' : String(v)))]));
  const parts = [fields];
  if (e.kind === 'task') {
    if (e.isFailed) {
      parts.push(el('p', null, retryButton(e.id, () => route())));
    }
    // A task keeps its attempts across manual retries: they come a page at a time, the next one
    // behind a button, as a reference's tasks do.
    const at = await api('/events/' + encodeURIComponent(id) + '/attempts');
    let attempts = at.attempts, nextAttempt = at.next;
    const attemptsBlock = () => el('div', { id: 'attempts-body' },
      table('Delivery attempts', ['#', 'started', 'duration (ms)', 'status', 'error'],
        attempts.map((a) => row([el('td', { class: 'num' }, a.number), fmtTime(a.startedAt), el('td', { class: 'num' }, a.durationMs.toFixed(1)),
          a.status === null ? '—' : String(a.status), el('td', { class: 'wrap' }, a.error || '')])), { id: 'attempts-table' }),
      nextAttempt !== null ? el('button', { type: 'button', id: 'more-attempts', onclick: async () => {
        const more = await api('/events/' + encodeURIComponent(id) + '/attempts?after=' + nextAttempt);
        attempts = attempts.concat(more.attempts);
        nextAttempt = more.next;
        replace('attempts-body', attemptsBlock());
      } }, 'More attempts') : null);
    parts.push(el('h2', null, 'Attempts'), attemptsBlock());
    if (e.referenceId) {
      parts.push(el('h2', null, 'Its reference\'s order'), await referenceAround(e.referenceId, e.id));
    }
  }
  replace('event-body', el('div', { id: 'event-body' }, parts));
}

// referenceAround shows a task's neighbours in its reference's delivery order (up to 5 either side),
// from the reference's first 1,000 tasks: one read (a reference's listing scans the history until
// issue 19 gives it a flat shape, so the page asks once); a task further on links to the reference.
async function referenceAround(ref, id) {
  const res = await api('/references/' + encodeURIComponent(ref) + '/events?limit=1000');
  const all = res.events;
  const i = all.findIndex((t) => t.id === id);
  const shown = i < 0 ? all.slice(0, 11) : all.slice(Math.max(0, i - 5), i + 6);
  return el('div', null,
    table(['Tasks of reference ', nameNode(ref), ' in delivery order, around this one'], ['#', 'state', 'attempts', 'created', 'settled'],
      shown.map((t) => row([eventLink(t.id), badge(t.state), el('td', { class: 'num' }, t.attempts), fmtTime(t.createdAt), fmtTime(t.settledAt)],
        t.id === id ? { class: 'current', 'aria-current': 'true' } : null)), { id: 'reference-around' }),
    el('p', null, el('a', { href: '#/references/' + encodeURIComponent(ref) }, 'All tasks of ', nameNode(ref))));
}

// focusHeading puts the focus on the page's heading after the page was drawn again, so that the
// keyboard does not fall back to the top of the document.
function focusHeading() {
  const h = document.querySelector('#main h1');
  if (h) { h.setAttribute('tabindex', '-1'); h.focus(); }
}

// lost says whether a retry's error is its answer lost (502, 504: the API may have applied it, as
// the message says), not a refusal.
function lost(e) { return e.status === 502 || e.status === 504; }

function retryButton(id, after) {
  return el('button', { type: 'button', class: 'primary', 'data-retry': id, onclick: async (ev) => {
    const button = ev.currentTarget; // null once the handler has awaited
    const ok = await confirmAction('Retry task ' + id + '?', 'Task ' + id + ' is delivered again, in its reference\'s order, with a fresh retry budget; its attempts are numbered on from the last.');
    if (!ok) return;
    button.disabled = true;
    try {
      const res = await api('/events/' + encodeURIComponent(id) + '/retry', { method: 'POST' });
      await after(); // the page again, which clears the status line: the outcome is said after it
      status('Task ' + id + ' is ' + res.state + ' again' + (res.state === 'queued' ? ', behind the open task of its reference.' : '.'));
      focusHeading();
    } catch (e) {
      button.disabled = false;
      status('Retry of ' + id + (lost(e) ? ' unanswered: ' : ' refused: ') + e.message, true);
    }
  } }, 'Retry ' + id);
}

function retryReferenceButton(ref, after) {
  return el('button', { type: 'button', class: 'primary', 'data-retry-reference': ref, onclick: async () => {
    const ok = await confirmAction(['Retry every failed task of ', nameNode(ref), '?'], ['The failed tasks of reference ', nameNode(ref), ' are delivered again, in their order.']);
    if (!ok) return;
    // The API retries a reference's failed tasks in parts and answers more while some remain:
    // call it again until none does (the first answer's placement is the retry's).
    let count = 0, placement = null;
    try {
      for (;;) {
        const res = await api('/references/' + encodeURIComponent(ref) + '/retry', { method: 'POST' });
        count += res.retried.length;
        placement = placement || res.placement;
        if (!res.more) break;
        status([count + ' task(s) of ', nameNode(ref), ' retried so far; going on.']);
      }
      await after();
      status([count + ' task(s) of ', nameNode(ref), ' retried' +
        (placement === 'end' ? ', at the end of the reference (later tasks had started).' : ', in place.')]);
      focusHeading();
    } catch (e) {
      status(['Retry of ', nameNode(ref), (lost(e) ? ' unanswered' : ' refused') + (count ? ' after ' + count + ' task(s) (retry again to go on)' : '') + ': ' + e.message], true);
    }
  } }, 'Retry all failed of ', nameNode(ref));
}

// ---- Failed tasks

async function failed(main, params) {
  const before = /^\d+$/.test(params.get('before') || '') ? params.get('before') : '';
  main.append(el('h1', null, 'Failed tasks'), el('div', { id: 'failed-body' }, el('p', null, 'Loading…')));
  const res = await api('/events?state=failed&kind=task' + (before ? '&before=' + before : ''));
  const refs = [...new Set(res.events.map((e) => e.referenceId).filter(Boolean))];
  replace('failed-body', el('div', { id: 'failed-body' },
    table('Tasks whose retries are spent, newest first', ['#', 'reference', 'url', 'exception', 'attempts', 'action'],
      res.events.map((e) => row([eventLink(e.id), refLink(e.referenceId), el('td', { class: 'wrap' }, e.url), el('td', { class: 'wrap' }, e.exceptionMessage || ''),
        el('td', { class: 'num' }, e.attempts), el('td', null, retryButton(e.id, () => route()))])), { id: 'failed-table', empty: 'No failed task.' }),
    refs.length ? [el('h2', null, 'By reference'), el('ul', null, refs.map((r) => el('li', null, retryReferenceButton(r, () => route()))))] : null,
    el('div', { class: 'pager' }, res.next ? el('a', { href: '#/failed?before=' + res.next }, 'Older') : null)));
}

// ---- References

async function references(main, ref) {
  const input = el('input', { id: 'reference', name: 'reference', required: true, value: ref || '', size: 30 });
  main.append(el('h1', null, ref ? ['Reference ', nameNode(ref)] : 'References'),
    el('form', { class: 'inline', role: 'search', onsubmit: (ev) => { ev.preventDefault(); location.hash = '#/references/' + encodeURIComponent(input.value.trim()); } },
      el('label', { for: 'reference' }, 'Reference id', input), el('button', { type: 'submit' }, 'Show')));
  if (!ref) return;
  const body = el('div', { id: 'ref-body' }, el('p', null, 'Loading…'));
  main.append(body);
  let after = '', tasks = [];
  const res = await api('/references/' + encodeURIComponent(ref) + '/events?limit=1000');
  tasks = res.events;
  after = res.next;
  const draw = () => {
    const anyFailed = tasks.some((t) => t.state === 'failed');
    replace('ref-body', el('div', { id: 'ref-body' },
      anyFailed ? el('p', null, retryReferenceButton(ref, () => route())) : null,
      table(['Tasks of ', nameNode(ref), ' in delivery order'], ['#', 'state', 'attempts', 'created', 'settled'],
        tasks.map((t) => row([eventLink(t.id), badge(t.state), el('td', { class: 'num' }, t.attempts), fmtTime(t.createdAt), fmtTime(t.settledAt)])),
        { id: 'reference-table', empty: 'This reference has no task.' }),
      after ? el('button', { type: 'button', onclick: async () => {
        const more = await api('/references/' + encodeURIComponent(ref) + '/events?limit=1000&after=' + after);
        tasks = tasks.concat(more.events);
        after = more.next;
        draw();
      } }, 'More') : null));
  };
  draw();
}

// ---- Agents

const hashSpace = 2 ** 32;
const palette = ['#0b57d0', '#b35c00', '#0d7a3a', '#a3128f', '#5b3cc4', '#a11b1f', '#00707a', '#6b5d00'];

function agentRange(a) {
  if (a.totalShardCount === null || a.assignedShardIndex === null || a.sharding === 'none') return null;
  const size = Math.floor(hashSpace / a.totalShardCount);
  const lo = a.assignedShardIndex * size;
  const hi = a.assignedShardIndex === a.totalShardCount - 1 ? hashSpace - 1 : lo + size - 1;
  return { lo, hi };
}

// ring draws the 32-bit hash space as a circle, each agent's range an arc of its colour.
function ring(agents) {
  const c = 100, r = 80;
  const point = (h) => {
    const a = (h / hashSpace) * 2 * Math.PI - Math.PI / 2;
    return [c + r * Math.cos(a), c + r * Math.sin(a)];
  };
  const arcs = [], legend = [];
  agents.forEach((a, i) => {
    const rg = agentRange(a);
    const colour = palette[i % palette.length];
    legend.push(el('li', null, el('span', { class: 'swatch', style: null, 'data-colour': colour }), a.name + ': ' + (rg ? rg.lo + ' – ' + rg.hi : 'no range')));
    if (!rg) return;
    const [x1, y1] = point(rg.lo), [x2, y2] = point(rg.hi + 1);
    const large = (rg.hi + 1 - rg.lo) / hashSpace > 0.5 ? 1 : 0;
    const d = (rg.hi + 1 - rg.lo) >= hashSpace
      ? `M ${c} ${c - r} A ${r} ${r} 0 1 1 ${c - 0.01} ${c - r}`
      : `M ${x1.toFixed(2)} ${y1.toFixed(2)} A ${r} ${r} 0 ${large} 1 ${x2.toFixed(2)} ${y2.toFixed(2)}`;
    arcs.push(el('path', { d, fill: 'none', stroke: colour, 'stroke-width': 18, 'data-agent': a.name },
      el('title', null, a.name + ' [' + rg.lo + ', ' + rg.hi + ']')));
  });
  const summary = agents.map((a) => { const rg = agentRange(a); return a.name + (rg ? ' owns ' + rg.lo + ' to ' + rg.hi : ' has no range'); }).join('; ');
  const svg = el('svg', { class: 'ring', viewBox: '0 0 200 200', role: 'img', 'aria-label': 'Hash ring: ' + (summary || 'no agent') },
    el('circle', { cx: c, cy: c, r, fill: 'none', stroke: '#c9d1d9', 'stroke-width': 18 }), arcs);
  const list = el('ul', { class: 'legend', id: 'ring-legend' }, legend);
  // Colours are set as properties (a CSP without 'unsafe-inline' refuses style attributes).
  list.querySelectorAll('.swatch').forEach((s) => { s.style.background = s.getAttribute('data-colour'); });
  return el('div', { class: 'ring-wrap', id: 'ring' }, svg, list);
}

async function agentsPage(main) {
  main.append(el('h1', null, 'Agents'), pauseButton(), el('p', { class: 'muted', id: 'updated' }), el('div', { id: 'agents-body' }, el('p', null, 'Loading…')));
  const draw = async () => {
    const res = await api('/agents');
    const now = Date.now();
    const live = res.agents.filter((a) => Date.parse(a.expiration) > now);
    replace('agents-body', el('div', { id: 'agents-body' },
      el('h2', null, 'Hash ranges of the live agents'), ring(live.filter((a) => a.sharding !== 'none')),
      table('Registered agents (an expired one stays listed until another agent\'s pulse ejects it)',
        ['#', 'name', 'kind', 'sharding', 'state', 'shard', 'range', 'last pulse', 'expires'],
        res.agents.map((a) => {
          const rg = agentRange(a);
          const expired = Date.parse(a.expiration) <= now;
          return row([el('td', { class: 'num' }, a.id), a.name, a.kind, a.sharding, badge(expired ? 'expired' : a.state),
            a.totalShardCount === null ? '—' : a.assignedShardIndex + ' of ' + a.totalShardCount,
            rg ? '[' + rg.lo + ', ' + rg.hi + ']' : '—', fmtTime(a.lastPulseAt), fmtTime(a.expiration)]);
        }), { id: 'agents-table', empty: 'No agent is registered.' })));
    updated();
  };
  await draw();
  every(1000, draw);
}

// ---- Workers

async function workersPage(main, params) {
  const active = params.get('active');
  const q = active === 'true' || active === 'false' ? '?active=' + active : '';
  main.append(el('h1', null, 'Event workers'),
    el('nav', { 'aria-label': 'Worker filter' }, el('ul', { class: 'tabs' },
      [['', 'all'], ['true', 'active'], ['false', 'done']].map(([v, label]) => el('li', null,
        el('a', { href: '#/workers' + (v ? '?active=' + v : ''), 'aria-current': (active || '') === v ? 'page' : null }, label))))),
    pauseButton(), el('p', { class: 'muted', id: 'updated' }), el('div', { id: 'workers-body' }, el('p', null, 'Loading…')));
  const draw = async () => {
    const res = await api('/workers' + q);
    replace('workers-body', el('div', { id: 'workers-body' }, table('The EventService registry: live workers oldest first, then done ones',
      ['worker', 'agent', 'created', 'last completed', 'remaining', 'completed', 'failed', 'max references', 'will terminate', 'done', 'references'],
      res.workers.map((w) => row([nameNode(w.workerId), String(w.agentId), fmtTime(w.createdAt), w.lastCompletedTask === null ? '—' : eventLink(w.lastCompletedTask),
        num(w.tasksRemaining), num(w.tasksCompleted), num(w.tasksFailed), num(w.maxReferenceCount), w.willTerminate ? 'yes' : 'no',
        w.isDone ? badge('done') : badge('active'), el('td', { class: 'wrap' }, w.references.length ? w.references.map((r, i) => [i ? ', ' : '', refLink(r)]) : '—')])),
      { id: 'workers-table', empty: 'No event worker.' })));
    updated();
  };
  await draw();
  every(2000, draw);
}

// ---- Counters

async function countersPage(main, params) {
  const user = params.get('user') || '', type = params.get('type') || '';
  const u = el('input', { id: 'user', name: 'user', required: true, value: user, size: 24 });
  const t = el('input', { id: 'type', name: 'type', value: type, size: 16 });
  main.append(el('h1', null, 'Counters'),
    el('form', { class: 'inline', role: 'search', onsubmit: (ev) => {
      ev.preventDefault();
      location.hash = '#/counters?' + new URLSearchParams(Object.entries({ user: u.value.trim(), type: t.value.trim() }).filter(([, v]) => v)).toString();
    } }, el('label', { for: 'user' }, 'User id', u), el('label', { for: 'type' }, 'Entity type (optional)', t), el('button', { type: 'submit' }, 'Look up')));
  if (!user) return;
  // A user's counts come a page at a time (up to 1,000 entity types, or ?limit=): after and limit
  // pass through to the API, and a page with more after it links to the next.
  const paging = new URLSearchParams(['after', 'limit'].filter((k) => params.get(k)).map((k) => [k, params.get(k)])).toString();
  const path = '/counters/' + encodeURIComponent(user) + (type ? '/' + encodeURIComponent(type) : (paging ? '?' + paging : ''));
  const res = await api(path);
  const entries = type ? [[res.entityType, res]] : Object.entries(res.counters);
  main.append(table(['Counts of ', nameNode(user)], ['entity type', 'sum', 'version'],
    entries.map(([k, v]) => row([nameNode(k), num(v.sum), num(v.version)])), { id: 'counters-table', empty: 'No count for this user.' }));
  if (!type && res.next) {
    const more = new URLSearchParams({ user, after: res.next });
    if (params.get('limit')) more.set('limit', params.get('limit'));
    main.append(el('div', { class: 'pager' }, el('a', { href: '#/counters?' + more.toString(), id: 'more-counts' }, 'More entity types')));
  }
}

// ---- Queues

function queuesTable(qs, actions) {
  if (qs.error) return el('p', { class: 'muted', id: 'queues-table' }, 'Queue depths are unavailable: ' + qs.error);
  return table('Queues and their dead-letter queues', ['queue', 'visible', 'in flight', 'delayed', 'DLQ', 'DLQ visible', actions ? 'action' : null].filter(Boolean),
    qs.queues.map((q) => row([q.name, num(q.visible), num(q.inFlight), num(q.delayed), q.dlq ? q.dlq.name : '—', q.dlq ? num(q.dlq.visible) : '—',
      actions ? el('td', null, q.dlq ? [redriveButton(q.name, true), ' ', redriveButton(q.name, false)] : '—') : null].filter((c) => c !== null))),
    { id: 'queues-table', empty: 'No queue is configured.' });
}

function redriveButton(name, dryRun) {
  return el('button', { type: 'button', class: dryRun ? null : 'danger', 'data-redrive': name, 'data-dry-run': String(dryRun), onclick: async () => {
    if (!dryRun) {
      const ok = await confirmAction('Redrive ' + name + '\'s DLQ?', 'Every message of the dead-letter queue of ' + name + ' is moved back to ' + name + ', to be processed again.');
      if (!ok) return;
    }
    try {
      const res = await api('/queues/' + encodeURIComponent(name) + '/redrive', { method: 'POST', body: { dryRun } });
      const out = document.getElementById('redrive-result');
      if (dryRun) {
        out.replaceChildren(el('h2', null, 'Dry run of ' + name), el('p', null, (res.approximate ? 'About ' + res.messages + ' message(s) would be moved (the DLQ\'s own count: the dry run lists at most 100)' : res.messages + ' message(s) would be moved') + '; nothing was changed.'),
          res.sample.length ? el('pre', null, res.sample.join('\n')) : null);
      } else {
        out.replaceChildren(el('h2', null, 'Redrive of ' + name), el('p', null, res.moved + ' message(s) moved back to ' + name + '.'));
      }
      status(dryRun ? 'Dry run done.' : 'Redrive done.');
    } catch (e) { status('Redrive of ' + name + ' refused: ' + e.message, true); }
  } }, dryRun ? 'Dry run' : 'Redrive');
}

async function queuesPage(main) {
  main.append(el('h1', null, 'Queues'), el('div', { id: 'queues-body' }, el('p', null, 'Loading…')), el('section', { id: 'redrive-result', 'aria-live': 'polite' }));
  const draw = async () => { replace('queues-body', el('div', { id: 'queues-body' }, queuesTable(await api('/queues'), true))); };
  await draw();
}

// ---- Routing

async function route() {
  timers.forEach(clearInterval);
  timers = [];
  nav++;
  const hash = location.hash.startsWith('#/') ? location.hash.slice(1) : '/';
  const [path, query] = hash.split('?');
  const main = document.getElementById('main');
  main.replaceChildren();
  status('');
  try {
    const params = new URLSearchParams(query || '');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    const section = parts[0] || 'overview';
    document.querySelectorAll('nav a[data-nav]').forEach((a) => a.setAttribute('aria-current', a.dataset.nav === section ? 'page' : 'false'));
    switch (section) {
      case 'overview': await overview(main); break;
      case 'events': parts[1] ? await eventPage(main, parts[1]) : await events(main, params); break;
      case 'failed': await failed(main, params); break;
      case 'references': await references(main, parts[1]); break;
      case 'agents': await agentsPage(main); break;
      case 'workers': await workersPage(main, params); break;
      case 'counters': await countersPage(main, params); break;
      case 'queues': await queuesPage(main); break;
      default: main.append(el('h1', null, 'Not found'), el('p', null, 'No such page: ' + path));
    }
  } catch (e) {
    if (e instanceof Stale) return; // the page was left while it loaded
    // What did not load says so where its "Loading…" was.
    main.querySelectorAll('[id] > p:only-child').forEach((p) => { if (p.textContent === 'Loading…') p.remove(); });
    main.append(el('p', { class: 'status error', role: 'alert' }, e.message));
  }
  document.title = (main.querySelector('h1') ? main.querySelector('h1').textContent + ' · ' : '') + 'exactlyonce console';
}

async function start() {
  try {
    const s = await api('/session');
    session.csrfToken = s.csrfToken;
    session.mode = s.mode;
    document.getElementById('mode').textContent = s.mode === 'aws' ? 'AWS: ' + (s.apiURL || '') : 'local';
  } catch (e) {
    status('The console could not start its session: ' + e.message, true);
    return;
  }
  // The skip link focuses the content without changing the route (its #main is not a page).
  document.querySelector('a.skip').addEventListener('click', (ev) => {
    ev.preventDefault();
    document.getElementById('main').focus();
  });
  // A hash that is not a route (#main typed by hand) is an anchor in the page, not a page.
  window.addEventListener('hashchange', () => {
    if (location.hash !== '' && !location.hash.startsWith('#/')) return;
    route();
    document.getElementById('main').focus();
  });
  await route();
}

document.addEventListener('DOMContentLoaded', start);
