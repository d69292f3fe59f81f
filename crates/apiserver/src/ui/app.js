// rkube's web view: the cluster (nodes holding pods, owners → pods, events) kept current by
// informers — a LIST, then a WATCH over WebSocket from its resourceVersion, with bookmarks,
// resumed from the last resourceVersion after a drop, re-listed only on 410 — never polled.
// The watches and request-chain panels read /debug/watches and /metrics every 2 s.
'use strict';

// Kept where a test (and a curious user) can read them; the first 100 only.
const problems = [];
window.rkubeProblems = problems;
const problem = (p) => { if (problems.length < 100) problems.push(String(p)); };
window.addEventListener('error', (e) => problem(e.message));
window.addEventListener('unhandledrejection', (e) => problem(e.reason));

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({
  '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
}[c]));
const key = (o) => `${o.metadata.namespace || ''}/${o.metadata.name}`;
const wsBase = `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}`;

async function api(path, init) {
  const r = await fetch(path, init);
  const body = await r.text();
  let json = null;
  try { json = JSON.parse(body); } catch (_) { /* not JSON */ }
  return { status: r.status, ok: r.ok, json, body };
}

// An informer: list, watch from the list's resourceVersion, keep the objects by key.
class Informer {
  constructor(name, path, { selector = '', bookmarks = true, onChange = () => {} } = {}) {
    Object.assign(this, { name, path, selector, bookmarks, onChange });
    this.items = new Map();
    this.rv = '';
    this.startRv = '';
    this.stats = { lists: 0, events: 0, bookmarks: 0, drops: 0, expired: 0 };
    this.connected = false;
    this.stopped = false;
    this.mustList = true;
  }

  async list() {
    const items = new Map();
    let cont = '';
    let rv = '';
    do {
      const q = new URLSearchParams({ limit: '500' });
      if (cont) q.set('continue', cont);
      if (this.selector) q.set('labelSelector', this.selector);
      const r = await api(`${this.path}?${q}`);
      if (!r.ok) throw new Error(`LIST ${this.path}: ${r.status} ${r.json?.message || r.body}`);
      for (const o of r.json.items) items.set(key(o), o);
      cont = r.json.metadata.continue || '';
      rv = r.json.metadata.resourceVersion;
    } while (cont);
    this.items = items;
    this.rv = rv;
    if (!this.startRv) this.startRv = rv;
    this.stats.lists += 1;
    this.mustList = false;
    this.onChange(this);
  }

  // Lists when it must, watches, and again; a failure, an ERROR, or a connection that closed
  // before any progress waits, twice as long each time up to 30 s, with jitter (no reconnect
  // storm, and informers do not reconnect in lockstep).
  async run() {
    let backoff = 500;
    const pause = async () => {
      await new Promise((r) => setTimeout(r, backoff * (0.5 + Math.random())));
      backoff = Math.min(backoff * 2, 30000);
    };
    while (!this.stopped) {
      try {
        if (this.mustList) await this.list();
        if (await this.watch()) backoff = 500; else await pause();
      } catch (e) {
        this.error = String(e.message || e);
        await pause();
      }
    }
  }

  // One watch connection; resolves when it closes: true if it made progress (an event or a
  // bookmark, and no ERROR) or stayed open 5 s (a quiet watch is not a failing one).
  watch() {
    let progress = false;
    let failed = false;
    const opened = Date.now();
    const q = new URLSearchParams({ watch: '1', resourceVersion: this.rv });
    if (this.bookmarks) q.set('allowWatchBookmarks', 'true');
    if (this.selector) q.set('labelSelector', this.selector);
    return new Promise((resolve) => {
      if (this.stopped) { resolve(true); return; }
      const ws = new WebSocket(`${wsBase}${this.path}?${q}`);
      this.ws = ws;
      ws.onopen = () => { this.connected = true; this.error = ''; this.onChange(this); };
      ws.onmessage = (m) => {
        const ev = JSON.parse(m.data);
        if (ev.type === 'ERROR') failed = true; else progress = true;
        this.handle(ev);
      };
      ws.onclose = () => {
        this.connected = false;
        if (!this.stopped) this.stats.drops += 1;
        this.onChange(this);
        resolve(!failed && (progress || Date.now() - opened >= 5000));
      };
    });
  }

