// The live page of a running llmsim backend. Everything it shows and changes goes through the
// backend's own control API (/llmsim/v1/), same origin only: the control token, taken from the
// #token= fragment, is sent to this origin and nowhere else. No framework, no build step.
"use strict";

const API = "/llmsim/v1/";
const HISTORY_SECONDS = 300;  // the charts' window
const SVG = "http://www.w3.org/2000/svg";
const samples = [];  // {t: wall seconds, total, running, waiting}, one per poll
let tick = 0;
let timelineUrl = null;
let faultKinds = {};
let settingsShown = false;

const token = readToken();

/** The control token from the URL's #token= fragment (then removed from the address bar), kept for
 * this tab only (sessionStorage is per origin: no other site can read it). */
function readToken() {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem("llmsim-token", decodeURIComponent(match[1]));
    window.history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("llmsim-token");
}

class ControlError extends Error {
  constructor(status, message) { super(`${status}: ${message}`); this.status = status; }
}

/** One control API call; `path` is relative to /llmsim/v1/, so the request cannot leave this origin. */
async function control(method, path, body) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";  // the control API refuses state changes without it
    init.body = JSON.stringify(body);
  }
  const response = await fetch(API + path, init);
  const text = await response.text();
  if (!response.ok) {
    let message = text;
    try { message = JSON.parse(text).error.message; } catch (_) { /* not JSON: keep the text */ }
    throw new ControlError(response.status, message);
  }
  return path.includes("format=svg") ? text : JSON.parse(text);
}

function $(id) { return document.getElementById(id); }

function say(message, bad = false) {
  const status = $("action-status");
  status.textContent = message;
  status.className = bad ? "bad" : "";
}

function seconds(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  return value >= 1 ? `${value.toFixed(2)} s` : `${(value * 1000).toFixed(1)} ms`;
}

// --- numbers and charts ---

function showMetrics(metrics) {
  const now = performance.now() / 1000;
  samples.push({ t: now, total: metrics.requests_total, running: metrics.running, waiting: metrics.waiting });
  while (samples.length && samples[0].t < now - HISTORY_SECONDS) samples.shift();
  const earlier = samples.find((sample) => sample.t >= now - 5) || samples[0];
  const rate = now > earlier.t ? (metrics.requests_total - earlier.total) / (now - earlier.t) : 0;
  const notOk = Object.entries(metrics.requests_by_status)
    .filter(([status]) => !status.startsWith("2")).reduce((sum, [, count]) => sum + count, 0);
  $("requests-total").textContent = metrics.requests_total;
  $("request-rate").textContent = Math.max(rate, 0).toFixed(1);
  $("running").textContent = metrics.running;
  $("waiting").textContent = metrics.waiting;
  $("max-running").textContent = metrics.max_running;
  $("errors-total").textContent = notOk;
  $("faulted-total").textContent = Object.values(metrics.faults || {}).reduce((sum, count) => sum + count, 0);
  $("ttft-p50").textContent = seconds(metrics.ttft.p50);
  $("itl-p50").textContent = seconds(metrics.itl.p50);
  $("e2e-p50").textContent = seconds(metrics.e2e.p50);
  $("cache-hit-rate").textContent = `${(metrics.cache_hit_rate * 100).toFixed(1)} %`;
  $("sessions").textContent = `${metrics.sessions_open} / ${metrics.sessions_total}`;
  const rates = samples.slice(1).map((sample, i) => ({
    t: sample.t, v: Math.max((sample.total - samples[i].total) / Math.max(sample.t - samples[i].t, 1e-3), 0) }));
  lineChart($("rate-chart"), now, [{ points: rates, cls: "rate", name: "req/s" }]);
  lineChart($("batch-chart"), now, [
    { points: samples.map((s) => ({ t: s.t, v: s.running })), cls: "running", name: "running" },
    { points: samples.map((s) => ({ t: s.t, v: s.waiting })), cls: "waiting", name: "waiting" }]);
}

