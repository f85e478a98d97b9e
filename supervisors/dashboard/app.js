// Herald's dashboard: one ES module, no build step, no outside network.
// It reads the node's JSON API (/api/v1/..., docs/observability.md) and
// follows /api/v1/events (server-sent events, one per second): each event
// updates the header and the charts, then the view on screen is fetched
// again (one page of rows at most: the node sorts, filters and pages).
// Everything the node sends is put in the page as text, never as HTML.

const $ = (sel, root = document) => root.querySelector(sel);

// h builds an element: h("td", {class: "num", dataset: {col: "tail"}}, "12").
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// ---- formatting ----

const nf = new Intl.NumberFormat("en-US");
const fmtNum = (n) => (n === undefined || n === null ? "–" : nf.format(Math.round(n)));
function fmtBytes(b) {
  if (b === undefined || b === null || b < 0) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i === 0 ? b.toFixed(0) : b.toFixed(b < 10 ? 2 : 1)) + " " + units[i];
}
function fmtRate(r) {
  if (!r) return "0";
  if (r >= 1e6) return (r / 1e6).toFixed(2) + "M";
  if (r >= 1e4) return (r / 1e3).toFixed(1) + "k";
  if (r >= 10) return r.toFixed(0);
  return r.toFixed(1);
}
function fmtSecs(s) {
  if (!s) return "–";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  return s.toFixed(2) + " s";
}
function fmtDuration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s % 60}s`;
}
const plural = (n, word) => `${fmtNum(n)} ${word}${n === 1 ? "" : "s"}`;
const pct = (f) => Math.round(Math.min(Math.max(f, 0), 1) * 100);

// ---- API ----

class HTTPError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(path, opts = {}) {
  const res = await fetch(path, { credentials: "same-origin", ...opts });
  let body = null;
  if (res.status !== 204) {
    try { body = await res.json(); } catch { body = null; }
  }
  if (!res.ok) throw new HTTPError(res.status, body);
  return body;
}

const enc = encodeURIComponent;
const streamPath = (name) => name.split("/").map(enc).join("/");

// ---- state ----

const state = {
  who: null,
  node: null,
  series: null, // columns, as /api/v1/node?series=1 gives them
  events: null,
  fetching: false,
  again: false,
  route: null,
};

// ---- routing: #/view/part/part?query ----

function parseRoute() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, qs] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, query: new URLSearchParams(qs || "") };
}

function go(parts, query) {
  const qs = query && [...query].length ? "?" + query.toString() : "";
  location.hash = "#/" + parts.map(enc).join("/") + qs;
}

function setQuery(updates) {
  const r = parseRoute();
  for (const [k, v] of Object.entries(updates)) {
    if (v === "" || v === null || v === undefined) r.query.delete(k);
    else r.query.set(k, v);
  }
  go(r.parts, r.query);
}

// ---- header ----

function renderHeader() {
  const n = state.node;
  if (!n) return;
  const bits = [`node ${n.node_id}`, n.version, `up ${fmtDuration(n.uptime_seconds)}`];
  if (n.cluster) bits.push(`cluster node ${n.cluster.node_id} of ${n.cluster.nodes}`);
  $("#node-line").textContent = bits.join(" · ");
  $("#tab-cluster").hidden = !n.cluster;
}

function renderWho() {
  const el = $("#who");
  el.replaceChildren();
  const w = state.who;
  if (!w) return;
  if (w.auth === "dev") {
    el.append(h("span", { title: "the node has no credentials configured" }, "dev mode: every tenant"));
    return;
  }
  const scope = w.tenant + (w.namespaces && w.namespaces.length ? ` (${w.namespaces.join(", ")})` : "");
  el.append(h("span", {}, `${w.principal} · tenant ${scope}`),
    h("button", { onclick: logout }, "Log out"));
}

function setLive(on, text) {
  const el = $("#live");
  el.className = "live " + (on ? "on" : "off");
  el.textContent = text;
}

// ---- charts ----

const chartDefs = [
  { key: "publish_records_per_second", title: "published", unit: "records/s", fmt: fmtRate },
  { key: "delivered_bytes_per_second", title: "delivered", unit: "bytes/s", fmt: fmtBytes },
  { key: "delivered_batches_per_second", title: "delivered", unit: "batches/s", fmt: fmtRate },
  { key: "group_acked_per_second", title: "group acks", unit: "records/s", fmt: fmtRate, node: true },
  { key: "commit_p99_seconds", title: "commit p99", unit: "", fmt: fmtSecs, node: true },
  { key: "heap_bytes", title: "heap", unit: "", fmt: fmtBytes, node: true },
  { key: "subscriptions", title: "subscriptions", unit: "", fmt: fmtNum },
  { key: "group_lag", title: "group lag", unit: "records", fmt: fmtNum },
];

function appendSample(s) {
  const ser = state.series;
  if (!ser || !s || !s.t) return;
  const n = ser.t.length;
  if (n && ser.t[n - 1] >= s.t) return;
  for (const key of Object.keys(ser)) {
    if (!Array.isArray(ser[key])) continue;
    ser[key].push(key === "t" ? s.t : (s[key] ?? 0));
    if (ser[key].length > 300) ser[key].shift();
  }
}

function drawChart(canvas, values) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 260, hgt = canvas.clientHeight || 64;
  canvas.width = w * dpr;
  canvas.height = hgt * dpr;
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, hgt);
  ctx.strokeStyle = "#e2e5eb";
  ctx.beginPath();
  ctx.moveTo(0, hgt - 0.5);
  ctx.lineTo(w, hgt - 0.5);
  ctx.stroke();
  if (!values || values.length < 2) return;
  const maxV = Math.max(...values) || 1;
  // The x axis spans the last five minutes once they are there, and at
  // least a minute before, so a young node's first seconds are not a
  // sliver at the right edge.
  const step = w / (Math.max(values.length, 60) - 1);
  const x0 = w - (values.length - 1) * step;
  ctx.beginPath();
  values.forEach((v, i) => {
    const x = x0 + i * step, y = hgt - 2 - (v / maxV) * (hgt - 6);
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.strokeStyle = "#2f6fdf";
  ctx.lineWidth = 1.5;
  ctx.stroke();
  ctx.lineTo(w, hgt);
  ctx.lineTo(x0, hgt);
  ctx.closePath();
  ctx.fillStyle = "rgba(47,111,223,0.10)";
  ctx.fill();
}

function renderCharts(container) {
  const ser = state.series;
  if (!ser) return;
  const nodeScope = state.node && state.node.scope === "node";
  for (const def of chartDefs) {
    if (def.node && !nodeScope) continue;
    const values = ser[def.key] || [];
    let box = container.querySelector(`[data-chart="${def.key}"]`);
    if (!box) {
      box = h("div", { class: "chart", dataset: { chart: def.key } },
        h("div", { class: "head" }, h("span", {}, `${def.title} ${def.unit}`), h("b", {})),
        h("canvas", {}));
      container.append(box);
    }
    $("b", box).textContent = def.fmt(values.length ? values[values.length - 1] : 0);
    drawChart($("canvas", box), values);
  }
}

// ---- tables ----

// table builds a table; cols: {key, label, num, sort, cell(row) -> node|text, value(row)}.
function table(cols, rows, opts = {}) {
  const q = opts.query;
  const head = h("tr", {}, cols.map((c) => {
    const sorted = q && c.sort && (q.get("sort") || opts.defaultSort) === c.sort;
    const order = (q && q.get("order")) || "asc";
    return h("th", {
      class: [c.num ? "num" : "", c.sort ? "sortable" : "", sorted ? `sorted ${order}` : ""].join(" ").trim(),
      onclick: c.sort && q ? () => setQuery({ sort: c.sort, order: sorted && order === "asc" ? "desc" : (sorted ? "asc" : (c.num ? "desc" : "asc")), offset: "" }) : undefined,
    }, c.label);
  }));
  const body = rows.map((r) => {
    const tr = h("tr", { class: opts.onrow ? "link" : "", ...(opts.rowAttrs ? opts.rowAttrs(r) : {}) },
      cols.map((c) => {
        const content = c.cell ? c.cell(r) : r[c.key];
        const value = c.value ? c.value(r) : r[c.key];
        return h("td", { class: c.num ? "num" : "", dataset: { col: c.key, value: value === undefined ? "" : String(value) } },
          content instanceof Node ? content : (c.num && typeof content === "number" ? fmtNum(content) : content ?? ""));
      }));
    if (opts.onrow) tr.addEventListener("click", (e) => { if (!e.target.closest("a")) opts.onrow(r); });
    return tr;
  });
  return h("table", { id: opts.id }, h("thead", {}, head), h("tbody", {}, body));
}

function bar(fill, text) {
  const p = pct(fill);
  const fillEl = h("span", {});
  fillEl.style.width = `${p}%`; // through the CSSOM: the page's CSP allows no inline style attribute
  return h("span", {}, h("span", { class: "bar" + (p >= 90 ? " bad" : p >= 60 ? " warn" : "") }, fillEl), text);
}

function pager(total, q, limit) {
  const offset = Number(q.get("offset") || 0);
  const from = total ? offset + 1 : 0, to = Math.min(offset + limit, total);
  return h("div", { class: "pager" },
    h("button", { disabled: offset <= 0, onclick: () => setQuery({ offset: Math.max(offset - limit, 0) || "" }) }, "‹ prev"),
    h("span", {}, `${fmtNum(from)}–${fmtNum(to)} of ${fmtNum(total)}`),
    h("button", { disabled: to >= total, onclick: () => setQuery({ offset: offset + limit }) }, "next ›"));
}

function filterBox(q, placeholder) {
  const input = h("input", { type: "search", placeholder, value: q.get("q") || "", id: "filter" });
  let timer = null;
  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => setQuery({ q: input.value, offset: "" }), 300);
  });
  return input;
}

// keepFocus re-renders a view without losing the filter box's caret.
function replaceView(...nodes) {
  const view = $("#view");
  const active = document.activeElement && document.activeElement.id === "filter";
  const caret = active ? document.activeElement.selectionStart : null;
  view.replaceChildren(...nodes);
  if (active) {
    const f = $("#filter");
    if (f) { f.focus(); f.setSelectionRange(caret, caret); }
  }
}

function crumbs(...items) {
  return h("div", { class: "crumbs" }, items.map((it, i) => [i ? " / " : "", it.href ? h("a", { href: it.href }, it.label) : it.label]));
}

function card(label, value, sub, key) {
  return h("div", { class: "card" }, h("div", { class: "label" }, label),
    h("div", { class: "value", dataset: { figure: key || "" } }, value), sub ? h("div", { class: "sub" }, sub) : null);
}

// ---- views ----

const streamCols = [
  { key: "name", label: "stream", sort: "name", cell: (r) => h("a", { href: `#/stream/${streamPath(r.name)}` }, r.name) },
  { key: "shards", label: "shards", num: true, sort: "shards" },
  { key: "tail", label: "tail", num: true, sort: "tail" },
  { key: "first", label: "retention floor", num: true, sort: "first" },
  { key: "records", label: "retained", num: true, sort: "records" },
  { key: "stored_bytes", label: "stored", num: true, sort: "stored_bytes", cell: (r) => fmtBytes(r.stored_bytes) },
  { key: "publish_records_per_second", label: "publish rec/s", num: true, sort: "publish_rate", cell: (r) => fmtRate(r.publish_records_per_second) },
  { key: "publish_bytes_per_second", label: "publish B/s", num: true, sort: "publish_bytes_rate", cell: (r) => fmtBytes(r.publish_bytes_per_second) },
  { key: "delivered_bytes_per_second", label: "delivered B/s", num: true, sort: "delivered_bytes_rate", cell: (r) => fmtBytes(r.delivered_bytes_per_second) },
  { key: "subscriptions", label: "subs", num: true, sort: "subscriptions" },
  { key: "groups", label: "groups", num: true, sort: "groups" },
  { key: "group_lag", label: "group lag", num: true, sort: "group_lag" },
  { key: "overflow", label: "overflow" },
];

