// dashboard.js - psdbd's dashboard: reads /v1/stats/ (and the farm's /v1/jobs) with the reader
// token kept in session storage, and draws tables and inline SVG plots. Every name from the
// server is set as text, never as markup. body[data-state] ends as "ready", "token" (a token is
// needed) or "error"; errors are listed in #errors so that a test (or a person) can see them. Each report is asked
// for with a small `limit`, so the page stays fast whatever clients asked the server for: the
// plots name the top applications and families and draw the rest as one "others" series.
'use strict';

(function () {
  const TOKEN_KEY = 'psdbd-reader-token';
  const errors = document.getElementById('errors');
  const status = document.getElementById('status');

  function recordError(text) {
    const li = document.createElement('li');
    li.textContent = String(text);
    errors.appendChild(li);
    errors.dataset.count = String(errors.children.length);
    errors.hidden = false;
  }
  window.addEventListener('error', (e) => recordError('error: ' + (e.message || e.type)));
  window.addEventListener('unhandledrejection', (e) =>
    recordError('unhandled rejection: ' + (e.reason && e.reason.message || e.reason)));

  function el(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') n.className = v; else n.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      n.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    }
    return n;
  }
  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    const n = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, String(v));
    return n;
  }

  function bytes(n) {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
  }
  function age(s) {
    if (s < 3600) return Math.floor(s / 60) + ' min';
    if (s < 86400) return Math.floor(s / 3600) + ' h';
    return Math.floor(s / 86400) + ' d';
  }

  // What the page asks each report for at most (schema/HTTP.md, Statistics: `limit`).
  const LIMITS = { matrix: 200, missing: 50, traffic: 8, events: 50, farm: 100 };
  // The series of a report's null entries (everything past the limit and the demand over the
  // recording bounds): a key no name can be (names hold no control character).
  const OTHERS = '\u0000others';
  const othersLabel = (n) => (n === OTHERS ? 'all others' : n);

  class AuthNeeded extends Error {}

  async function api(path) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = token ? { Authorization: 'Bearer ' + token } : {};
    const resp = await fetch(path, { headers, cache: 'no-store' });
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (resp.status === 401) throw new AuthNeeded(body && body.message || 'a token is needed');
    if (!resp.ok) throw new Error(path + ': ' + resp.status + ' ' + (body && body.message || ''));
    return body;
  }

  // ---- coverage matrix ----
  function renderMatrix(m) {
    const table = document.getElementById('matrix');
    const more = document.getElementById('matrix-more');
    more.hidden = !m.truncated;
    more.textContent = m.truncated ? 'Only the first ' + m.apps.length + ' applications by name are shown.' : '';
    const thead = table.tHead, tbody = table.tBodies[0];
    thead.replaceChildren(); tbody.replaceChildren();
    document.getElementById('matrix-empty').hidden = m.cells.length > 0;
    table.hidden = m.cells.length === 0;
    const families = m.families.slice().sort();
    thead.appendChild(el('tr', {}, el('th', {}, 'application'), ...families.map((f) => el('th', {}, f))));
    const byKey = new Map(m.cells.map((c) => [c.app + '\u001f' + c.family, c]));
    for (const app of m.apps) {
      const tr = el('tr', {}, el('th', { scope: 'row' }, app));
      for (const f of families) {
        const c = byKey.get(app + '\u001f' + f);
        if (!c) { tr.appendChild(el('td', { class: 'cell none' }, '–')); continue; }
        const td = el('td', { class: 'cell', 'data-app': app, 'data-family': f });
        if (c.active_id) {
          td.appendChild(el('b', {}, 'serial ' + c.active_serial));
          td.appendChild(el('div', { class: 'meta' }, 'ABI ' + (c.abi_min === c.abi_max ? c.abi_min : c.abi_min + '–' + c.abi_max) +
            ' · ' + c.psdbs + ' PSDB' + (c.psdbs === 1 ? '' : 's') + ' · ' + bytes(c.size)));
          td.appendChild(el('div', { class: 'meta' }, 'v' + c.app_version + ' · ' + age(c.age_s) + ' old · by ' + c.published_by));
          td.appendChild(el('div', { class: 'meta', title: c.signer }, 'signer ' + c.signer.slice(0, 16) + '…'));
        } else {
          td.appendChild(el('span', { class: 'meta' }, 'retired only'));
        }
        if (c.retired) td.appendChild(el('div', { class: 'meta' }, c.retired + ' retired'));
        if (c.history && c.history.length) {
          const ul = el('ul', { class: 'history' });
          for (const h of c.history) {
            ul.appendChild(el('li', {}, h.state + ': #' + h.id + ' serial ' + h.serial + ' ABI ' + h.abi_version +
              ' v' + h.app_version + ' by ' + h.published_by + (h.retired_by !== undefined ? ', retired by ' + h.retired_by : '')));
          }
          td.appendChild(ul);
        }
        tr.appendChild(td);
      }
      tbody.appendChild(tr);
    }
  }

  // ---- missing coverage ----
  function sparkline(days, from, to) {
    const all = dayRange(from, to);
    const counts = new Map(days.map((d) => [d.day, d.requests]));
    const max = Math.max(1, ...days.map((d) => d.requests));
    const w = 120, h = 24, bw = w / all.length;
    const s = svg('svg', { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: 'img' });
    all.forEach((d, i) => {
      const v = counts.get(d) || 0;
      if (!v) return;
      const bh = Math.max(1, (v / max) * h);
      const r = svg('rect', { x: i * bw, y: h - bh, width: Math.max(1, bw - 1), height: bh, fill: '#b3261e' });
      r.appendChild(svg('title')).textContent = d + ': ' + v;
      s.appendChild(r);
    });
    return s;
  }
  function renderMissing(m) {
    const tbody = document.querySelector('#missing-table tbody');
    const more = document.getElementById('missing-more');
    tbody.replaceChildren();
    document.getElementById('missing-empty').hidden = m.missing.length > 0;
    more.hidden = !m.other_requests;
    more.textContent = m.other_requests
      ? m.other_requests + ' more unresolved requests are not listed (past the ' + m.missing.length +
        ' most asked, or over the server\'s recording bounds).'
      : '';
    for (const x of m.missing) {
      tbody.appendChild(el('tr', { class: 'missing-row', 'data-app': x.app, 'data-family': x.family },
        el('td', {}, x.app), el('td', {}, x.family),
        el('td', {}, x.abi_min === x.abi_max ? String(x.abi_min) : x.abi_min + '–' + x.abi_max),
        el('td', {}, x.profile_version === null ? 'any' : x.profile_version),
        el('td', { class: 'num requests' }, String(x.requests)), el('td', {}, x.last_seen),
        el('td', {}, sparkline(x.days, m.from, m.to))));
    }
  }

  // ---- plots ----
  function dayRange(from, to) {
    const out = [];
    const d = new Date(from + 'T00:00:00Z'), end = new Date(to + 'T00:00:00Z');
    while (d <= end && out.length < 400) { out.push(d.toISOString().slice(0, 10)); d.setUTCDate(d.getUTCDate() + 1); }
    return out;
  }
  const COLORS = ['#2b5fb3', '#2f7d4f', '#c26b00', '#7b3fa6', '#b3261e', '#00838f', '#6d6d00', '#9c4f7b', '#555'];
  // Stacked bars, one per day, one colour per series; rows: [{day, <key>: name, <value>: n}].
  function stacked(target, rows, key, value, from, to, fmt, colors) {
    const colour = (n, j) => (colors && colors[n]) || (n === OTHERS ? '#9aa0a6' : COLORS[j % COLORS.length]);
    const days = dayRange(from, to);
    const nameOf = (r) => (r[key] === null ? OTHERS : r[key]);
    const names = [...new Set(rows.map(nameOf))].sort();
    const per = new Map();
    for (const r of rows) {
      const k = r.day;
      if (!per.has(k)) per.set(k, new Map());
      per.get(k).set(nameOf(r), (per.get(k).get(nameOf(r)) || 0) + r[value]);
    }
    const totals = days.map((d) => [...(per.get(d) || new Map()).values()].reduce((a, b) => a + b, 0));
    const max = Math.max(1, ...totals);
    const W = 360, H = 150, L = 62, B = 18, T = 6, pw = W - L - 4, ph = H - B - T, bw = pw / days.length;
    const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'data-max': max });
    s.appendChild(svg('line', { x1: L, y1: T + ph, x2: W - 4, y2: T + ph, stroke: '#d8dde6' }));
    const top = svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }); top.textContent = fmt(max); s.appendChild(top);
    const zero = svg('text', { x: L - 4, y: T + ph, 'text-anchor': 'end' }); zero.textContent = '0'; s.appendChild(zero);
    days.forEach((d, i) => {
      let y = T + ph;
      names.forEach((n, j) => {
        const v = (per.get(d) && per.get(d).get(n)) || 0;
        if (!v) return;
        const h = (v / max) * ph;
        y -= h;
        const r = svg('rect', { x: L + i * bw + 0.5, y, width: Math.max(1, bw - 1), height: h, fill: colour(n, j) });
        r.appendChild(svg('title')).textContent = d + ' ' + othersLabel(n) + ': ' + fmt(v);
        s.appendChild(r);
      });
    });
    const first = svg('text', { x: L, y: H - 4 }); first.textContent = days[0]; s.appendChild(first);
    const last = svg('text', { x: W - 4, y: H - 4, 'text-anchor': 'end' }); last.textContent = days[days.length - 1]; s.appendChild(last);
    const legend = el('div', { class: 'legend' });
    names.forEach((n, j) => {
      const sw = el('i'); sw.style.background = colour(n, j);
      legend.appendChild(el('span', {}, sw, othersLabel(n)));
    });
    if (!names.length) legend.appendChild(el('span', { class: 'empty' }, 'nothing recorded yet'));
    const box = document.getElementById(target);
    box.replaceChildren(s, legend);
  }
  function renderTraffic(t) {
    const count = (n) => String(Math.round(n));
    const dl = (rows) => rows.map((r) => Object.assign({}, r, { downloads: r.complete + r.partial }));
    stacked('plot-downloads-app', dl(t.by_app), 'app', 'downloads', t.from, t.to, count);
    stacked('plot-bytes-app', t.by_app, 'app', 'bytes', t.from, t.to, bytes);
    stacked('plot-downloads-family', dl(t.by_family), 'family', 'downloads', t.from, t.to, count);
    stacked('plot-bytes-family', t.by_family, 'family', 'bytes', t.from, t.to, bytes);
    const res = [];
    for (const r of t.resolves) {
      res.push({ day: r.day, result: 'hit', n: r.hits });
      res.push({ day: r.day, result: 'miss', n: r.misses });
    }
    stacked('plot-resolves', res, 'result', 'n', t.from, t.to, count, { hit: '#2f7d4f', miss: '#b3261e' });
    const tbody = document.querySelector('#downloads-table tbody');
    tbody.replaceChildren();
    for (const r of t.by_app.slice().reverse()) {
      const app = r.app === null ? 'all other applications' : r.app;
      tbody.appendChild(el('tr', { class: 'download-row', 'data-app': app }, el('td', {}, r.day), el('td', {}, app),
        el('td', { class: 'num complete' }, String(r.complete)), el('td', { class: 'num partial' }, String(r.partial)),
        el('td', { class: 'num bytes' }, bytes(r.bytes))));
    }
  }

  function renderEvents(e) {
    const tbody = document.querySelector('#events-table tbody');
    tbody.replaceChildren();
    for (const x of e.events) {
      tbody.appendChild(el('tr', { class: 'event-row', 'data-event': x.event },
        el('td', {}, x.at.replace('T', ' ').replace('Z', ' UTC')), el('td', {}, x.event), el('td', {}, x.by),
        el('td', {}, x.app), el('td', {}, x.family), el('td', { class: 'num' }, String(x.abi_version)),
        el('td', { class: 'num' }, String(x.serial)), el('td', { class: 'num' }, String(x.id))));
    }
  }

  // ---- compile farm: /v1/stats/farm (jobs by state, farm-built cells) and /v1/jobs ----
  const when = (t) => (t ? t.replace('T', ' ').replace('Z', ' UTC') : '–');
  const range = (a, b) => (a === b ? String(a) : a + '–' + b);
  function renderFarm(f, failed) {
    const states = document.getElementById('farm-states');
    states.replaceChildren(...['queued', 'leased', 'done', 'held'].map((s) =>
      el('li', { class: s, 'data-state': s, 'data-count': String(f.jobs[s]) }, el('b', {}, String(f.jobs[s])), s)));
    const fb = document.querySelector('#farm-failures tbody');
    fb.replaceChildren();
    // Held jobs first (they wait for a person), then the newest failures.
    const rows = failed.jobs.filter((j) => j.state !== 'done')
      .sort((a, b) => (a.state === 'held') === (b.state === 'held') ? b.id - a.id : (a.state === 'held' ? -1 : 1));
    for (const j of rows) {
      fb.appendChild(el('tr', { class: 'farm-failure', 'data-job': String(j.id), 'data-state': j.state },
        el('td', { class: 'num' }, String(j.id)), el('td', {}, j.state), el('td', {}, j.app.name),
        el('td', {}, j.app.version), el('td', {}, j.target.family), el('td', {}, range(j.target.abi_min, j.target.abi_max)),
        el('td', { class: 'num' }, String(j.attempts)), el('td', { class: 'why' }, j.last_error || ''),
        el('td', {}, when(j.updated_at))));
    }
    document.getElementById('farm-failures-empty').hidden = rows.length > 0;
    const wb = document.querySelector('#farm-workers tbody');
    wb.replaceChildren();
    for (const w of failed.workers) {
      wb.appendChild(el('tr', { class: 'farm-worker', 'data-worker': w.worker },
        el('td', {}, w.worker), el('td', {}, w.target.family + ' ABI ' + w.target.abi_version),
        el('td', {}, when(w.last_seen)), el('td', { class: 'num done' }, String(w.jobs_done)),
        el('td', { class: 'num median' }, w.median_compile_s === null ? '–' : w.median_compile_s + ' s')));
    }
    document.getElementById('farm-workers-empty').hidden = failed.workers.length > 0;
    const cb = document.querySelector('#farm-cells tbody');
    cb.replaceChildren();
    for (const c of f.cells) {
      cb.appendChild(el('tr', { class: 'farm-cell', 'data-app': c.app, 'data-family': c.family },
        el('td', {}, c.app), el('td', {}, c.app_version), el('td', {}, c.family),
        el('td', { class: 'num' }, String(c.abi_version)), el('td', { class: 'num' }, String(c.psdbs)),
        el('td', { class: 'num' }, '#' + c.newest_id), el('td', {}, c.worker === null ? '–' : c.worker)));
    }
    document.getElementById('farm-cells-empty').hidden = f.cells.length > 0;
    const more = document.getElementById('farm-cells-more');
    more.hidden = !f.truncated;
    more.textContent = f.truncated ? 'Only the first ' + f.cells.length + ' cells are listed.' : '';
  }

  function askForToken(message) {
    document.getElementById('dashboard').hidden = true;
    document.getElementById('token-form').hidden = false;
    const err = document.getElementById('token-error');
    err.hidden = !message;
    err.textContent = message || '';
    status.textContent = 'a reader token is needed';
    document.body.dataset.state = 'token';
  }

  async function load() {
    document.body.dataset.state = 'loading';
    status.textContent = 'loading…';
    const history = document.getElementById('show-history').checked ? 'true' : 'false';
    try {
      const [matrix, missing, traffic, events, farm, failed] = await Promise.all([
        api('/v1/stats/matrix?history=' + history + '&limit=' + LIMITS.matrix),
        api('/v1/stats/missing?limit=' + LIMITS.missing),
        api('/v1/stats/traffic?limit=' + LIMITS.traffic),
        api('/v1/stats/events?limit=' + LIMITS.events),
        api('/v1/stats/farm?limit=' + LIMITS.farm),
        api('/v1/jobs?state=failed')]);
      renderMatrix(matrix);
      renderMissing(missing);
      renderTraffic(traffic);
      renderEvents(events);
      renderFarm(farm, failed);
      document.getElementById('flush-note').textContent = traffic.recording
        ? 'Demand counts reach these reports every ' + traffic.flush_interval_s + ' s (the server\'s flush interval).'
        : 'Demand recording is switched off on this server (stats = false).';
      document.getElementById('token-form').hidden = true;
      document.getElementById('dashboard').hidden = false;
      status.textContent = 'updated ' + new Date().toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
      document.body.dataset.state = 'ready';
    } catch (e) {
      if (e instanceof AuthNeeded) {
        const had = sessionStorage.getItem(TOKEN_KEY) !== null;
        if (had) sessionStorage.removeItem(TOKEN_KEY);
        askForToken(had ? 'That token was refused: ' + e.message : '');
        return;
      }
      status.textContent = 'failed: ' + e.message;
      document.body.dataset.state = 'error';
      recordError(e.message);
    }
  }

  document.getElementById('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = document.getElementById('token-input').value.trim();
    if (!v) return;
    sessionStorage.setItem(TOKEN_KEY, v);
    load();
  });
  document.getElementById('show-history').addEventListener('change', () => load());
  load();
})();