function element(parent, name, attributes = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  parent.appendChild(node);
  return node;
}

const BOX = { left: 40, right: 470, top: 22, bottom: 140 };

function axes(svg, top) {
  element(svg, "line", { class: "axis", x1: BOX.left, x2: BOX.right, y1: BOX.bottom, y2: BOX.bottom });
  element(svg, "line", { class: "axis", x1: BOX.left, x2: BOX.left, y1: BOX.top, y2: BOX.bottom });
  element(svg, "text", { x: BOX.left - 4, y: BOX.top + 8, "text-anchor": "end" }, formatCount(top));
  element(svg, "text", { x: BOX.left - 4, y: BOX.bottom, "text-anchor": "end" }, "0");
}

function formatCount(value) {
  return value >= 100 ? value.toFixed(0) : String(Math.round(value * 10) / 10);
}

/** Lines over the last HISTORY_SECONDS of wall time, y from 0 to the peak. */
function lineChart(svg, now, series) {
  svg.replaceChildren();
  const peak = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p.v)));
  axes(svg, peak);
  element(svg, "text", { x: BOX.left, y: 155 }, `−${HISTORY_SECONDS / 60} min`);
  element(svg, "text", { x: BOX.right, y: 155, "text-anchor": "end" }, "now");
  const x = (t) => BOX.right - (now - t) / HISTORY_SECONDS * (BOX.right - BOX.left);
  const y = (v) => BOX.bottom - v / peak * (BOX.bottom - BOX.top);
  series.forEach((s, i) => {
    if (s.points.length) {
      element(svg, "polyline", { class: s.cls,
        points: s.points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(" ") });
    }
    const last = s.points.length ? s.points[s.points.length - 1].v : 0;
    element(svg, "text", { x: BOX.left + 6 + i * 120, y: 14, class: `legend ${s.cls}` },
            `${s.name} ${formatCount(last)}`);
  });
}

/** Bars per bucket up to the last one with a count (Prometheus `le` buckets, vLLM's bounds). */
function histogramChart(svg, histogram) {
  svg.replaceChildren();
  const counts = histogram.counts;
  let last = counts.length - 1;
  while (last > 0 && counts[last] === 0) last -= 1;
  let first = 0;
  while (first < last - 1 && counts[first + 1] === 0) first += 1;  // one empty bucket before the first count
  const shown = counts.slice(first, last + 1);
  const peak = Math.max(1, ...shown);
  axes(svg, peak);
  const width = (BOX.right - BOX.left) / shown.length;
  shown.forEach((count, i) => {
    const height = count / peak * (BOX.bottom - BOX.top);
    element(svg, "rect", { x: BOX.left + i * width + 1, y: BOX.bottom - height, width: Math.max(width - 2, 1),
                           height, "data-count": count });
    const bucket = first + i;
    const bound = bucket < histogram.bounds.length ? `≤${histogram.bounds[bucket]}` : "more";
    if (shown.length <= 12 || i % 2 === 0) {
      element(svg, "text", { x: BOX.left + (i + 0.5) * width, y: 155, "text-anchor": "middle" }, bound);
    }
  });
  element(svg, "text", { x: BOX.right, y: 14, "text-anchor": "end" }, `${histogram.count} in all`);
}

// --- tables ---

function row(tbody, cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    td.textContent = cell === null || cell === undefined ? "" : String(cell);
    tr.appendChild(td);
  }
  tbody.appendChild(tr);
  return tr;
}

/** The scenario's phases: how many act now, of how many, and which (in the tooltip). */
function showScenario(scenario) {
  const phases = scenario.phases || [];
  const active = phases.filter((phase) => phase.active);
  $("scenario").textContent = phases.length ? `${active.length} / ${phases.length}` : "none";
  $("scenario").title = phases.length ? `${scenario.elapsed.toFixed(1)} s in: ` + active.map((phase) =>
    Object.entries(phase).filter(([key]) => key !== "active").map(([key, value]) =>
      `${key}=${JSON.stringify(value)}`).join(" ")).join("; ") : "";
}