  handle(ev) {
    const o = ev.object;
    switch (ev.type) {
      case 'BOOKMARK':
        this.rv = o.metadata.resourceVersion;
        this.stats.bookmarks += 1;
        break;
      case 'ERROR':
        // 410: what we hold is older than the watch cache's history; start over.
        if (o.code === 410) { this.stats.expired += 1; this.mustList = true; } else {
          this.error = o.message;
        }
        this.ws.close();
        break;
      case 'DELETED':
        this.items.delete(key(o));
        this.rv = o.metadata.resourceVersion;
        this.stats.events += 1;
        break;
      default:
        this.items.set(key(o), o);
        this.rv = o.metadata.resourceVersion;
        this.stats.events += 1;
    }
    this.onChange(this);
  }

  // Drops the connection; `run` resumes from the last resourceVersion.
  drop() { if (this.ws) this.ws.close(); }

  stop() { this.stopped = true; this.drop(); }
}

// ---- the cluster ---------------------------------------------------------------------

let renderQueued = false;
function changed() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; render(); });
}

const informers = {};
for (const [name, path] of [
  ['nodes', '/api/v1/nodes'],
  ['pods', '/api/v1/pods'],
  ['events', '/api/v1/events'],
  ['deployments', '/apis/apps/v1/deployments'],
  ['replicasets', '/apis/apps/v1/replicasets'],
  ['statefulsets', '/apis/apps/v1/statefulsets'],
  ['daemonsets', '/apis/apps/v1/daemonsets'],
  ['jobs', '/apis/batch/v1/jobs'],
]) informers[name] = new Informer(name, path, { onChange: changed });

function podState(p) {
  if (p.metadata.deletionTimestamp) return 'Terminating';
  return p.status?.phase || 'Pending';
}

function podReady(p) {
  const cs = p.status?.containerStatuses || [];
  return cs.length > 0 && cs.every((c) => c.ready);
}

function podBox(p) {
  const state = podState(p);
  const restarts = (p.status?.containerStatuses || []).reduce((n, c) => n + (Number(c.restartCount) || 0), 0);
  const title = `${key(p)}\n${state}${podReady(p) ? ', ready' : ''}${restarts ? `, ${restarts} restarts` : ''}`;
  return `<div class="pod ${esc(state)}${podReady(p) ? ' ready' : ''}" data-pod="${esc(key(p))}" `
    + `data-phase="${esc(state)}" data-ready="${podReady(p)}" title="${esc(title)}">`
    + `<span>${esc(p.metadata.name)}</span>${restarts ? `<b>${restarts}</b>` : ''}</div>`;
}

function renderNodes() {
  const byNode = new Map();
  for (const p of informers.pods.items.values()) {
    const n = p.spec?.nodeName || '';
    if (!byNode.has(n)) byNode.set(n, []);
    byNode.get(n).push(p);
  }
  const nodes = [...informers.nodes.items.values()].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  let ready = 0;
  const boxes = nodes.map((n) => {
    const cond = (n.status?.conditions || []).find((c) => c.type === 'Ready');
    const ok = cond?.status === 'True';
    if (ok) ready += 1;
    const pods = (byNode.get(n.metadata.name) || []).sort((a, b) => key(a).localeCompare(key(b)));
    return `<div class="node${ok ? '' : ' notready'}" data-node="${esc(n.metadata.name)}">`
      + `<h4>${esc(n.metadata.name)} <small>${ok ? 'Ready' : 'NotReady'} · ${pods.length} pods</small></h4>`
      + `<div class="pods">${pods.map(podBox).join('')}</div></div>`;
  });
  const pending = byNode.get('') || [];
  if (pending.length) {
    boxes.push(`<div class="node unscheduled"><h4>not scheduled <small>${pending.length} pods</small></h4>`
      + `<div class="pods">${pending.map(podBox).join('')}</div></div>`);
  }
  $('nodes').innerHTML = boxes.join('') || '<p class="muted">no nodes</p>';
  $('node-summary').textContent = `${ready}/${nodes.length} Ready · ${informers.pods.items.size} pods`;
}