const groupCols = [
  { key: "stream", label: "stream", sort: "name", cell: (r) => h("a", { href: `#/stream/${streamPath(r.stream)}` }, r.stream) },
  { key: "group", label: "group", cell: (r) => h("a", { href: `#/group/${streamPath(r.stream)}/${enc(r.group)}` }, r.group) },
  { key: "lag", label: "lag", num: true, sort: "lag" },
  { key: "shard_lag", label: "lag by shard", cell: (r) => (r.shard_lag || []).map(fmtNum).join(" · "), value: (r) => (r.shard_lag || []).join(",") },
  { key: "claims", label: "claims in flight", num: true, sort: "claims" },
  { key: "members", label: "members", num: true, sort: "members" },
  { key: "redelivered", label: "redelivered", num: true, sort: "redelivered" },
  { key: "dead_letters", label: "dead letters", num: true, sort: "dead_letters" },
];

async function viewOverview() {
  const n = state.node;
  const t = n.totals;
  const cards = [
    card("streams", fmtNum(t.streams), plural(t.shards, "shard"), "streams"),
    card("subscriptions", fmtNum(t.subscriptions), null, "subscriptions"),
    card("groups", fmtNum(t.groups), `${plural(t.group_members, "member")} · lag ${fmtNum(t.group_lag)}`, "groups"),
    card("published", fmtNum(t.published_records), `${fmtBytes(t.published_bytes)} · ${fmtRate(n.sample.publish_records_per_second)} rec/s`, "published_records"),
    card("delivered", fmtNum(t.delivered_batches) + " batches", `${fmtBytes(t.delivered_bytes)} · ${fmtBytes(n.sample.delivered_bytes_per_second)}/s`, "delivered_batches"),
    card("stored", fmtBytes(t.stored_bytes), "records bytes in the logs, measured every 10 s", "stored_bytes"),
  ];
  if (n.node) {
    const nd = n.node;
    cards.push(
      card("connections", fmtNum(nd.connections), plural(nd.goroutines, "goroutine"), "connections"),
      card("memory", fmtBytes(nd.rss_bytes || nd.go_total_bytes), `heap ${fmtBytes(nd.heap_bytes)}`, "memory"),
      card("storage", fmtBytes(nd.storage_bytes), "data directory on disk", "storage"),
      card("commit latency", fmtSecs(nd.commit_p99_seconds), `p50 ${fmtSecs(nd.commit_p50_seconds)} · ${fmtRate(nd.commits_per_second)} commits/s`, "commit_p99"),
      card("publish ack", fmtSecs(nd.publish_ack_p99_seconds), `p50 ${fmtSecs(nd.publish_ack_p50_seconds)} (p99 over 10 s)`, "ack_p99"),
      card("group acks", fmtNum(nd.group_acked), `${fmtRate(n.sample.group_acked_per_second)}/s · ${fmtNum(nd.group_delivered)} handed out`, "group_acked"),
    );
  } else {
    cards.push(card("scope", `tenant ${n.tenant}`, "the node's own figures are shown only without authentication", "scope"));
  }
  const charts = h("div", { class: "charts", id: "charts" });
  const [top, lag] = await Promise.all([
    api("/api/v1/streams?sort=publish_rate&order=desc&limit=10"),
    api("/api/v1/groups?sort=lag&order=desc&limit=10").catch(() => null),
  ]);
  const parts = [
    h("h2", {}, "Node"), h("div", { class: "cards", id: "cards" }, cards), charts,
    h("div", { class: "two" },
      h("div", {}, h("h2", {}, "Busiest streams"),
        table(streamCols.slice(0, 1).concat(streamCols.filter((c) => ["tail", "publish_records_per_second", "delivered_bytes_per_second", "subscriptions"].includes(c.key))),
          top.rows, { id: "top-streams", rowAttrs: (r) => ({ "data-stream": r.name }) })),
      h("div", {}, h("h2", {}, "Groups by lag"),
        lag ? table(groupCols.filter((c) => ["stream", "group", "lag", "claims", "members"].includes(c.key)), lag.rows,
          { id: "top-groups", rowAttrs: (r) => ({ "data-group": `${r.stream}/${r.group}` }) })
          : h("p", { class: "muted" }, "These credentials do not see consumer groups."))),
  ];
  replaceView(...parts);
  renderCharts(charts);
}