function showFaults(faults) {
  const tbody = $("faults").tBodies[0];
  tbody.replaceChildren();
  const defaults = { after_tokens: 0, seconds: 1, factor: 2, side: "prompt", header_only: false };
  for (const fault of faults) {
    const params = Object.entries(fault)
      .filter(([key, value]) => !["kind", "hits", "spent"].includes(key) && value !== null && defaults[key] !== value)
      .map(([key, value]) => `${key}=${value}`).join(", ");
    const tr = row(tbody, [fault.kind, params, fault.hits, fault.spent ? "spent" : "armed"]);
    if (fault.spent) tr.className = "spent";
  }
  if (!faults.length) row(tbody, ["none armed", "", "", ""]);
}

function showRules(rules) {
  const tbody = $("rules").tBodies[0];
  tbody.replaceChildren();
  for (const rule of rules) {
    const { name, hits, ...rest } = rule;
    row(tbody, [name, hits, JSON.stringify(rest)]);
  }
  if (!rules.length) row(tbody, ["none", "", ""]);
}

function logQuery() {
  const params = new URLSearchParams({ tail: "200" });
  for (const name of ["api", "status", "model"]) {
    const value = $(`filter-${name}`).value.trim();
    if (value) params.set(name, value);
  }
  return `requests?${params}`;
}

function showLog(page) {
  const tbody = $("request-log").tBodies[0];
  tbody.replaceChildren();
  $("log-count").textContent = `(${page.records.length} newest of ${page.total} matching)`;
  const apis = $("filter-api");
  const known = new Set([...apis.options].map((option) => option.value));
  page.records.slice().reverse().forEach((record, i) => {
    const tr = row(tbody, [page.offset + page.records.length - i, record.api, record.method, record.path,
      record.model, record.status, record.stream ? "yes" : "", record.prompt_tokens, record.completion_tokens,
      record.cached_tokens, seconds(record.ttft), seconds(record.e2e), record.fault, record.ended]);
    if (record.status >= 400 || record.status === 0) tr.cells[5].className = "bad";
    if (record.ended && record.ended !== "completed") tr.cells[13].className = "bad";
    if (record.api && !known.has(record.api)) {
      known.add(record.api);
      apis.add(new Option(record.api, record.api));
    }
  });
}

// --- controls ---

function showFaultForm() {
  const select = $("fault-kind");
  select.replaceChildren(...Object.keys(faultKinds).map((kind) => new Option(kind, kind)));
  select.addEventListener("change", showFaultParams);
  showFaultParams();
}

function showFaultParams() {
  const kind = $("fault-kind").value;
  const spec = faultKinds[kind] || { params: [], when: [], types: {} };
  const names = [...spec.params, ...spec.when.filter((name) => ["times", "nth", "rate", "model"].includes(name))];
  $("fault-params").replaceChildren(...names.map((name) => {
    const label = document.createElement("label");
    const input = document.createElement("input");
    input.name = name;
    input.dataset.param = name;
    const type = (spec.types || {})[name];  // the JSON type the fault's field has (GET fault-kinds)
    input.type = type === "integer" || type === "number" ? "number" : "text";
    if (input.type === "number") input.step = "any";
    label.append(`${name} `, input);
    return label;
  }));
}

async function armFault(event) {
  event.preventDefault();
  const body = { kind: $("fault-kind").value };
  for (const input of $("fault-params").querySelectorAll("input")) {
    if (input.value.trim() !== "") body[input.dataset.param] = input.type === "number" ? Number(input.value) : input.value;
  }
  await act(async () => { await control("POST", "faults", body); return `armed ${body.kind}`; });
}