function renderTree() {
  const children = new Map(); // owner uid -> objects
  const all = [];
  for (const name of ['deployments', 'replicasets', 'statefulsets', 'daemonsets', 'jobs', 'pods']) {
    for (const o of informers[name].items.values()) {
      const kind = { pods: 'Pod' }[name] || o.kind || name;
      all.push([kind, o]);
      const owner = (o.metadata.ownerReferences || []).find((r) => r.controller) || (o.metadata.ownerReferences || [])[0];
      if (owner) {
        if (!children.has(owner.uid)) children.set(owner.uid, []);
        children.get(owner.uid).push([kind, o]);
      }
    }
  }
  const uids = new Set(all.map(([, o]) => o.metadata.uid));
  const counts = (kind, o) => {
    const s = o.status || {};
    if (kind === 'Pod') return `${podState(o)}${podReady(o) ? ' ✓' : ''}`;
    if (kind === 'Job') return `${s.succeeded || 0} succeeded${s.active ? `, ${s.active} active` : ''}`;
    if (kind === 'DaemonSet') return `${s.numberReady || 0}/${s.desiredNumberScheduled || 0} ready`;
    return `${s.readyReplicas || 0}/${o.spec?.replicas ?? 0} ready`;
  };
  const node = ([kind, o], depth) => {
    const kids = (children.get(o.metadata.uid) || []).sort((a, b) => key(a[1]).localeCompare(key(b[1])));
    const shown = kids.slice(0, 60);
    const more = kids.length - shown.length;
    return `<li data-kind="${esc(kind)}" data-name="${esc(key(o))}"><span class="kind">${esc(kind)}</span> `
      + `${esc(key(o))} <small>${esc(counts(kind, o))}</small>`
      + (depth < 4 && kids.length ? `<ul>${shown.map((k) => node(k, depth + 1)).join('')}`
        + `${more > 0 ? `<li class="muted">+${more} more</li>` : ''}</ul>` : '')
      + '</li>';
  };
  const roots = all.filter(([, o]) => !(o.metadata.ownerReferences || []).some((r) => uids.has(r.uid)))
    .sort((a, b) => a[0].localeCompare(b[0]) || key(a[1]).localeCompare(key(b[1])));
  $('tree').innerHTML = roots.length ? `<ul>${roots.slice(0, 200).map((r) => node(r, 0)).join('')}</ul>`
    : '<p class="muted">no workloads</p>';
}

function renderEvents() {
  const when = (e) => e.lastTimestamp || e.eventTime || e.metadata.creationTimestamp || '';
  const rv = (e) => Number(e.metadata.resourceVersion);
  const events = [...informers.events.items.values()]
    .sort((a, b) => when(b).localeCompare(when(a)) || rv(b) - rv(a)).slice(0, 40);
  $('events').innerHTML = events.map((e) => `<li class="${esc(e.type)}"><time>${esc(when(e).slice(11, 19))}</time> `
    + `<b>${esc(e.reason)}</b> <span class="obj">${esc(e.involvedObject?.kind)}/${esc(e.involvedObject?.name)}</span> `
    + `${esc(e.message)}${e.count > 1 ? ` <small>×${esc(e.count)}</small>` : ''}</li>`).join('')
    || '<li class="muted">no events</li>';
}

function renderInformers() {
  const rows = [...Object.values(informers), ...demo.informers].map((i) => `<tr data-informer="${esc(i.name)}">`
    + `<td>${esc(i.name)}</td><td>${i.connected ? '●' : '○'}</td><td class="num">${esc(i.rv)}</td>`
    + `<td class="num">${i.stats.lists}</td><td class="num">${i.stats.events}</td><td class="num">${i.stats.bookmarks}</td>`
    + `<td class="num">${i.stats.drops}</td><td class="num">${i.stats.expired}</td></tr>`);
  $('informer-table').innerHTML = '<tr><th>informer</th><th></th><th>resourceVersion</th><th>lists</th>'
    + '<th>events</th><th>bookmarks</th><th>drops</th><th>410s</th></tr>' + rows.join('');
}

function render() {
  renderNodes();
  renderTree();
  renderEvents();
  renderInformers();
  renderDemo();
  const all = Object.values(informers);
  const up = all.filter((i) => i.connected).length;
  const conn = $('conn');
  conn.textContent = up === all.length ? 'live' : `${up}/${all.length} watches connected`;
  conn.className = `badge ${up === all.length ? 'ok' : 'warn'}`;
  if (all.every((i) => i.stats.lists > 0)) document.body.dataset.ready = 'true';
}

// ---- watches -------------------------------------------------------------------------