async function viewStreams(q) {
  const limit = 50;
  const params = new URLSearchParams({ limit, offset: q.get("offset") || 0, sort: q.get("sort") || "name", order: q.get("order") || "asc" });
  if (q.get("q")) params.set("q", q.get("q"));
  const page = await api("/api/v1/streams?" + params);
  replaceView(
    h("h2", {}, "Streams"),
    h("div", { class: "toolbar" }, filterBox(q, "filter by name"), pager(page.total, q, limit)),
    table(streamCols, page.rows, { id: "streams", query: q, defaultSort: "name",
      rowAttrs: (r) => ({ "data-stream": r.name }), onrow: (r) => go(["stream", ...r.name.split("/")]) }),
  );
}

async function viewGroups(q) {
  const limit = 50;
  const params = new URLSearchParams({ limit, offset: q.get("offset") || 0, sort: q.get("sort") || "name", order: q.get("order") || "asc" });
  if (q.get("q")) params.set("q", q.get("q"));
  let page;
  try {
    page = await api("/api/v1/groups?" + params);
  } catch (e) {
    replaceView(h("h2", {}, "Consumer groups"), h("p", { class: "error" }, e.message));
    return;
  }
  replaceView(
    h("h2", {}, "Consumer groups"),
    h("p", { class: "muted" }, "Groups coordinated by this node (in a cluster, by the leader of their stream's shard 0). Lag is the records between the committed cursors and the shards' tails."),
    h("div", { class: "toolbar" }, filterBox(q, "filter by stream or group"), pager(page.total, q, limit)),
    table(groupCols, page.rows, { id: "groups", query: q, defaultSort: "name",
      rowAttrs: (r) => ({ "data-group": `${r.stream}/${r.group}` }), onrow: (r) => go(["group", ...r.stream.split("/"), r.group]) }),
  );
}

