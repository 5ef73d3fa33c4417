// The switchyard status page: polls the admin API and draws tables and SVG plots.
// No library; the token lives in this tab's sessionStorage only.
"use strict";

// Errors seen by the page, for people (and tests) to read: window.switchyardErrors.
window.switchyardErrors = [];
window.addEventListener("error", (e) => window.switchyardErrors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.switchyardErrors.push(String(e.reason)));
const consoleError = console.error.bind(console);
console.error = (...args) => { window.switchyardErrors.push(args.join(" ")); consoleError(...args); };

const POLL_MS = 1500;
const PLUGINS_EVERY = 2; // polls
const WINDOW_S = 300;
const TOKEN_KEY = "switchyard-admin-token";
const COLORS = ["#2457c5", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#0b7285", "#5c940d", "#e67700"];

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  history: new Map(), // handler -> [{t, rate, queue}]
  last: new Map(),    // handler -> {t, processed}
  details: new Map(), // handler -> /handlers/{name}
  colors: new Map(),
  rows: new Map(),    // handler -> {row, cells}
  polls: 0,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c ?? ""));
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

// ---- the API ----

async function api(method, path, body) {
  const headers = {};
  if (state.token) headers.Authorization = "Bearer " + state.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let json = null;
  try { json = await response.json(); } catch (_) { json = null; }
  return { status: response.status, ok: response.ok, json };
}

function colorOf(name) {
  if (!state.colors.has(name)) state.colors.set(name, COLORS[state.colors.size % COLORS.length]);
  return state.colors.get(name);
}

function fmt(n, digits) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  if (digits !== undefined) return Number(n).toFixed(digits);
  return Number(n).toLocaleString("en-US");
}

function ms(n) {
  if (n === null || n === undefined) return "–";
  return n >= 100 ? n.toFixed(0) : n >= 1 ? n.toFixed(1) : n.toFixed(3);
}

// ---- polling ----