// A browser's User-Agent starts "Mozilla/": say what it is.
const clientName = (c) => (c === 'Mozilla' ? 'browser' : c);
const bytes = (n) => (n > 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : n > 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`);

async function refreshWatches() {
  const r = await api('/debug/watches');
  if (!r.ok) { $('watch-table').innerHTML = `<tr><td>${esc(r.status)} ${esc(r.json?.message || '')}</td></tr>`; return; }
  // Newest first: what was just opened (this page's demo, a controller's re-list) on top.
  const rows = [...r.json.items].reverse().map((w) => {
    const fresh = w.events === 0 && w.bookmarks > 0;
    const sel = [w.labelSelector, w.fieldSelector].filter(Boolean).join(' ');
    return `<tr class="${fresh ? 'fresh' : ''}" data-watch="${w.id}" data-selector="${esc(sel)}" `
      + `data-rv="${esc(w.resourceVersion)}" data-start="${esc(w.startResourceVersion)}" `
      + `data-events="${Number(w.events)}" data-bookmarks="${Number(w.bookmarks)}">`
      + `<td>${esc(clientName(w.client))}</td><td>${esc(w.user)}</td><td>${esc(w.resource)}</td><td>${esc(w.namespace)}</td>`
      + `<td>${esc(sel)}</td><td class="num">${esc(w.startResourceVersion)}</td><td class="num">${w.resourceVersion === '0' ? '—' : esc(w.resourceVersion)}</td>`
      + `<td class="num">${w.events}</td><td class="num">${w.bookmarks}</td><td class="num">${bytes(w.bytes)}</td>`
      + `<td class="num">${w.ageSeconds}s</td></tr>`;
  });
  $('watch-table').innerHTML = '<tr><th>client</th><th>user</th><th>resource</th><th>namespace</th><th>selector</th>'
    + '<th>from RV</th><th>RV now</th><th>events</th><th>bookmarks</th><th>sent</th><th>age</th></tr>' + rows.join('');
  $('client-table').innerHTML = '<tr><th>client</th><th>lists</th><th>watches</th><th>410s</th><th>bookmarks</th></tr>'
    + (r.json.clients || []).map((c) => `<tr><td>${esc(clientName(c.client))}</td><td class="num">${c.lists}</td>`
      + `<td class="num">${c.watches}</td><td class="num">${c.expired}</td><td class="num">${c.bookmarks}</td></tr>`).join('');
}

// ---- the bookmark demo ---------------------------------------------------------------

const demo = { informers: [], timers: [], writes: 0, starting: false, writing: false };
const DEMO_NS = '/api/v1/namespaces/rkube-demo/configmaps';

async function startDemo() {
  if (demo.starting || demo.informers.length) return;
  demo.starting = true;
  try { await openDemo(); } finally { demo.starting = false; }
}

async function openDemo() {
  const created = await api('/api/v1/namespaces', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'rkube-demo' } }),
  });
  if (!created.ok && created.status !== 409) throw new Error(`namespace: ${created.status} ${created.json?.message}`);
  await api(DEMO_NS, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'churn', labels: { 'rkube.io/demo': 'churn' } } }),
  });
  demo.informers = [
    new Informer('demo: with bookmarks', DEMO_NS, { selector: 'rkube.io/demo=quiet', bookmarks: true, onChange: changed }),
    new Informer('demo: without bookmarks', DEMO_NS, { selector: 'rkube.io/demo=quiet', bookmarks: false, onChange: changed }),
  ];
  demo.informers.forEach((i) => i.run());
  // One write at a time: a tick that finds the last one unanswered skips.
  demo.timers.push(setInterval(() => {
    if (demo.writing) return;
    demo.writing = true;
    demo.writes += 1;
    api(`${DEMO_NS}/churn`, {
      method: 'PATCH', headers: { 'content-type': 'application/merge-patch+json' },
      body: JSON.stringify({ data: { n: String(demo.writes) } }),
    }).then((r) => { if (!r.ok) problem(`demo write: ${r.status}`); })
      .catch(problem).finally(() => { demo.writing = false; });
  }, 100));
  demo.timers.push(setInterval(() => demo.informers.forEach((i) => i.drop()), 10000));
  document.body.dataset.demo = 'running';
}

function stopDemo() {
  demo.timers.forEach(clearInterval);
  demo.timers = [];
  demo.informers.forEach((i) => i.stop());
  demo.informers = [];
  document.body.dataset.demo = 'stopped';
}

function renderDemo() {
  $('demo-toggle').textContent = demo.informers.length ? 'Stop the demo' : 'Start the demo';
  $('demo-out').innerHTML = demo.informers.map((i) => `<div class="card" data-demo="${i.bookmarks}" `
    + `data-relists="${i.stats.lists - 1}" data-rv="${esc(i.rv)}">`
    + `<h4>${esc(i.name)}</h4><p>started at RV ${esc(i.startRv)}, now at <b>${esc(i.rv)}</b></p>`
    + `<p>${i.stats.bookmarks} bookmarks · ${i.stats.drops} drops · ${i.stats.expired} × 410 Gone · `
    + `<b>${i.stats.lists - 1} re-lists</b></p></div>`).join('')
    + (demo.informers.length ? `<p class="muted">${demo.writes} writes so far</p>` : '');
}

$('demo-toggle').addEventListener('click', () => {
  if (demo.informers.length) stopDemo(); else startDemo().catch(problem);
  changed();
});

// ---- the request chain ---------------------------------------------------------------

// `name{a="x",b="y"} 1.5` lines → [{name, labels, value}].
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

let lastMetrics = null;

function sumBy(samples, name, keyOf) {
  const m = new Map();
  for (const s of samples) {
    if (s.name !== name) continue;
    const k = keyOf(s.labels);
    if (k !== null) m.set(k, (m.get(k) || 0) + s.value);
  }
  return m;
}

function quantile(buckets, q) {
  // buckets: [[le, cumulative count]] sorted by le.
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!total) return null;
  const want = q * total;
  for (const [le, c] of buckets) if (c >= want) return le;
  return Infinity;
}

const ms = (s) => (s === null ? '—' : s === Infinity ? '> max' : `≤ ${s * 1000 < 1 ? (s * 1000).toFixed(2) : Math.round(s * 1000)} ms`);

async function refreshMetrics() {
  const r = await fetch('/metrics');
  if (!r.ok) { $('rate-table').innerHTML = `<tr><td>/metrics: ${r.status}</td></tr>`; return; }
  const now = performance.now();
  const samples = parseMetrics(await r.text());
  const prev = lastMetrics;
  lastMetrics = { at: now, samples };
  const gauge = (name) => sumBy(samples, name, (l) => l.priority_level);
  const seats = gauge('apiserver_flowcontrol_nominal_limit_seats');
  const executing = gauge('apiserver_flowcontrol_current_executing_seats');
  const queued = gauge('apiserver_flowcontrol_current_inqueue_requests');
  $('apf-table').innerHTML = '<tr><th>priority level</th><th>seats</th><th>in use</th><th>queued</th></tr>'
    + [...seats.keys()].sort().map((k) => `<tr><td>${esc(k)}</td><td class="num">${seats.get(k)}</td>`
      + `<td class="num">${executing.get(k) ?? 0}</td><td class="num">${queued.get(k) ?? 0}</td></tr>`).join('');
  if (!prev) return;
  const dt = (now - prev.at) / 1000;
  const delta = (name, keyOf) => {
    const a = sumBy(prev.samples, name, keyOf);
    const b = sumBy(samples, name, keyOf);
    return new Map([...b].map(([k, v]) => [k, Math.max(0, v - (a.get(k) || 0))]));
  };
  const rates = [...delta('apiserver_request_total', (l) => `${l.verb} ${l.resource}`)]
    .filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]).slice(0, 15);
  $('rate-table').innerHTML = '<tr><th>verb</th><th>resource</th><th>per second</th></tr>'
    + (rates.map(([k, v]) => { const [verb, res] = k.split(' ');
      return `<tr><td>${esc(verb)}</td><td>${esc(res)}</td><td class="num">${(v / dt).toFixed(1)}</td></tr>`; }).join('')
      || '<tr><td colspan="3" class="muted">idle</td></tr>');
  const buckets = delta('apiserver_request_duration_seconds_bucket', (l) => (l.le ? `${l.verb} ${l.le}` : null));
  const byVerb = new Map();
  for (const [k, v] of buckets) {
    const [verb, le] = k.split(' ');
    if (!byVerb.has(verb)) byVerb.set(verb, []);
    byVerb.get(verb).push([le === '+Inf' ? Infinity : Number(le), v]);
  }
  $('latency-table').innerHTML = '<tr><th>verb</th><th>requests</th><th>p50</th><th>p99</th></tr>'
    + [...byVerb].filter(([verb]) => verb !== 'watch').map(([verb, b]) => {
      b.sort((x, y) => x[0] - y[0]);
      const n = b[b.length - 1][1];
      return n ? `<tr><td>${esc(verb)}</td><td class="num">${n}</td><td class="num">${ms(quantile(b, 0.5))}</td>`
        + `<td class="num">${ms(quantile(b, 0.99))}</td></tr>` : '';
    }).join('');
  const events = [...delta('apiserver_watch_events_total', (l) => l.kind)].filter(([, v]) => v > 0)
    .sort((a, b) => b[1] - a[1]).slice(0, 12);
  $('watch-rate-table').innerHTML = '<tr><th>kind</th><th>per second</th></tr>'
    + (events.map(([k, v]) => `<tr><td>${esc(k)}</td><td class="num">${(v / dt).toFixed(1)}</td></tr>`).join('')
      || '<tr><td colspan="2" class="muted">none</td></tr>');
}

function every(ms_, f) {
  const tick = () => f().catch(problem).finally(() => setTimeout(tick, ms_));
  tick();
}

$('server').textContent = location.host;
Object.values(informers).forEach((i) => i.run());
every(2000, refreshWatches);
every(2000, refreshMetrics);
render();