function dropsText(d) {
  const parts = [];
  if (d.count_bound) parts.push(`count bound ${fmtNum(d.count_bound)}`);
  if (d.byte_bound) parts.push(`byte bound ${fmtNum(d.byte_bound)}`);
  if (d.total_bound) parts.push(`node total ${fmtNum(d.total_bound)}`);
  if (d.drop_old_eviction) parts.push(`evicted ${fmtNum(d.drop_old_eviction)}`);
  if (d.lagged) parts.push(`lagged ${fmtNum(d.lagged)}`);
  if (d.overloaded) parts.push(`overloaded ${fmtNum(d.overloaded)}`);
  return parts.length ? parts.join(" · ") : "none";
}

function raftText(r) {
  if (!r) return "–";
  const lag = (r.lag || []).filter((l) => l.node !== r.leader).map((l) => `${l.node}: ${fmtNum(l.records)} rec`).join(", ");
  return `leader ${r.leader || "?"} · replicas ${r.replicas.join(",")}` + (lag ? ` · lag ${lag}` : "");
}

async function viewStream(parts) {
  const name = parts.slice(1, 4).join("/");
  const s = await api(`/api/v1/streams/${streamPath(name)}`);
  const c = s.config;
  const row = s.row || {};
  const cfg = h("div", { class: "kv" }, [
    ["shards", c.shards], ["durable", c.durable ? "yes" : "no (in memory)"], ["replicas", c.replicas], ["routing", c.routing],
    ["overflow policy", c.overflow], ["queue capacity", c.queue_capacity || "node default"],
    ["queue max bytes", c.queue_max_bytes ? fmtBytes(c.queue_max_bytes) : "node default"],
    ["retention", [c.retention_age_ms ? fmtDuration(c.retention_age_ms / 1000) : "", c.retention_bytes ? fmtBytes(c.retention_bytes) + "/shard" : ""].filter(Boolean).join(", ") || "forever"],
    ["publish", `${fmtRate(row.publish_records_per_second)} rec/s · ${fmtBytes(row.publish_bytes_per_second)}/s`],
    ["stored", fmtBytes(row.stored_bytes)],
  ].map(([k, v]) => [h("div", { class: "k" }, k), h("div", {}, v)]));
  const shardCols = [
    { key: "shard", label: "shard", cell: (r) => h("a", { href: `#/stream/${streamPath(name)}/shard/${r.shard}` }, String(r.shard)) },
    { key: "tail", label: "tail", num: true },
    { key: "first", label: "retention floor", num: true },
    { key: "pending", label: "pending", num: true },
    { key: "ring_batches", label: "ring batches", num: true },
    { key: "ring_bytes", label: "ring", num: true, cell: (r) => fmtBytes(r.ring_bytes) },
    { key: "subscriptions", label: "subs", num: true, cell: (r) => `${fmtNum(r.subscriptions)} (${fmtNum(r.live)} live, ${fmtNum(r.reading)} reading)` },
    { key: "blocked", label: "state", cell: (r) => !r.answered ? h("span", { class: "tag bad" }, "no answer") : r.blocked ? h("span", { class: "tag warn" }, `blocked · ${r.held} held`) : h("span", { class: "tag good" }, "ok") },
    { key: "drops", label: `drops (${c.overflow})`, cell: (r) => dropsText(r.drops), value: (r) => Object.values(r.drops).reduce((a, b) => a + b, 0) },
    { key: "raft", label: "replication", cell: (r) => raftText(r.raft) },
  ];
  const groups = s.groups || [];
  replaceView(
    crumbs({ label: "Streams", href: "#/streams" }, { label: s.name }),
    h("h2", {}, s.name),
    cfg,
    h("h3", {}, "Shards"),
    table(shardCols, s.shards, { id: "shards", onrow: (r) => go(["stream", ...name.split("/"), "shard", String(r.shard)]) }),
    h("h3", {}, "Consumer groups"),
    groups.length ? table(groupCols.slice(1), groups, { id: "stream-groups", rowAttrs: (r) => ({ "data-group": `${r.stream}/${r.group}` }),
      onrow: (r) => go(["group", ...r.stream.split("/"), r.group]) }) : h("p", { class: "muted" }, "none coordinated here"),
  );
}

