// The s3q broker dashboard. Polls GET /dashboard/summary every second (the first time with the
// throughput history the broker kept), reads dead letters and redrives them through the /v1
// API. The URL's hash names the selected queue (/#orders). The bearer token, if the broker
// wants one, is kept in sessionStorage and sent as "Authorization: Bearer"; without it no data
// is shown.
"use strict";

(() => {
  const STATES = ["pending", "delayed", "processing", "retry", "completed", "dead"];
  const POLL_MS = 1000;
  const WINDOW_S = 300; // seconds of history on the charts
  const TOKEN_KEY = "s3q.token";
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);

  let token = sessionStorage.getItem(TOKEN_KEY);
  let selected = null; // the queue whose throughput and dead letters are shown
  let timer = null;
  let locked = false; // waiting for a token: no polling
  let deadShown = null; // dead count of the selected queue when its dead letters were read
  let figures = new Map(); // queue -> its entry in the last summary
  let seeded = false; // whether the broker's throughput history was read
  let historyStep = 1; // seconds between two samples of that history
  let opening = null; // a queue being opened by name
  let refused = null; // a queue the URL named that could not be opened
  const last = new Map(); // queue -> {t, enq, fin}: the previous poll's cumulative counters
  const rates = new Map(); // queue -> [{t, enq, fin}]: per-second rates, oldest first

  class HttpError extends Error {
    constructor(status, body) {
      super((body && body.message) || `HTTP ${status}`);
      this.status = status;
    }
  }

  async function api(path, method = "GET", body = undefined) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (token) headers.Authorization = `Bearer ${token}`;
    const res = await fetch(path, {
      method, headers, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await res.json(); } catch { /* not JSON */ }
    if (!res.ok) throw new HttpError(res.status, data);
    return data;
  }

  const queuePath = (name, rest) => `/v1/queues/${encodeURIComponent(name)}/${rest}`;

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    node.append(...children);
    return node;
  }

  const fmtInt = (n) => (n == null ? "–" : Number(n).toLocaleString("en-US"));
  const fmtRate = (r) => (r == null ? "–" : r >= 100 ? r.toFixed(0) : r.toFixed(1));
  function fmtMs(seconds) {
    if (seconds == null) return "–";
    const ms = seconds * 1000;
    return ms >= 100 ? `${ms.toFixed(0)} ms` : `${ms.toFixed(1)} ms`;
  }

  // ------------------------------------------------------------------ auth

  function showLogin(message) {
    locked = true;
    stopPolling();
    clearData();
    $("content").hidden = true;
    $("login").hidden = false;
    $("signout").hidden = true;
    $("login-error").textContent = message || "";
    setConn("locked", "");
    $("token").focus();
  }

  function clearData() {
    $("queues").tBodies[0].replaceChildren();
    $("dead").tBodies[0].replaceChildren();
    $("dead").hidden = true;
    $("store").textContent = "";
    last.clear();
    rates.clear();
    seeded = false;
    deadShown = null;
    figures = new Map();
  }

  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    token = $("token").value.trim();
    $("token").value = "";
    sessionStorage.setItem(TOKEN_KEY, token);
    startPolling();
  });

  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    token = null;
    showLogin("");
  });

  function authFailed(err) {
    if (!(err instanceof HttpError) || (err.status !== 401 && err.status !== 403)) return false;
    // a good token whose principal's grants do not allow this call: said where it happened
    if (err.status === 403 && /^principal /.test(err.message)) return false;
    if (token) {
      sessionStorage.removeItem(TOKEN_KEY);
      token = null;
      showLogin("That token was refused.");
    } else {
      showLogin("");
    }
    return true;
  }

  function setConn(kind, text) {
    const pill = $("conn");
    pill.className = `pill ${kind}`;
    pill.textContent = text || kind;
  }

  // ------------------------------------------------------------------ polling

  function stopPolling() {
    clearTimeout(timer);
    timer = null;
  }

  function startPolling() {
    locked = false;
    poll();
  }

  async function poll() {
    try {
      const summary = await api(seeded ? "/dashboard/summary" : "/dashboard/summary?history=1");
      if (locked) return; // signed out while this poll was under way
      $("login").hidden = true;
      $("content").hidden = false;
      $("signout").hidden = !summary.auth;
      setConn("live", "live");
      render(summary);
      seeded = true;
    } catch (err) {
      if (authFailed(err)) return;
      setConn("down", `offline: ${err.message}`);
    }
    stopPolling(); // one timer, however many polls ran at once
    if (!locked) timer = setTimeout(poll, POLL_MS);
  }

  function render(summary) {
    $("store").textContent = summary.store;
    figures = new Map(summary.queues.map((q) => [q.name, q]));
    const names = [...figures.keys()];
    if (summary.history) seed(summary.history, summary.time);
    if (!follow() && !names.includes(selected)) selectQueue(names.length ? names[0] : null, false);
    for (const q of summary.queues) {
      if (!q.error) track(q.name, summary.time, q.total_enqueued, q.finished);
    }
    for (const name of [...rates.keys()]) if (!names.includes(name)) rates.delete(name);
    renderQueues(summary.queues);
    renderThroughput(summary.time);
    renderLatency(summary.commit_latency, summary.time);
    renderCost(summary.cost);
    const current = figures.get(selected);
    if (current && !current.error && current.dead !== deadShown) {
      deadShown = current.dead;
      loadDead();
    }
  }

  // The counters the broker sampled before the page opened: the charts start with them.
  function seed(kept, now) {
    historyStep = kept.step;
    for (const [name, samples] of Object.entries(kept.queues)) {
      for (const [t, enq, fin] of samples) if (t < now) track(name, t, enq, fin);
    }
  }

  function track(name, now, enq, fin) {
    const prev = last.get(name);
    last.set(name, { t: now, enq, fin });
    if (!prev || now <= prev.t) return;
    const dt = now - prev.t;
    const series = rates.get(name) || [];
    series.push({
      t: now,
      enq: Math.max(0, (enq - prev.enq) / dt),
      fin: Math.max(0, (fin - prev.fin) / dt),
    });
    while (series.length && series[0].t < now - WINDOW_S) series.shift();
    rates.set(name, series);
  }

  // ------------------------------------------------------------------ queues table

  function renderQueues(queues) {
    const body = $("queues").tBodies[0];
    $("no-queues").hidden = queues.length > 0;
    body.replaceChildren(...queues.map((q) => {
      const row = el("tr", { "data-queue": q.name });
      if (q.name === selected) row.classList.add("selected");
      row.addEventListener("click", () => selectQueue(q.name));
      row.append(el("td", { class: "name", text: q.name }));
      if (q.error) {
        row.append(el("td", { class: "failed", colspan: "13", text: q.error }));
        return row;
      }
      for (const state of STATES) {
        const cls = q[state] === 0 ? "num zero" : state === "dead" ? "num bad" : "num";
        row.append(el("td", { class: cls, "data-field": state, text: fmtInt(q[state]) }));
      }
      row.append(el("td", {}, depthBar(q)));
      const r = (rates.get(q.name) || []).at(-1);
      row.append(
        el("td", { class: "num", "data-field": "enqueued_rate", text: fmtRate(r && r.enq) }),
        el("td", { class: "num", "data-field": "completed_rate", text: fmtRate(r && r.fin) }),
        el("td", { class: "num", "data-field": "total_enqueued", text: fmtInt(q.total_enqueued) }),
        el("td", { class: "num", "data-field": "commits", text: fmtInt(q.commits) }),
        el("td", { class: "num", text: q.mean_ops_per_commit.toFixed(1) }),
        el("td", {
          class: q.noisy_tenants ? "num" : "num zero",
          "data-field": "noisy_tenants",
          title: `quiet tenants: ${fmtInt(q.quiet_visible)} visible, ` +
            `${fmtInt(q.quiet_in_flight)} in flight, ${fmtInt(q.quiet_delayed)} delayed; ` +
            `oldest visible ${q.quiet_oldest_age.toFixed(1)} s`,
          text: fmtInt(q.noisy_tenants),
        }),
      );
      return row;
    }));
  }

  function fmtDollars(v) {
    return v >= 100 ? `$${fmtInt(Math.round(v))}` : `$${v.toFixed(v >= 1 ? 2 : 4)}`;
  }

  const STORE_KINDS = { directory: "a local directory", memory: "a memory store" };

  function renderCost(cost) {
    const r = cost.requests;
    const counts = `${fmtInt(r.put)} PUT, ${fmtInt(r.get)} GET, ${fmtInt(r.list)} LIST, ` +
      `${fmtInt(r.delete)} DELETE`;
    const free = cost.put_price === 0 && cost.get_price === 0;
    $("cost").textContent = free && STORE_KINDS[cost.store_kind]
      ? `Store requests: ${STORE_KINDS[cost.store_kind]} charges nothing per request ` +
        `(${counts} since the broker started).`
      : `Store requests: about ${fmtDollars(cost.per_month)} a month at the rate of the last ` +
        `10 minutes; ${fmtDollars(cost.dollars)} since the broker started (${counts}; ` +
        `at $${cost.put_price} per 1,000 PUT or LIST, $${cost.get_price} per 1,000 GET).`;
  }

  function depthBar(q) {
    const total = STATES.reduce((sum, s) => sum + q[s], 0);
    const bar = el("div", { class: "bar", title: STATES.map((s) => `${s} ${q[s]}`).join(", ") });
    if (total) {
      for (const s of STATES) {
        if (!q[s]) continue;
        const seg = el("span", { class: `seg ${s}` });
        seg.style.flex = String(q[s] / total); // CSSOM, which the page's CSP allows
        bar.append(seg);
      }
    }
    return bar;
  }

  // The queue the URL's hash names ("" if none).
  function hashQueue() {
    try {
      return decodeURIComponent(location.hash.slice(1));
    } catch {
      return ""; // a malformed escape
    }
  }

  // Show the queue the URL names: select it if it is open here, else open it by name. Whether
  // the URL names one to show (being opened included).
  function follow() {
    const name = hashQueue();
    if (!name || name === selected || name === refused) return false;
    if (figures.has(name)) selectQueue(name);
    else if (name !== opening) openQueue(name);
    return true;
  }

  for (const type of ["hashchange", "popstate"]) {
    window.addEventListener(type, () => {
      refused = null;
      if (!locked) follow();
    });
  }

  // Select queue ``name``; ``remember``: the user chose it, so the URL names it (/#name).
  function selectQueue(name, remember = true) {
    if (remember && name && hashQueue() !== name) {
      history.pushState(null, "", `#${encodeURIComponent(name)}`);
    }
    if (name === selected) return;
    selected = name;
    deadShown = figures.has(name) ? figures.get(name).dead : null;
    for (const row of $("queues").tBodies[0].rows) {
      row.classList.toggle("selected", row.dataset.queue === name);
    }
    $("tp-queue").textContent = name || "";
    $("dlq-queue").textContent = name || "";
    $("dead").tBodies[0].replaceChildren();
    $("dead").hidden = true;
    $("dlq-note").textContent = name ? "Loading…" : "Select a queue.";
    $("dlq-result").textContent = "";
    renderThroughput(null);
    if (name) loadDead();
  }

  // Open queue ``name`` on the broker (it must be in the store) and select it; whether it was.
  async function openQueue(name) {
    opening = name;
    $("open-error").textContent = "";
    try {
      await api(queuePath(name, "stats"));
    } catch (err) {
      if (!authFailed(err)) $("open-error").textContent = `${name}: ${err.message}`;
      if (hashQueue() === name) refused = name;
      return false;
    } finally {
      opening = null;
    }
    await poll();
    selectQueue(name);
    return true;
  }

  $("open-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    if (await openQueue($("open-name").value.trim())) $("open-name").value = "";
  });

  // ------------------------------------------------------------------ charts

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  }

  // series: [{cls, points: [[t, value]]}]; a gap longer than maxGap seconds breaks a line, and
  // a point with no neighbour in reach is drawn as a dot.
  function drawChart(svg, now, series, format, maxGap) {
    const W = 640, H = 200, left = 56, right = 8, top = 10, bottom = 22;
    const start = now - WINDOW_S;
    let max = 0;
    for (const s of series) for (const [, v] of s.points) max = Math.max(max, v);
    max = niceMax(max);
    const x = (t) => left + ((t - start) / WINDOW_S) * (W - left - right);
    const y = (v) => top + (1 - v / max) * (H - top - bottom);
    const nodes = [];
    for (const frac of [0, 0.5, 1]) {
      const v = max * frac;
      nodes.push(svgEl("line", { class: "grid", x1: left, x2: W - right, y1: y(v), y2: y(v) }));
      const label = svgEl("text", { class: "axis", x: left - 6, y: y(v) + 4, "text-anchor": "end" });
      label.textContent = format(v);
      nodes.push(label);
    }
    for (const [t, text, anchor] of [[start, "-5 min", "start"], [now, "now", "end"]]) {
      const label = svgEl("text", { class: "axis", x: x(t), y: H - 6, "text-anchor": anchor });
      label.textContent = text;
      nodes.push(label);
    }
    for (const s of series) {
      const shown = s.points.filter(([t]) => t >= start);
      let d = "";
      shown.forEach(([t, v], i) => {
        const [cx, cy] = [x(t).toFixed(1), y(v).toFixed(1)];
        const joinsPrev = i > 0 && t - shown[i - 1][0] <= maxGap;
        const joinsNext = i + 1 < shown.length && shown[i + 1][0] - t <= maxGap;
        d += `${joinsPrev ? "L" : "M"}${cx},${cy}`;
        if (!joinsPrev && !joinsNext) nodes.push(svgEl("circle", { class: s.cls, cx, cy, r: 3 }));
      });
      if (d) nodes.push(svgEl("path", { class: s.cls, d, "data-points": shown.length }));
    }
    svg.replaceChildren(...nodes);
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  let lastNow = null;
  function renderThroughput(now) {
    now = now ?? lastNow ?? Date.now() / 1000;
    lastNow = now;
    const points = rates.get(selected) || [];
    const latest = points.at(-1);
    $("tp-enq").textContent = fmtRate(latest && latest.enq);
    $("tp-fin").textContent = fmtRate(latest && latest.fin);
    drawChart($("chart-throughput"), now, [
      { cls: "enq", points: points.map((p) => [p.t, p.enq]) },
      { cls: "fin", points: points.map((p) => [p.t, p.fin]) },
    ], (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1)), Math.max(5, 3 * historyStep));
  }

  function renderLatency(latency, now) {
    $("lat-p50").textContent = fmtMs(latency.p50);
    $("lat-p99").textContent = fmtMs(latency.p99);
    const mid = latency.step / 2; // a step's figures are drawn at its middle
    drawChart($("chart-latency"), now, [
      { cls: "p50", points: latency.series.map((s) => [s.t + mid, s.p50 * 1000]) },
      { cls: "p99", points: latency.series.map((s) => [s.t + mid, s.p99 * 1000]) },
    ], (v) => `${v >= 10 ? v.toFixed(0) : v.toFixed(1)} ms`, latency.step * 1.5);
  }

  // ------------------------------------------------------------------ dead letters

  function preview(base64) {
    const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
    try {
      const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
      return text.length > 200 ? `${text.slice(0, 200)}…` : text;
    } catch {
      const hex = Array.from(bytes.slice(0, 32), (b) => b.toString(16).padStart(2, "0")).join(" ");
      return `binary, ${bytes.length} bytes: ${hex}${bytes.length > 32 ? " …" : ""}`;
    }
  }

  async function loadDead() {
    const name = selected;
    if (!name) return;
    let found;
    try {
      found = (await api(`${queuePath(name, "dead-letters")}?limit=100`)).messages;
    } catch (err) {
      if (!authFailed(err)) $("dlq-note").textContent = `Could not read them: ${err.message}`;
      return;
    }
    if (name !== selected || locked) return;
    const checked = new Set(checkedIds());
    const body = $("dead").tBodies[0];
    body.replaceChildren(...found.map((m) => {
      const box = el("input", { type: "checkbox", value: m.id, "aria-label": `select ${m.id}` });
      box.checked = checked.has(m.id);
      box.addEventListener("change", updateButtons);
      return el("tr", { "data-id": m.id },
        el("td", { class: "check" }, box),
        el("td", { class: "id", text: m.id }),
        el("td", { class: "num", text: String(m.attempts) }),
        el("td", { text: new Date(m.enqueued_at * 1000).toLocaleString() }),
        el("td", { class: "err", text: m.last_error || "" }),
        el("td", { class: "payload", text: preview(m.payload) }),
      );
    }));
    $("dead").hidden = found.length === 0;
    $("dead-all").checked = false;
    $("dlq-note").textContent = found.length
      ? `${found.length}${found.length === 100 ? " (the oldest 100)" : ""} dead letter(s).`
      : "No dead letters.";
    updateButtons();
  }

  function checkedIds() {
    return Array.from($("dead").tBodies[0].querySelectorAll("input:checked"), (b) => b.value);
  }

  function updateButtons() {
    const rows = $("dead").tBodies[0].rows.length;
    $("redrive-selected").disabled = checkedIds().length === 0;
    $("redrive-all").disabled = rows === 0;
  }

  $("dead-all").addEventListener("change", () => {
    for (const box of $("dead").tBodies[0].querySelectorAll("input[type=checkbox]")) {
      box.checked = $("dead-all").checked;
    }
    updateButtons();
  });

  async function redrive(ids) {
    const name = selected;
    $("redrive-selected").disabled = $("redrive-all").disabled = true;
    try {
      const { moved } = await api(queuePath(name, "redrive"), "POST", ids ? { ids } : {});
      $("dlq-result").textContent = `Moved ${moved} message(s) of ${name} back to pending.`;
      await loadDead();
      await poll();
    } catch (err) {
      if (!authFailed(err)) $("dlq-result").textContent = `Redrive failed: ${err.message}`;
      updateButtons();
    }
  }

  $("redrive-selected").addEventListener("click", () => redrive(checkedIds()));
  $("redrive-all").addEventListener("click", () => {
    if (confirm(`Move every dead letter of ${selected} back to pending?`)) redrive(null);
  });
  $("dlq-refresh").addEventListener("click", () => loadDead());

  startPolling();
})();