async function poll() {
  try {
    const status = await api("GET", "/status");
    if (status.status === 401) return needToken(status.json);
    if (!status.ok) throw new Error((status.json && status.json.error) || "HTTP " + status.status);
    $("prompt").hidden = true;
    const handlers = status.json.handlers.map((h) => h.name);
    const details = await Promise.all(handlers.map((n) => api("GET", "/handlers/" + encodeURIComponent(n))));
    details.forEach((d, i) => d.ok && state.details.set(handlers[i], d.json));
    if (state.polls % PLUGINS_EVERY === 0) {
      const plugins = await api("GET", "/plugins");
      if (plugins.ok) renderPlugins(plugins.json);
    }
    state.polls += 1;
    render(status.json);
    connection("live", "live");
  } catch (e) {
    console.error("switchyard status page: polling failed:", e);
    connection("down", "no answer: " + e.message);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

function needToken(body) {
  $("prompt").hidden = false;
  $("prompt-detail").textContent = state.token ? "(the token given was refused: " + ((body && body.error) || "401") + ")" : "";
  connection("down", "token needed");
  $("token").focus();
}

function connection(kind, text) {
  const pill = $("conn");
  pill.className = "pill " + kind;
  pill.textContent = text;
}

function render(status) {
  $("uptime").textContent = "up " + duration(status.uptime_seconds);
  record(status.handlers);
  renderHandlers(status.handlers);
  renderInformers(status.informers);
  renderRoutes(status.routes);
  renderConfig(status.config);
  renderReplica(status.replica);
  renderShadows(status.handlers);
  renderOutbound(status.handlers);
  renderWaiting(status.waiting);
  renderStore(status.state);
  renderPlots(status.handlers);
}

function duration(s) {
  if (s < 120) return s + " s";
  if (s < 7200) return Math.floor(s / 60) + " min";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

// Events/s from the change in `processed` since the last poll, kept for WINDOW_S.
function record(handlers) {
  const now = Date.now() / 1000;
  for (const h of handlers) {
    const last = state.last.get(h.name);
    const rate = last && now > last.t ? Math.max(0, (h.processed - last.processed) / (now - last.t)) : null;
    state.last.set(h.name, { t: now, processed: h.processed });
    const points = state.history.get(h.name) || [];
    points.push({ t: now, rate, queue: h.queue_depth });
    while (points.length && points[0].t < now - WINDOW_S) points.shift();
    state.history.set(h.name, points);
  }
}

function lastRate(name) {
  const points = state.history.get(name) || [];
  return points.length ? points[points.length - 1].rate : null;
}

// ---- tables ----

const HANDLER_FIELDS = ["rate", "processed", "queue_depth", "in_flight", "p50", "p99", "failed", "dead_letters"];

function handlerRow(name) {
  if (state.rows.has(name)) return state.rows.get(name);
  const cells = {};
  const cell = (field, cls) => (cells[field] = el("td", { "data-field": field, class: cls || "n" }));
  const actions = el("td", { class: "actions" },
    actionButton("pause", name, "pause"), actionButton("resume", name, "resume"),
    actionButton("retry", name, "retry dead letters"), actionButton("purge", name, "purge dead letters"));
  const row = el("tr", { "data-handler": name },
    el("td", {}, el("span", { class: "swatch", "data-color": name }), name), cell("plugin", ""),
    ...HANDLER_FIELDS.map((f) => cell(f)), cell("state", ""), actions);
  row.querySelector(".swatch").style.background = colorOf(name);
  const entry = { row, cells, actions };
  state.rows.set(name, entry);
  return entry;
}

function actionButton(action, name, label) {
  const button = el("button", { type: "button", "data-action": action }, label);
  button.addEventListener("click", () => handlerAction(action, name));
  return button;
}

function renderHandlers(handlers) {
  const body = $("handlers");
  const names = new Set(handlers.map((h) => h.name));
  for (const [name, entry] of state.rows) if (!names.has(name)) { entry.row.remove(); state.rows.delete(name); }
  handlers.forEach((h, i) => {
    const entry = handlerRow(h.name);
    if (body.children[i] !== entry.row) body.insertBefore(entry.row, body.children[i] || null);
    fillHandler(entry, h, state.details.get(h.name));
  });
  renderLastErrors(handlers);
}

function fillHandler(entry, h, detail) {
  const c = entry.cells;
  const latency = detail && detail.latency;
  c.plugin.textContent = h.plugin + (h.plugin_loaded ? "" : h.plugin_pulling ? " (pulling…)" : " (not loaded)");
  c.plugin.className = h.plugin_loaded ? "" : h.plugin_pulling ? "paused" : "bad";
  c.rate.textContent = fmt(lastRate(h.name), 1);
  c.processed.textContent = fmt(h.processed);
  c.queue_depth.textContent = fmt(h.queue_depth) + (h.delayed ? " (+" + h.delayed + " delayed)" : "");
  c.in_flight.textContent = fmt(h.in_flight);
  c.p50.textContent = latency && latency.calls ? ms(latency.p50_ms) : "–";
  c.p99.textContent = latency && latency.calls ? ms(latency.p99_ms) : "–";
  c.failed.textContent = fmt(h.failed);
  c.failed.className = h.failed ? "n bad" : "n";
  c.dead_letters.textContent = fmt(h.dead_letters);
  c.dead_letters.className = h.dead_letters ? "n bad" : "n";
  const [word, why, cls] = handlerState(h);
  c.state.replaceChildren(el("span", { class: cls }, word), why ? el("div", { class: "why" }, why) : "");
  c.state.dataset.state = word;
  entry.actions.querySelector('[data-action="pause"]').disabled = h.paused;
  entry.actions.querySelector('[data-action="resume"]').disabled = !h.paused;
  entry.actions.querySelector('[data-action="retry"]').disabled = !h.dead_letters;
  entry.actions.querySelector('[data-action="purge"]').disabled = !h.dead_letters;
}

// What a handler is doing, in a word, why (shown under it, not in a tooltip), and its
// class: a quarantine first (no call is made but its tries), then what it waits for.
function handlerState(h) {
  const q = h.quarantine;
  if (q) return ["quarantined", "since " + clock(q.since) + ", next try " + clock(q.next_try) + ": " + q.last_error, "bad"];
  if (h.waiting_for && h.waiting_for.length) return ["waiting", "for " + h.waiting_for.join("; "), "paused"];
  if (h.plugin_pulling) return ["pulling", "its plugin is being pulled; events queue up", "paused"];
  if (h.paused) return ["paused", "", "paused"];
  return ["running", "", "yes"];
}

// The time of an RFC 3339 timestamp, as the page's clock shows it.
function clock(at) {
  const t = new Date(at);
  return isNaN(t) ? String(at) : t.toLocaleTimeString();
}

function renderLastErrors(handlers) {
  const box = $("last-errors");
  box.replaceChildren();
  for (const h of handlers) {
    const detail = state.details.get(h.name);
    const last = detail && detail.last_errors && detail.last_errors[detail.last_errors.length - 1];
    if (last) box.append(el("div", {}, h.name + " last failed " + last.at + " on " + last.object + " (attempt " + last.attempt + "): " + last.error));
  }
}

function fillTable(id, rows) {
  $(id).replaceChildren(...rows);
}

function renderInformers(informers) {
  fillTable("informers", informers.map((i) => el("tr", {},
    el("td", {}, i.resource + (i.label_selector ? " [" + i.label_selector + "]" : "")),
    el("td", { class: "muted" }, i.namespace || "all"),
    el("td", { class: "n" }, fmt(i.objects)),
    el("td", { class: i.synced ? "yes" : "no" }, i.synced ? "yes" : i.listed !== null && i.listed !== undefined ? "listing (" + i.listed + ")" : "no"),
    el("td", { class: "n" }, fmt(i.restarts)),
    el("td", { class: "err" }, i.last_error || ""))));
}

function renderRoutes(routes) {
  fillTable("routes", routes.map((r) => el("tr", {},
    el("td", {}, r.name), el("td", {}, r.handler), el("td", { class: "muted" }, r.delivery),
    el("td", { class: "n" }, fmt(r.delivered)), el("td", { class: "n" }, fmt(r.skipped)),
    el("td", { class: "n" }, fmt(r.pending)),
    finalizerCell(r))));
}

// A route's finalizer, and how many objects its handler's dead-lettered deletions hold in
// Terminating (retrying the dead letters lets them go).
function finalizerCell(r) {
  if (!r.finalizer) return el("td", { class: "muted" }, "none");
  const held = r.held_by_dead_letters || 0;
  const text = held ? r.finalizer + ": " + fmt(held) + " held in Terminating" : r.finalizer;
  return el("td", { class: held ? "bad" : "muted", "data-held": String(held) }, text);
}

function renderPlugins(body) {
  fillTable("plugins", body.plugins.map((p) => {
    const button = el("button", { type: "button", "data-action": "plugin-reload" }, "reload");
    button.addEventListener("click", () => act("POST", "/plugins/" + encodeURIComponent(p.name) + "/reload", "reload plugin " + p.name));
    return el("tr", { "data-plugin": p.name },
      el("td", {}, p.name),
      el("td", { class: "muted", title: p.sha256 || "" }, p.sha256 ? p.sha256.slice(0, 12) : "–"),
      el("td", { class: "when" }, p.loaded_at ? p.loaded_at.replace("T", " ") : "not loaded"),
      el("td", { class: "n" }, fmt(p.swaps)),
      el("td", { class: "err" }, p.last_error || (p.file_present ? "" : "file missing: " + p.file)),
      el("td", {}, button));
  }));
}

function planSummary(plan) {
  const parts = [];
  for (const [kind, change] of Object.entries(plan || {})) {
    if (!change || Array.isArray(change)) continue;
    const bits = [];
    for (const [word, sign] of [["added", "+"], ["removed", "−"], ["changed", "~"]]) {
      if (change[word] && change[word].length) bits.push(sign + change[word].join(", " + sign));
    }
    parts.push(kind + ": " + (bits.length ? bits.join(" ") : "unchanged"));
  }
  return parts.join("; ");
}

// A <dl> of [term, text, class] items.
function definitions(id, items) {
  $(id).replaceChildren(...items.flatMap(([k, v, cls]) => [el("dt", {}, k), el("dd", { "data-field": k, class: cls || "" }, v)]));
}

function renderConfig(config) {
  const items = [["file", config.file], ["reloads", config.applied + " applied, " + config.rejected + " rejected"]];
  const last = config.last;
  if (last) {
    items.push(["last reload", last.at + " (" + last.trigger + ") " + (last.applied ? "applied" : "rejected")]);
    items.push(last.applied ? ["its plan", planSummary(last.plan)] : ["its error", last.error, "err"]);
  }
  definitions("config", items);
}

// This replica: its mode, whether it leads, and in sharded mode the members and its ranges.
function renderReplica(r) {
  const items = [["mode", r.mode], ["identity", r.identity], ["leader", r.leader ? "yes" : "no", r.leader ? "yes" : "no"]];
  if (r.lease) {
    items.push(["lease", r.lease + (r.holder ? ", held by " + r.holder : ", not held")]);
    items.push(["renewals", fmt(r.renewals) + " (" + fmt(r.transitions) + " transitions, " + fmt(r.losses) + " lost)"]);
  }
  if (r.shards) {
    const s = r.shards;
    items.push(["members", s.members.length + ": " + s.members.join(", ")]);
    items.push(["owns", (s.ranges.length ? s.ranges.join(" ") : "nothing") + " (" + fmt(100 * s.owned_fraction, 1) + "% of objects)"]);
    items.push(["rebalances", fmt(s.rebalances)]);
  }
  definitions("replica", items);
}

// Each handler's shadow plugin and how its calls compare with the plugin's.
function renderShadows(handlers) {
  const shadowed = handlers.filter((h) => h.shadow);
  $("shadows-section").hidden = !shadowed.length;
  const count = (n, bad) => el("td", { class: n && bad ? "n bad" : "n" }, fmt(n));
  fillTable("shadows", shadowed.map((h) => {
    const s = h.shadow;
    const plugin = s.plugin + (s.loaded ? "" : s.plugin_error ? " (" + s.plugin_error + ")" : " (not loaded)");
    return el("tr", { "data-handler": h.name },
      el("td", {}, h.name), el("td", { class: s.loaded ? "" : "bad" }, plugin),
      count(s.compared), count(s.same), count(s.differing_outcome, true), count(s.differing_writes, true),
      count(s.differing_requests, true),
      count(s.differing_errors, true), count(s.shadow_errors, true));
  }));
}

// Each handler's outbound HTTP requests, by destination.
function renderOutbound(handlers) {
  const rows = handlers.flatMap((h) => (h.outbound || []).map((o) => ({ handler: h.name, ...o })));
  $("outbound-section").hidden = !rows.length;
  const count = (n, bad) => el("td", { class: n && bad ? "n bad" : "n" }, fmt(n));
  fillTable("outbound", rows.map((o) => el("tr", { "data-handler": o.handler },
    el("td", {}, o.handler), el("td", {}, o.host),
    count(o.requests), count(o.errors, true), count(o.refused, true),
    el("td", { class: "n" }, o.p99_ms == null ? "–" : fmt(Math.round(o.p99_ms)) + " ms"))));
}

// The state store (state_dir): its commits, and backpressure (the informers wait for it)
// and failures in red.
function renderStore(store) {
  $("state-section").hidden = !store;
  if (!store) return;
  const pressed = store.backpressure;
  const items = [
    ["path", store.path],
    ["size", fmt(Math.round(store.size_bytes / 1024)) + " KiB"],
    ["commits", fmt(store.commits) + (store.last_commit ? ", last " + clock(store.last_commit) : "")],
    ["pending writes", fmt(store.pending_writes) + " of at most " + fmt(store.max_pending_writes)],
    ["backpressure", (pressed ? "yes: the informers wait for the store" : "no") + " (" + fmt(store.backpressure_waits) + " waits so far)", pressed ? "bad" : "yes"],
    ["failures", fmt(store.failures) + (store.failing_since ? ", failing since " + clock(store.failing_since) : ""), store.failing_since ? "bad" : ""],
  ];
  if (store.last_error) items.push(["last error", store.last_error, "err"]);
  definitions("state", items);
}

function renderWaiting(waiting) {
  $("waiting-section").hidden = !waiting.length;
  fillTable("waiting", waiting.map((w) => el("tr", {},
    el("td", {}, w.watch), el("td", { class: "err" }, w.reason), el("td", {}, w.routes.join(", ")))));
}

// ---- plots ----

function renderPlots(handlers) {
  const names = handlers.map((h) => h.name);
  lineChart($("plot-rate"), names, (p) => p.rate);
  lineChart($("plot-queue"), names, (p) => p.queue);
  latencyChart($("plot-latency"), names);
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const step = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * step) return m * step;
  return 10 * step;
}

const H = 170, L = 44, R = 10, T = 8, B = 20;

// The box's width in pixels, so the drawing is not scaled and its text stays readable.
const widthOf = (box) => Math.max(240, box.clientWidth || 560);

// The time the plots span: what the page has seen, from one to WINDOW_S seconds.
function span(names, now) {
  let oldest = now;
  for (const n of names) for (const p of state.history.get(n) || []) oldest = Math.min(oldest, p.t);
  return Math.min(WINDOW_S, Math.max(60, now - oldest));
}

function lineChart(box, names, value) {
  const now = Date.now() / 1000;
  let max = 0;
  for (const n of names) for (const p of state.history.get(n) || []) max = Math.max(max, value(p) || 0);
  max = niceMax(max);
  const W = widthOf(box), seconds = span(names, now);
  const x = (t) => L + ((t - (now - seconds)) / seconds) * (W - L - R);
  const y = (v) => T + (1 - v / max) * (H - T - B);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  axes(root, max, y, W, seconds);
  for (const n of names) {
    const points = (state.history.get(n) || []).filter((p) => value(p) !== null);
    if (!points.length) continue;
    const d = points.map((p, i) => (i ? "L" : "M") + x(p.t).toFixed(1) + " " + y(value(p)).toFixed(1)).join(" ");
    root.append(svg("path", { d, fill: "none", stroke: colorOf(n), "stroke-width": 2, "stroke-linejoin": "round" }));
  }
  box.replaceChildren(root, legend(names));
}

function axes(root, max, y, W, seconds) {
  for (const v of [0, max / 2, max]) {
    root.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    const label = svg("text", { x: L - 4, y: y(v) + 3, "text-anchor": "end" });
    label.textContent = fmt(v);
    root.append(label);
  }
  [["−" + ago(seconds), L, "start"], ["−" + ago(seconds / 2), (L + W - R) / 2, "middle"], ["now", W - R, "end"]].forEach(([t, x, anchor]) => {
    const label = svg("text", { x, y: H - 4, "text-anchor": anchor });
    label.textContent = t;
    root.append(label);
  });
}

function ago(seconds) {
  return seconds < 120 ? Math.round(seconds) + " s" : (seconds / 60).toFixed(1).replace(".0", "") + " min";
}

function legend(names) {
  return el("div", { class: "legend" }, ...names.map((n) => {
    const swatch = el("span", {}, "■ " + n);
    swatch.style.color = colorOf(n);
    return swatch;
  }));
}

// One row per handler: bars from the axis to p99, p90 and p50, darker for lower quantiles.
function latencyChart(box, names) {
  const rows = names.map((n) => [n, state.details.get(n) && state.details.get(n).latency]).filter(([, l]) => l && l.calls);
  if (!rows.length) { box.replaceChildren(el("p", { class: "muted" }, "no calls yet")); return; }
  const values = rows.flatMap(([, l]) => [l.p50_ms, l.p90_ms, l.p99_ms]).filter((v) => v > 0);
  const [lo, hi] = decades(values);
  const W = widthOf(box), left = 90, height = Math.max(H, rows.length * 26 + 24);
  const x = (v) => left + ((Math.log10(Math.max(v, Math.pow(10, lo))) - lo) / (hi - lo)) * (W - left - 110);
  const root = svg("svg", { viewBox: `0 0 ${W} ${height}`, role: "img" });
  root.style.height = height + "px";
  for (let d = lo; d <= hi; d++) {
    root.append(svg("line", { x1: x(Math.pow(10, d)), x2: x(Math.pow(10, d)), y1: 4, y2: height - 16, class: "grid" }));
  }
  rows.forEach(([n, l], i) => latencyRow(root, n, l, 6 + i * 26, x, left));
  // In the page before the axis labels go in, so they can be measured.
  box.replaceChildren(root);
  let free = -Infinity; // where the last label drawn ends
  for (let d = lo; d <= hi; d++) {
    const at = x(Math.pow(10, d));
    const label = svg("text", { x: at, y: height - 4, "text-anchor": "middle" });
    label.textContent = millis(Math.pow(10, d));
    root.append(label);
    // A power of ten whose label would touch the last one drawn keeps its line only.
    const width = label.getComputedTextLength();
    if (at - width / 2 < free + 8) label.remove();
    else free = at + width / 2;
  }
}

// A power of ten of milliseconds as an axis label: 10 µs, 1 ms, 100 ms, 1 s, 10 s.
function millis(v) {
  if (v >= 1000) return fmt(v / 1000) + " s";
  if (v >= 1) return fmt(v) + " ms";
  return fmt(Math.round(v * 1000 * 1e6) / 1e6) + " µs";
}

// The powers of ten the latency axis spans, with room below the smallest value.
function decades(values) {
  if (!values.length) return [-3, 0];
  const lo = Math.floor(Math.log10(Math.min(...values)) - 0.5);
  return [lo, Math.max(lo + 1, Math.ceil(Math.log10(Math.max(...values))))];
}

function latencyRow(root, name, l, top, x, left) {
  const name_ = svg("text", { x: left - 6, y: top + 13, "text-anchor": "end" });
  name_.textContent = name;
  root.append(name_);
  [[l.p99_ms, 0.3], [l.p90_ms, 0.6], [l.p50_ms, 1]].forEach(([v, opacity]) => {
    root.append(svg("rect", { x: left, y: top, width: Math.max(1, x(v) - left), height: 18, fill: colorOf(name), "fill-opacity": opacity }));
  });
  const label = svg("text", { x: x(l.p99_ms) + 4, y: top + 13 });
  label.textContent = ms(l.p50_ms) + " · " + ms(l.p90_ms) + " · " + ms(l.p99_ms);
  root.append(label);
}

// ---- actions ----

function handlerAction(action, name) {
  const base = "/handlers/" + encodeURIComponent(name);
  const paths = { pause: "/pause", resume: "/resume", retry: "/dead-letters/retry", purge: "/dead-letters/purge" };
  if (action === "purge" && !window.confirm("Drop every dead letter of " + name + "?")) return;
  act("POST", base + paths[action], action + " " + name);
}

async function act(method, path, what) {
  if (!state.token) return message("error", "Enter the admin token above to " + what + ".");
  try {
    const answer = await api(method, path);
    if (answer.ok) message("ok", what + ": " + describe(answer.json));
    else message("error", what + " failed: " + errorText(answer));
  } catch (e) {
    message("error", what + " failed: " + e.message);
  }
}

function describe(json) {
  if (!json) return "done";
  if (json.plan) return "applied (" + planSummary(json.plan) + ")";
  if ("retried" in json) return json.retried + " retried";
  if ("purged" in json) return json.purged + " purged";
  if ("paused" in json) return json.paused ? "paused" : "resumed";
  return json.reloaded ? String(json.reloaded) : "done";
}

function errorText(answer) {
  const json = answer.json || {};
  const lines = [json.error || "HTTP " + answer.status];
  for (const e of json.errors || []) lines.push(e.file + ":" + e.line + ":" + e.column + " " + (e.path || "") + ": " + e.message);
  return lines.join("\n");
}

function message(kind, text) {
  const box = $("message");
  box.className = "banner " + kind;
  box.textContent = text;
  box.hidden = false;
}

function setupToken() {
  $("token").value = state.token;
  tokenState();
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token); else sessionStorage.removeItem(TOKEN_KEY);
    tokenState();
  });
  $("token-forget").addEventListener("click", () => {
    state.token = "";
    $("token").value = "";
    sessionStorage.removeItem(TOKEN_KEY);
    tokenState();
  });
  $("reload").addEventListener("click", () => act("POST", "/reload", "reload config"));
}

function tokenState() {
  $("token-state").textContent = state.token ? "token set (this tab only)" : "no token";
}

setupToken();
poll();