async function viewShard(parts, q) {
  const name = parts.slice(1, 4).join("/");
  const shard = parts[5];
  const limit = 50;
  const order = q.get("sort") === "id" ? "id" : "fill";
  const page = await api(`/api/v1/streams/${streamPath(name)}/shards/${enc(shard)}/subscriptions?sort=${order}&limit=${limit}&offset=${q.get("offset") || 0}`);
  const cols = [
    { key: "client", label: "client", cell: (r) => h("span", { title: r.id }, r.client || r.id) },
    { key: "principal", label: "credentials" },
    { key: "next", label: "next offset", num: true },
    { key: "state", label: "state", cell: (r) => h("span", { class: "tag" + (r.reading ? " warn" : r.live ? " good" : "") }, r.reading ? "reading history" : r.live ? "live" : "catching up") },
    { key: "fill", label: "queue (entries)", cell: (r) => bar(r.in_entries / Math.max(r.capacity, 1), `${fmtNum(r.in_entries)} / ${fmtNum(r.capacity)}`), value: (r) => r.in_entries },
    { key: "in_bytes", label: "queue (bytes)", cell: (r) => r.max_bytes ? bar(r.in_bytes / r.max_bytes, `${fmtBytes(r.in_bytes)} / ${fmtBytes(r.max_bytes)}`) : fmtBytes(r.in_bytes), value: (r) => r.in_bytes },
    { key: "lane_bytes", label: "lane egress", cell: (r) => r.lane_share ? bar(r.lane_bytes / r.lane_share, `${fmtBytes(r.lane_bytes)} / ${fmtBytes(r.lane_share)}`) : `${fmtBytes(r.lane_bytes)} (${fmtNum(r.lane_entries)})`, value: (r) => r.lane_bytes },
    { key: "delivered_batches", label: "delivered", num: true, cell: (r) => `${fmtNum(r.delivered_batches)} · ${fmtBytes(r.delivered_bytes)}` },
    { key: "drops", label: "evicted / skipped", num: true, cell: (r) => `${fmtNum(r.evicted)} / ${fmtNum(r.skipped)}`, value: (r) => r.evicted + r.skipped },
  ];
  replaceView(
    crumbs({ label: "Streams", href: "#/streams" }, { label: name, href: `#/stream/${streamPath(name)}` }, { label: `shard ${shard}` }),
    h("h2", {}, `${name} · shard ${shard}`),
    h("p", { class: "muted" }, `${plural(page.total, "subscription")} (${fmtNum(page.live)} live, ${fmtNum(page.reading)} reading history). ` +
      "Queue: batches pushed and not yet returned as credit, against the subscriber's bounds. Lane: handed to its QUIC stream, not yet written, against its share of the connection's egress bound."),
    h("div", { class: "toolbar" },
      h("label", {}, "order ", h("select", { onchange: (e) => setQuery({ sort: e.target.value, offset: "" }) },
        h("option", { value: "fill", selected: order === "fill" }, "fullest queue first"),
        h("option", { value: "id", selected: order === "id" }, "by id"))),
      pager(page.total, q, limit)),
    table(cols, page.rows, { id: "subscriptions" }),
  );
}

