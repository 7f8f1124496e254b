/// The web console served at `GET /`: one HTML page, its CSS and JS inline, nothing fetched from
/// anywhere but this gateway's own v1 API (a field engineer's phone next to the box has no
/// internet). Live over two server-sent-event streams (`/v1/changes?feed=sse`, `/v1/events`),
/// read with `fetch` rather than `EventSource` so a bearer token can ride along when the API is
/// reached over a non-loopback address (EventSource cannot send headers).
///
/// What a reader would get wrong: the page holds no data and no secret; everything it shows
/// comes from the API calls it makes, so the API's rules (token, limits) are the console's.
/// Stable hooks for tests: `#state`, `#led` (`data-pattern`, `data-lit`), `#sync`,
/// `#mesh svg`, `#peers tbody tr[data-peer]`, `#docs [data-id]` (the list's rows), `#doc-view` (`data-open`), `#conflicts li`,
/// `#events li`, `#live` (`data-state` = live | connecting | offline).
enum ConsolePage {
    static let contentType = "text/html; charset=utf-8"

    static let html: String = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Shoal gateway</title>
<style>
:root{--fg:#1f2328;--mut:#57606a;--bg:#f6f8fa;--card:#fff;--line:#d0d7de;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--acc:#0969da}
*{box-sizing:border-box}
body{margin:0;font:16px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;flex-wrap:wrap;align-items:center;gap:12px 20px;padding:12px 16px;background:var(--card);border-bottom:1px solid var(--line);position:sticky;top:0;z-index:2}
h1{font-size:20px;margin:0}
h2{font-size:17px;margin:0 0 10px}
main{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:12px;padding:12px;max-width:1400px;margin:0 auto}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px;min-width:0}
section.wide{grid-column:1/-1}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.mut{color:var(--mut)}
.pill{display:inline-block;padding:2px 10px;border-radius:999px;font-weight:600;background:#eaeef2}
.pill.running,.pill.online,.pill.live{background:#dafbe1;color:var(--ok)}
.pill.booting,.pill.connecting,.pill.stopping{background:#fff8c5;color:var(--warn)}
.pill.degraded,.pill.failed,.pill.offline{background:#ffebe9;color:var(--bad)}
#state{font-size:20px}
.led{display:flex;align-items:center;gap:8px}
#led{width:28px;height:28px;border-radius:50%;background:#30363d;border:2px solid #8c959f;box-shadow:none;transition:none}
#led[data-lit="1"]{background:#2da44e;box-shadow:0 0 14px 4px #4ac26b}
#led-sketch{display:flex;gap:1px;height:10px}
#led-sketch i{width:4px;background:#d0d7de}
#led-sketch i.on{background:#2da44e}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:4px 12px;margin:0}
dl.kv dt{color:var(--mut)}
dl.kv dd{margin:0;overflow-wrap:anywhere}
#sync[hidden]{display:none}
progress{width:100%;height:18px}
#mesh svg{width:100%;height:auto;max-height:70vh;display:block}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:15px}
th,td{text-align:left;padding:8px 6px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--mut);font-weight:600}
button,select,input,textarea{font:inherit}
button,select{min-height:44px;padding:6px 14px;border:1px solid var(--line);border-radius:6px;background:#f6f8fa;cursor:pointer}
button.primary{background:var(--acc);color:#fff;border-color:var(--acc)}
button.danger{color:var(--bad)}
button.danger.armed{background:var(--bad);color:#fff}
.row{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin-bottom:8px}
ul.list{list-style:none;margin:0;padding:0;max-height:420px;overflow:auto;border:1px solid var(--line);border-radius:6px}
ul.list li{border-bottom:1px solid var(--line)}
ul.list li:last-child{border-bottom:0}
#doc-list li{display:flex;justify-content:space-between;gap:8px;padding:0 10px;min-height:44px;align-items:center;cursor:pointer}
#doc-list li.sel{background:#ddf4ff}
#doc-list li.fresh{animation:fresh 1.5s}
@keyframes fresh{from{background:#fff8c5}to{background:transparent}}
#events li,#conflicts li{padding:6px 10px;font-size:14px}
pre.json{margin:0;padding:10px;background:var(--bg);border-radius:6px;overflow:auto;max-height:360px;font-size:14px}
.j-k{color:#0550ae}.j-s{color:#0a3069}.j-n{color:#953800}.j-b{color:#8250df}.j-z{color:#6e7781}
textarea{width:100%;min-height:220px;padding:8px;border:1px solid var(--line);border-radius:6px;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:14px}
input{min-height:44px;padding:6px 10px;border:1px solid var(--line);border-radius:6px;min-width:0;flex:1}
#msg{min-height:1.4em}
#msg.err{color:var(--bad)}
#token-box[hidden]{display:none}
@media (max-width:860px){main{grid-template-columns:minmax(0,1fr)}}
@media (max-width:600px){main{padding:8px}header{padding:10px;position:static}.hide-s{display:none}#led-sketch{display:none}}
</style>
</head>
<body>
<header>
  <h1>Shoal <span id="gw-id" class="mono mut"></span></h1>
  <span id="state" class="pill" data-state="">…</span>
  <span class="led" title="status LED"><span id="led" data-pattern="" data-lit="0"></span><span id="led-sketch"></span><span id="led-name" class="mut"></span></span>
  <span id="live" class="pill connecting" data-state="connecting">connecting</span>
</header>
<div id="token-box" class="row" style="padding:8px 16px" hidden>
  <span>This address needs the gateway's API token (<span class="mono">shoal http token</span>):</span>
  <input id="token" type="password" autocomplete="off" placeholder="token"><button id="token-save" class="primary">Use token</button>
</div>
<main>
<section id="gateway">
  <h2>Gateway</h2>
  <dl class="kv" id="facts"></dl>
  <div id="sync" hidden>
    <h2 style="margin-top:12px">Initial sync</h2>
    <progress id="sync-bar" max="1" value="0"></progress>
    <div id="sync-text" class="mut"></div>
  </div>
</section>
<section id="mesh-card">
  <h2>Mesh</h2>
  <div id="mesh"></div>
</section>
<section id="peers-card" class="wide">
  <h2>Peers <span id="peer-count" class="mut"></span></h2>
  <div class="scroll"><table id="peers">
    <thead><tr><th>Peer</th><th>Status</th><th>Link</th><th>Activity</th><th class="hide-s">Address</th><th>Sync</th><th class="hide-s">Last error</th></tr></thead>
    <tbody></tbody>
  </table></div>
</section>
<section id="docs" class="wide">
  <h2>Documents</h2>
  <div class="row">
    <select id="collection" aria-label="collection"></select>
    <button id="doc-new">New</button>
    <button id="doc-reload">Reload</button>
  </div>
  <div style="display:grid;grid-template-columns:repeat(auto-fit,minmax(280px,1fr));gap:12px">
    <div>
      <ul id="doc-list" class="list"></ul>
      <div class="row" style="margin-top:8px"><button id="doc-more" hidden>More</button><span id="doc-count" class="mut"></span></div>
    </div>
    <div id="doc-view" data-open="" hidden>
      <div class="row"><strong id="doc-title" class="mono" style="overflow-wrap:anywhere"></strong><span id="doc-meta" class="mut"></span></div>
      <input id="doc-id" placeholder="document id" hidden>
      <pre id="doc-json" class="json"></pre>
      <textarea id="doc-editor" spellcheck="false" hidden></textarea>
      <div class="row" style="margin-top:8px">
        <button id="doc-edit">Edit</button>
        <button id="doc-save" class="primary" hidden>Save</button>
        <button id="doc-cancel" hidden>Cancel</button>
        <button id="doc-delete" class="danger">Delete</button>
      </div>
      <div id="msg"></div>
    </div>
  </div>
</section>
<section id="conflicts-card">
  <h2>Conflicts <span id="conflict-count" class="mut"></span></h2>
  <ul id="conflicts" class="list"></ul>
</section>
<section id="events-card">
  <h2>Live events</h2>
  <ul id="events" class="list"></ul>
</section>
</main>
<script>
"use strict";
const $ = s => document.querySelector(s);
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
};
const short = id => (id || "").slice(0, 8);
const sleep = ms => new Promise(r => setTimeout(r, ms));
const S = {token: localStorage.getItem("shoal.token") || "", collection: "", docs: new Map(), more: false,
           open: null, editing: false, creating: false, lastSeq: 0, streams: {}, status: null};

// ---- API ----
function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (S.token) h["Authorization"] = "Bearer " + S.token;
  return h;
}
async function api(path, opts) {
  opts = opts || {};
  const r = await fetch(path, {method: opts.method || "GET", headers: headers(opts.headers), body: opts.body, cache: "no-store"});
  if (r.status === 401) { askToken(); throw new Error("the API needs a token"); }
  return r;
}
async function json(path) {
  const r = await api(path);
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await reason(r)));
  return r.json();
}
async function reason(r) { try { const j = await r.json(); return j.reason || j.error || ""; } catch (e) { return ""; } }
function askToken() { $("#token-box").hidden = false; }
$("#token-save").addEventListener("click", () => {
  S.token = $("#token").value.trim(); localStorage.setItem("shoal.token", S.token);
  $("#token-box").hidden = true; refreshAll(); });

// Debounced refreshers: a burst of events costs one fetch each.
function debounce(fn, ms) { let t = null; return () => { if (t) return; t = setTimeout(() => { t = null; fn().catch(e => console.warn(e)); }, ms); }; }
const soon = {status: debounce(loadStatus, 250), peers: debounce(loadPeers, 250), mesh: debounce(loadMesh, 250),
              collections: debounce(loadCollections, 500), conflicts: debounce(loadConflicts, 500)};

// ---- Server-sent events over fetch (headers allowed), resumed with Last-Event-ID ----
async function stream(name, url, onEvent) {
  let last = null, wait = 500;
  for (;;) {
    try {
      const h = {"Accept": "text/event-stream"};
      if (last !== null) h["Last-Event-ID"] = last;
      const r = await api(url, {headers: h});
      if (!r.ok || !r.body) throw new Error(url + ": " + r.status);
      S.streams[name] = true; showLive(); wait = 500;
      const reader = r.body.getReader(), dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += dec.decode(value, {stream: true}).replace(/\r\n?/g, "\n");
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i); buf = buf.slice(i + 2);
          let id = null, type = "message", data = [];
          for (const line of block.split("\n")) {
            if (line === "" || line[0] === ":") continue;
            const c = line.indexOf(":"), f = c < 0 ? line : line.slice(0, c);
            let v = c < 0 ? "" : line.slice(c + 1); if (v[0] === " ") v = v.slice(1);
            if (f === "id") id = v; else if (f === "event") type = v; else if (f === "data") data.push(v);
          }
          if (id !== null) last = id;
          if (data.length) { try { onEvent(type, JSON.parse(data.join("\n")), id); } catch (e) { console.warn(name, e); } }
        }
      }
    } catch (e) { console.warn(name, e.message); }
    S.streams[name] = false; showLive();
    await sleep(wait); wait = Math.min(wait * 2, 10000);
    soon.status(); soon.peers(); soon.mesh();
  }
}
function showLive() {
  const names = Object.keys(S.streams), up = names.filter(n => S.streams[n]).length;
  const state = names.length && up === names.length ? "live" : up ? "connecting" : "offline";
  const l = $("#live"); l.dataset.state = state; l.className = "pill " + state;
  l.textContent = state === "live" ? "live" : state === "connecting" ? "connecting…" : "offline";
}

// ---- Status and the LED ----
function ledSteps(name) {
  // The pattern's name (status `led`) says its steps: see LEDPattern.swift.
  if (!name) return [];
  let m;
  const blinks = (n, on, off, pause) => { const s = []; for (let i = 0; i < n; i++) s.push([1, on], [0, i === n - 1 ? pause : off]); return s; };
  if (name.startsWith("dead")) return [[1, 1000]];
  if ((m = /error: (\d+) long/.exec(name))) return blinks(+m[1], 600, 300, 1800);
  if (name.startsWith("booting")) return blinks(1, 100, 0, 100);
  if (name.startsWith("syncing")) return blinks(1, 50, 0, 50);
  if ((m = /connected: (\d+)/.exec(name))) return blinks(Math.min(Math.max(+m[1], 1), 5), 200, 300, 1500);
  if (name.startsWith("discovering")) return blinks(1, 100, 0, 1900);
  return [];
}
const led = {steps: [], period: 0, start: 0};
function setLED(name) {
  const e = $("#led");
  if (e.dataset.pattern === (name || "")) return;
  e.dataset.pattern = name || "";
  led.steps = ledSteps(name); led.period = led.steps.reduce((a, s) => a + s[1], 0); led.start = performance.now();
  $("#led-name").textContent = name || "no LED pattern";
  const sk = $("#led-sketch"); sk.textContent = "";
  for (let t = 0; led.period && t < led.period && t < 4000; t += 100) sk.append(el("i", {class: ledOn(t) ? "on" : ""}));
}
function ledOn(t) {
  if (!led.period) return false;
  let x = t % led.period;
  for (const [on, ms] of led.steps) { if (x < ms) return on === 1; x -= ms; }
  return false;
}
function ledTick(now) {
  const lit = ledOn(now - led.start) ? "1" : "0", e = $("#led");
  if (e.dataset.lit !== lit) e.dataset.lit = lit;
  requestAnimationFrame(ledTick);
}
requestAnimationFrame(ledTick);

function duration(s) {
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor(s % 86400 / 3600) + " h";
}
async function loadStatus() {
  const s = await json("/v1/status");
  S.status = s;
  const st = $("#state"); st.textContent = s.state; st.dataset.state = s.state; st.className = "pill " + s.state;
  $("#gw-id").textContent = short(s.peerID);
  $("#gw-id").title = s.peerID || "";
  setLED(s.led);
  const tree = s.supervision || [], bad = tree.filter(c => c.state !== "running" && c.state !== "stopped");
  const transports = Object.entries(s.transports || {}).map(([n, t]) => n + " " + (t.active ? "active" : "inactive") + (t.error ? " (" + t.error + ")" : "")).join(", ");
  const facts = [
    ["board", s.board ? s.board.id + " — " + s.board.name : "?"], ["version", s.version], ["up", duration(s.uptimeSeconds || 0)],
    ["group", s.group], ["mesh", (s.mesh ? s.mesh.state + ", " + s.mesh.connectedPeers + " connected" : "?")],
    ["transports", transports || "none"],
    ["documents", s.store ? s.store.documents + " live, " + s.store.tombstones + " deleted, sequence " + s.store.lastSequence : "?"],
    ["store", s.store ? s.store.durability + " — " + s.store.path : "?"],
    ["http", (s.http || []).join(", ") || "—"],
    ["supervision", (tree.length - bad.length) + "/" + tree.length + " healthy" + (bad.length ? ": " + bad.map(c => c.path + " " + c.state).join(", ") : "")],
  ];
  if (s.identity && s.identity.problem) facts.push(["identity", "PROBLEM: " + s.identity.problem]);
  if (s.clockSkewPeers && s.clockSkewPeers.length) facts.push(["clock skew", s.clockSkewPeers.map(short).join(", ")]);
  const dl = $("#facts"); dl.textContent = "";
  for (const [k, v] of facts) dl.append(el("dt", {}, k), el("dd", {"data-fact": k}, v));
  const sy = s.sync, box = $("#sync");
  box.hidden = !sy;
  if (sy) {
    const bar = $("#sync-bar"); bar.max = Math.max(sy.announced, 1); bar.value = sy.received;
    $("#sync-text").textContent = sy.received + " / " + sy.announced + (sy.moreMayCome ? "+" : "") + " documents"
      + (sy.perSecond ? ", " + sy.perSecond + "/s" : "") + (sy.estimateSeconds ? ", about " + duration(sy.estimateSeconds) + " left" : "");
  }
  return s;
}

// ---- Mesh and peers ----
async function loadMesh() {
  const r = await api("/v1/mesh?format=svg");
  if (!r.ok) throw new Error("mesh: " + r.status);
  const doc = new DOMParser().parseFromString(await r.text(), "image/svg+xml");
  const svg = doc.documentElement;
  if (svg.nodeName !== "svg") throw new Error("mesh: not an SVG picture");
  $("#mesh").replaceChildren(document.importNode(svg, true));
}
async function loadPeers() {
  const {peers} = await json("/v1/peers");
  const tb = $("#peers tbody"); tb.textContent = "";
  $("#peer-count").textContent = "(" + peers.filter(p => p.connectedOn).length + " linked of " + peers.length + ")";
  for (const p of peers.sort((a, b) => a.peer < b.peer ? -1 : 1)) {
    const sync = p.sync ? p.sync.received + "/" + p.sync.announced + (p.sync.moreMayCome ? "+" : "") : "—";
    tb.append(el("tr", {"data-peer": p.peer, "data-online": p.online ? "1" : "0", "data-link": p.connectedOn || ""},
      el("td", {class: "mono", title: p.peer}, short(p.peer)),
      el("td", {}, el("span", {class: "pill " + (p.online ? "online" : "offline")}, p.online ? "online" : "offline")),
      el("td", {}, p.connectedOn ? p.connectedOn + (p.direction ? " " + (p.direction === "outgoing" ? "out" : "in") : "") : "—"),
      el("td", {}, p.activity || ""),
      el("td", {class: "mono hide-s"}, p.address || "—"),
      el("td", {}, sync),
      el("td", {class: "hide-s"}, p.lastError || "")));
  }
}

// ---- Documents ----
const enc = encodeURIComponent;
const docPath = (c, id) => "/v1/collections/" + enc(c) + "/docs" + (id === undefined ? "" : "/" + enc(id));
async function loadCollections() {
  const {collections} = await json("/v1/collections");
  const sel = $("#collection"), want = S.collection || new URLSearchParams(location.hash.slice(1)).get("collection");
  // Same collections: only the counts change (rebuilding would close a picker open on a phone).
  const same = sel.options.length === collections.length && collections.every((c, i) => sel.options[i].value === c.name);
  if (!same) sel.textContent = "";
  collections.forEach((c, i) => {
    const text = c.name + " (" + c.documents + ")";
    if (same) sel.options[i].textContent = text; else sel.append(el("option", {value: c.name}, text));
  });
  const pick = collections.find(c => c.name === want) || collections.find(c => c.documents > 0 && !c.name.startsWith("_default.")) || collections[0];
  if (pick) sel.value = pick.name;
  if (pick && pick.name !== S.collection) { S.collection = pick.name; await loadDocs(); }
}
function docRow(d) {
  return el("li", {"data-id": d.id, "data-revision": d.revision, class: S.open === d.id ? "sel" : "", onclick: () => openDoc(d.id)},
    el("span", {class: "mono", style: "overflow-wrap:anywhere"}, d.id), el("span", {class: "mut"}, "rev " + d.revision));
}
function placeDoc(d, fresh) {
  const ul = $("#doc-list"), old = ul.querySelector('li[data-id="' + CSS.escape(d.id) + '"]');
  if (d.deleted) { if (old) old.remove(); S.docs.delete(d.id); countDocs(); return; }
  S.docs.set(d.id, d);
  const row = docRow(d); if (fresh) row.classList.add("fresh");
  if (old) { old.replaceWith(row); return; }
  const next = [...ul.children].find(li => li.dataset.id > d.id);
  ul.insertBefore(row, next || null);
  countDocs();
}
async function loadDocs(after) {
  if (!S.collection) return;
  const page = await json(docPath(S.collection) + "?limit=100" + (after ? "&after=" + enc(after) : ""));
  if (!after) { $("#doc-list").textContent = ""; S.docs.clear(); }
  for (const d of page.documents) placeDoc(d, false);
  S.more = page.more; S.lastLoaded = page.documents.length ? page.documents[page.documents.length - 1].id : after;
  $("#doc-more").hidden = !page.more;
  countDocs();
}
function countDocs() { $("#doc-count").textContent = S.docs.size + (S.more ? "+" : "") + " shown"; }
$("#collection").addEventListener("change", e => { S.collection = e.target.value; closeDoc(); loadDocs().catch(say); });
$("#doc-more").addEventListener("click", () => loadDocs(S.lastLoaded).catch(say));
$("#doc-reload").addEventListener("click", () => { loadCollections().catch(say); loadDocs().catch(say); });

function jsonHTML(v, ind) {
  // A small viewer: indented, coloured by kind; every text goes in as a text node.
  ind = ind || "";
  const sp = (c, t) => el("span", {class: c}, t), f = document.createDocumentFragment();
  if (v === null) f.append(sp("j-z", "null"));
  else if (Array.isArray(v)) {
    if (!v.length) f.append("[]"); else {
      f.append("[\n");
      v.forEach((x, i) => { f.append(ind + "  ", jsonHTML(x, ind + "  "), i < v.length - 1 ? ",\n" : "\n"); });
      f.append(ind + "]");
    }
  } else if (typeof v === "object") {
    const ks = Object.keys(v);
    if (!ks.length) f.append("{}"); else {
      f.append("{\n");
      ks.forEach((k, i) => { f.append(ind + "  ", sp("j-k", JSON.stringify(k)), ": ", jsonHTML(v[k], ind + "  "), i < ks.length - 1 ? ",\n" : "\n"); });
      f.append(ind + "}");
    }
  } else f.append(sp(typeof v === "string" ? "j-s" : typeof v === "number" ? "j-n" : "j-b", JSON.stringify(v)));
  return f;
}
function say(e, ok) { const m = $("#msg"); m.textContent = e ? (e.message || String(e)) : ""; m.className = ok ? "" : "err"; }
function editMode(on) {
  S.editing = on;
  $("#doc-editor").hidden = !on; $("#doc-json").hidden = on;
  $("#doc-save").hidden = !on; $("#doc-cancel").hidden = !on; $("#doc-edit").hidden = on;
  $("#doc-delete").hidden = on || S.creating; $("#doc-id").hidden = !S.creating;
}
async function openDoc(id) {
  S.creating = false;
  const r = await api(docPath(S.collection, id));
  const v = $("#doc-view"); v.hidden = false;
  if (!r.ok) { say(new Error(id + ": " + r.status + " " + await reason(r))); return; }
  const body = await r.json(), etag = r.headers.get("ETag") || "";
  S.open = id; S.openETag = etag; S.openBody = body;
  v.dataset.open = id; v.dataset.etag = etag;
  for (const li of document.querySelectorAll("#doc-list li")) li.classList.toggle("sel", li.dataset.id === id);
  $("#doc-title").textContent = id;
  $("#doc-meta").textContent = "rev " + etag.replace(/"/g, "") + (r.headers.get("X-Shoal-Sequence") ? ", seq " + r.headers.get("X-Shoal-Sequence") : "");
  $("#doc-json").replaceChildren(jsonHTML(body));
  $("#doc-editor").value = JSON.stringify(body, null, 2);
  editMode(false); say(null);
  disarm();
}
function closeDoc() { S.open = null; $("#doc-view").hidden = true; $("#doc-view").dataset.open = ""; }
$("#doc-edit").addEventListener("click", () => editMode(true));
$("#doc-cancel").addEventListener("click", () => {
  // Back to the gateway's version (it may have changed while the editor was open).
  if (S.creating) { S.creating = false; closeDoc(); } else openDoc(S.open).catch(say);
});
$("#doc-new").addEventListener("click", () => {
  S.creating = true; S.open = null; const v = $("#doc-view"); v.hidden = false; v.dataset.open = "";
  $("#doc-title").textContent = "new document in " + S.collection; $("#doc-meta").textContent = "";
  $("#doc-id").value = ""; $("#doc-editor").value = "{\n  \n}"; editMode(true); say(null);
});
$("#doc-save").addEventListener("click", async () => {
  let body;
  try { body = JSON.parse($("#doc-editor").value); } catch (e) { say(new Error("not JSON: " + e.message)); return; }
  if (!body || typeof body !== "object" || Array.isArray(body)) { say(new Error("a document is a JSON object")); return; }
  const id = S.creating ? $("#doc-id").value.trim() : S.open;
  if (!id) { say(new Error("give the document an id")); return; }
  const h = {"Content-Type": "application/json"};
  if (S.creating) h["If-None-Match"] = "*"; else if (S.openETag) h["If-Match"] = S.openETag;
  const r = await api(docPath(S.collection, id), {method: "PUT", headers: h, body: JSON.stringify(body)});
  if (r.status === 412) { say(new Error(S.creating ? id + " exists already" : "changed on the gateway meanwhile: reload it and edit again")); return; }
  if (!r.ok) { say(new Error("not saved: " + r.status + " " + await reason(r))); return; }
  const w = await r.json();
  S.creating = false;
  placeDoc({id: w.id, revision: w.revision, deleted: false}, true);
  await openDoc(w.id); say(new Error("saved, revision " + w.revision), true);
});
let armed = null;
function disarm() { const b = $("#doc-delete"); b.classList.remove("armed"); b.textContent = "Delete"; if (armed) clearTimeout(armed); armed = null; }
$("#doc-delete").addEventListener("click", async () => {
  // Two taps (no blocking confirm dialog): the first arms the button for 4 s.
  const b = $("#doc-delete");
  if (!armed) { b.classList.add("armed"); b.textContent = "Tap again to delete"; armed = setTimeout(disarm, 4000); return; }
  disarm();
  const id = S.open;
  const r = await api(docPath(S.collection, id), {method: "DELETE", headers: S.openETag ? {"If-Match": S.openETag} : {}});
  if (r.status === 412) { say(new Error("changed on the gateway meanwhile: not deleted")); return; }
  if (!r.ok) { say(new Error("not deleted: " + r.status + " " + await reason(r))); return; }
  placeDoc({id, deleted: true}); closeDoc();
});

function onChange(type, c) {
  if (c.sequence > S.lastSeq) S.lastSeq = c.sequence;
  if (c.collection === S.collection) placeDoc(c, true);
  if (c.collection === S.collection && c.id === S.open && !S.editing && !c.deleted && ("\"" + c.revision + "\"") !== S.openETag) openDoc(c.id).catch(say);
  if (c.collection === S.collection && c.id === S.open && c.deleted && !S.editing) closeDoc();
  soon.collections(); soon.status(); soon.conflicts();
}

// ---- Conflicts and events ----
async function loadConflicts() {
  const {conflicts, more} = await json("/v1/conflicts?limit=50");
  const ul = $("#conflicts"); ul.textContent = "";
  $("#conflict-count").textContent = conflicts.length ? "(" + conflicts.length + (more ? "+" : "") + ")" : "";
  if (!conflicts.length) ul.append(el("li", {class: "mut"}, "no conflicts"));
  for (const c of conflicts)
    ul.append(el("li", {"data-number": c.number}, el("span", {class: "mut"}, c.at + " "),
      el("span", {class: "mono"}, c.collection + "/" + c.id), " — " + c.resolver + ": " + c.outcome + " (peer " + short(c.peer) + ")"));
}
function eventText(e) {
  const p = e.peer ? short(e.peer) + " " : "";
  switch (e.type) {
    case "state": return "mesh " + e.state;
    case "transport": return e.transport + (e.active ? " active" : " inactive") + (e.error ? ": " + e.error : "");
    case "peerDiscovery": return p + (e.online ? "found" : "lost") + " on " + e.transport;
    case "peerReplicator": return p + e.activity + " " + e.direction + " on " + e.transport + (e.error ? ": " + e.error : "");
    default: return JSON.stringify(e);
  }
}
function addEvent(e) {
  const ul = $("#events"), t = e.atMillis ? new Date(e.atMillis).toLocaleTimeString() : "";
  ul.prepend(el("li", {"data-sequence": e.sequence, "data-type": e.type}, el("span", {class: "mut"}, t + " "), eventText(e)));
  while (ul.children.length > 100) ul.lastChild.remove();
}
function onEvent(type, e) {
  addEvent(e);
  soon.status(); soon.peers(); soon.mesh();
}

// ---- Start ----
async function refreshAll() {
  const s = await loadStatus().catch(e => { console.warn(e); return null; });
  await Promise.all([loadPeers(), loadMesh(), loadCollections(), loadConflicts()].map(p => p.catch(e => console.warn(e))));
  return s;
}
async function start() {
  const s = await refreshAll();
  S.lastSeq = s && s.store ? s.store.lastSequence : 0;
  let since = 0;
  try { const ev = await json("/v1/events?since=0"); ev.events.slice(-50).forEach(addEvent); since = ev.last; } catch (e) { console.warn(e); }
  S.streams = {changes: false, events: false}; showLive();
  stream("changes", "/v1/changes?feed=sse&since=" + S.lastSeq, onChange);
  stream("events", "/v1/events?feed=sse&since=" + since, onEvent);
  // Uptime and sync progress have no event: a slow look, quicker while a sync runs.
  (async () => { for (;;) { await sleep(S.status && S.status.sync ? 1000 : 5000); await loadStatus().catch(() => {}); } })();
  (async () => { for (;;) { await sleep(15000); soon.peers(); soon.mesh(); } })();
}
start();
</script>
</body>
</html>
"""#
}