function showSettings(config) {
  for (const input of $("settings-form").querySelectorAll("input")) {
    if (!(input.name in config)) continue;
    const value = config[input.name];
    if (value !== null && typeof value === "object") {  // a latency's percentiles: shown, kept unless replaced
      input.value = "";
      input.placeholder = Object.entries(value).map(([key, seconds]) => `${key}=${seconds}`).join(",");
    } else {
      input.value = value;
    }
  }
  settingsShown = true;
}

async function applySettings(event) {
  event.preventDefault();
  const changes = {};
  for (const input of $("settings-form").querySelectorAll("input")) {
    if (input.value.trim() === "") continue;
    const text = input.value.trim();  // speed: a number, or "inf"
    changes[input.name] = input.type === "number" || !Number.isNaN(Number(text)) ? Number(text) : text;
  }
  await act(async () => { showSettings(await control("PATCH", "config", changes)); return "settings applied"; });
}

/** Run a state-changing call, say how it went, and refresh everything at once. */
async function act(call) {
  try {
    say(await call());
  } catch (error) {
    say(error.message, true);
  }
  tick = 0;
  await refresh();
}

// --- the poll ---

async function refresh() {
  try {
    showMetrics(await control("GET", "metrics"));
    if (tick % 2 === 0) {
      const histograms = await control("GET", "histograms");
      histogramChart($("ttft-histogram"), histograms.ttft);
      histogramChart($("itl-histogram"), histograms.itl);
      histogramChart($("e2e-histogram"), histograms.e2e);
      showFaults(await control("GET", "faults"));
      showScenario(await control("GET", "scenario"));
      showRules(await control("GET", "rules"));
      showLog(await control("GET", logQuery()));
      if (!settingsShown) showSettings(await control("GET", "config"));
    }
    if (tick % 5 === 0) {
      const svg = await control("GET", "trace?format=svg&title=live");
      const url = URL.createObjectURL(new Blob([svg], { type: "image/svg+xml" }));
      const box = $("timeline").parentElement;  // newest rows at the bottom: stay there unless scrolled up
      const atBottom = !timelineUrl || box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
      $("timeline").onload = () => { if (atBottom) box.scrollTop = box.scrollHeight; };
      $("timeline").src = url;
      if (timelineUrl) URL.revokeObjectURL(timelineUrl);
      timelineUrl = url;
    }
    $("connection").textContent = "live";
    $("connection").className = "badge ok";
  } catch (error) {
    const hint = error.status === 401 ? " — open this page as /llmsim/ui#token=YOUR_CONTROL_TOKEN" : "";
    $("connection").textContent = `${error.message}${hint}`;
    $("connection").className = "badge bad";
  }
  tick += 1;
}

/** The load the backend kept before this page opened (or since a reset): the charts start with it. */
async function loadHistory() {
  const history = await control("GET", "history");
  const now = performance.now() / 1000;
  samples.length = 0;
  for (const sample of history.samples) {
    samples.push({ t: now - sample.ago, total: sample.total, running: sample.running, waiting: sample.waiting });
  }
}

async function poll() {
  await refresh();
  setTimeout(poll, 1000);
}

async function start() {
  $("server-name").textContent = location.host;
  $("fault-form").addEventListener("submit", armFault);
  $("clear-faults").addEventListener("click", () => act(async () => {
    await control("DELETE", "faults"); return "faults cleared"; }));
  $("settings-form").addEventListener("submit", applySettings);
  $("reset-backend").addEventListener("click", () => act(async () => {
    settingsShown = false; await control("POST", "reset", {}); await loadHistory(); return "backend reset"; }));
  $("log-filters").addEventListener("input", () => { tick = 0; refresh(); });
  $("log-filters").addEventListener("submit", (event) => event.preventDefault());
  try {
    faultKinds = await control("GET", "fault-kinds");
    showFaultForm();
    await loadHistory();
  } catch (error) {
    say(error.message, true);
  }
  poll();
}

start();