async function viewGroup(parts) {
  const name = parts.slice(1, 4).join("/");
  const group = parts[4];
  let g;
  try {
    g = await api(`/api/v1/groups/${streamPath(name)}/${enc(group)}`);
  } catch (e) {
    replaceView(crumbs({ label: "Groups", href: "#/groups" }, { label: `${name} · ${group}` }), h("p", { class: "error" }, e.message));
    return;
  }
  const row = g.row || {};
  const shardCols = [
    { key: "shard", label: "shard" },
    { key: "committed", label: "committed", num: true },
    { key: "delivered", label: "delivered up to", num: true },
    { key: "tail", label: "tail", num: true },
    { key: "lag", label: "lag", num: true },
    { key: "claims", label: "claims in flight", num: true },
    { key: "owed", label: "owed redelivery", num: true },
    { key: "dead_letters", label: "dead letters", num: true },
  ];
  const memberCols = [
    { key: "id", label: "member" },
    { key: "shards", label: "assigned shards", cell: (r) => (r.shards || []).join(", ") || "none", value: (r) => (r.shards || []).join(",") },
    { key: "in_flight", label: "in flight / window", cell: (r) => bar(r.in_flight / Math.max(r.window, 1), `${fmtNum(r.in_flight)} / ${fmtNum(r.window)}`), value: (r) => r.in_flight },
    { key: "idle_seconds", label: "since last heartbeat", num: true, cell: (r) => bar(r.idle_seconds / Math.max(r.session_seconds, 1), `${r.idle_seconds.toFixed(1)} s`), value: (r) => r.idle_seconds },
  ];
  replaceView(
    crumbs({ label: "Groups", href: "#/groups" }, { label: name, href: `#/stream/${streamPath(name)}` }, { label: group }),
    h("h2", {}, `${name} · group ${group}`),
    h("div", { class: "cards" },
      card("lag", fmtNum(g.lag), "records behind the tails", "group_lag"),
      card("claims in flight", fmtNum(g.claims), null, "group_claims"),
      card("members", fmtNum(g.members.length), `generation ${g.generation}`, "group_members"),
      card("redelivered", fmtNum(row.redelivered), "visibility lapsed, since the coordinator started", "group_redelivered"),
      card("dead letters", fmtNum(row.dead_letters), `${fmtNum(row.dead_lettered)} dead-lettered · max attempts ${g.max_attempts}`, "group_dead")),
    h("h3", {}, "Shards"),
    table(shardCols, g.shards, { id: "group-shards" }),
    h("h3", {}, "Push members"),
    g.members.length ? table(memberCols, g.members, { id: "members" }) : h("p", { class: "muted" }, "no push members (polling consumers are not members)"),
  );
}

async function viewCluster(q) {
  const limit = 50;
  const c = await api(`/api/v1/cluster?limit=${limit}&offset=${q.get("offset") || 0}` + (q.get("q") ? `&q=${enc(q.get("q"))}` : ""));
  if (!c.enabled) {
    replaceView(h("h2", {}, "Cluster"), h("p", { class: "muted" }, "This node runs alone (no peers)."));
    return;
  }
  const nodeCols = [
    { key: "id", label: "node", cell: (r) => `${r.id}${r.self ? " (this node)" : ""}` },
    { key: "addr", label: "peer address" },
    { key: "up", label: "link", cell: (r) => r.up === undefined ? "–" : h("span", { class: "tag " + (r.up ? "good" : "bad") }, r.up ? "up" : "down"), value: (r) => r.up },
    { key: "leading", label: "leads (listed shards)", num: true },
    { key: "last_error", label: "last error" },
  ];
  const shardCols = [
    { key: "stream", label: "stream", cell: (r) => h("a", { href: `#/stream/${streamPath(r.stream)}` }, r.stream) },
    { key: "shard", label: "shard", num: true },
    { key: "leader", label: "leader", num: true, cell: (r) => r.raft ? String(r.raft.leader || "none") : "–", value: (r) => r.raft && r.raft.leader },
    { key: "replicas", label: "replicas", cell: (r) => r.raft ? r.raft.replicas.join(", ") : "–" },
    { key: "term", label: "term", num: true, cell: (r) => r.raft ? fmtNum(r.raft.term) : "–" },
    { key: "tail", label: "tail", num: true },
    { key: "lag", label: "replication lag", cell: (r) => r.raft && r.raft.lag ? r.raft.lag.filter((l) => l.node !== r.raft.leader).map((l) => `${l.node}: ${fmtNum(l.entries)} entries, ${fmtNum(l.records)} rec`).join(" · ") || "caught up" : (r.raft && r.raft.leader ? `on node ${r.raft.leader}'s dashboard (its leader)` : "no leader now") },
  ];
  replaceView(
    h("h2", {}, `Cluster · this is node ${c.node_id}`),
    table(nodeCols, c.nodes, { id: "nodes" }),
    h("h2", {}, "Replicated shards"),
    h("div", { class: "toolbar" }, filterBox(q, "filter by stream"), pager(c.shards.total, q, limit)),
    table(shardCols, c.shards.rows, { id: "cluster-shards" }),
  );
}

// ---- refresh loop ----

async function render() {
  const r = parseRoute();
  const [view] = r.parts;
  for (const a of document.querySelectorAll("#tabs a")) {
    const tab = a.dataset.tab;
    a.classList.toggle("active", (view || "overview") === tab || (tab === "streams" && view === "stream") || (tab === "groups" && view === "group"));
  }
  if (!state.node) return;
  switch (view) {
    case undefined: return viewOverview();
    case "streams": return viewStreams(r.query);
    case "stream": return r.parts[4] === "shard" ? viewShard(r.parts, r.query) : viewStream(r.parts);
    case "groups": return viewGroups(r.query);
    case "group": return viewGroup(r.parts);
    case "cluster": return viewCluster(r.query);
    default: replaceView(h("p", { class: "error" }, "unknown view"));
  }
}

// refresh re-renders the view, one fetch at a time: an event that comes
// while a fetch runs asks for one more round after it.
async function refresh() {
  if (state.fetching) { state.again = true; return; }
  state.fetching = true;
  try {
    await render();
  } catch (e) {
    if (e.status === 401) return showLogin();
    replaceView(h("p", { class: "error" }, e.message));
  } finally {
    state.fetching = false;
    if (state.again) { state.again = false; refresh(); }
  }
}

function onNode(n) {
  state.node = n;
  appendSample(n.sample);
  renderHeader();
  const charts = $("#charts");
  if (charts) renderCharts(charts);
  refresh();
}

function connect() {
  if (state.events) state.events.close();
  const es = new EventSource("/api/v1/events");
  state.events = es;
  es.addEventListener("open", () => setLive(true, "live"));
  es.addEventListener("node", (e) => onNode(JSON.parse(e.data)));
  es.addEventListener("error", async () => {
    setLive(false, "reconnecting…");
    try {
      await api("/api/v1/whoami");
    } catch (err) {
      if (err.status === 401) { es.close(); showLogin(); return; }
    }
    // A refusal (the node serves a bounded number of event streams) closes
    // the source for good: poll the node view each second instead, and try
    // the stream again after a while.
    if (es.readyState === EventSource.CLOSED && state.events === es) pollThenReconnect(es);
  });
}

function pollThenReconnect(es) {
  setLive(false, "polling");
  let ticks = 0;
  const timer = setInterval(async () => {
    if (state.events !== es) { clearInterval(timer); return; }
    if (++ticks >= 30) { clearInterval(timer); connect(); return; }
    try { onNode(await api("/api/v1/node")); } catch { /* the next tick tries again */ }
  }, 1000);
}

async function start() {
  try {
    state.who = await api("/api/v1/whoami");
  } catch (e) {
    if (e.status === 401) return showLogin(e.message);
    replaceView(h("p", { class: "error" }, e.message));
    return;
  }
  renderWho();
  const n = await api("/api/v1/node?series=1");
  state.series = n.series;
  delete n.series;
  state.node = n;
  renderHeader();
  await refresh();
  connect();
}

function showLogin(message) {
  if (state.events) { state.events.close(); state.events = null; }
  setLive(false, "not logged in");
  state.node = null;
  const form = $("#login-template").content.firstElementChild.cloneNode(true);
  if (message) $("#login-error", form).textContent = message;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api("/api/v1/login", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token: $("#token", form).value }) });
      start();
    } catch (err) {
      $("#login-error", form).textContent = err.message;
    }
  });
  replaceView(form);
}

async function logout() {
  await api("/api/v1/logout", { method: "POST", headers: { "Content-Type": "application/json" } }).catch(() => {});
  state.who = null;
  renderWho();
  showLogin();
}

window.addEventListener("hashchange", refresh);
start();
