"""The dashboard's one page: static HTML, an inline style sheet and an inline script.

The script polls the JSON endpoints and redraws with DOM calls (``textContent``, SVG
elements), never with ``innerHTML``, so nothing read from the store is parsed as markup.
The only value the server puts into the HTML, the store's location, is escaped. Both inline
blocks are allowed by their SHA-256 in the Content-Security-Policy, and nothing else is.
"""
from __future__ import annotations

import base64
import hashlib
import html

STYLE = """
body { font: 14px/1.4 "DejaVu Sans", system-ui, sans-serif; margin: 0 auto; max-width: 1180px;
       padding: 12px 20px; color: #1c2833; background: #fbfcfc; }
h1 { font-size: 20px; margin: 4px 0; }
h2 { font-size: 16px; margin: 22px 0 6px; }
p.about { color: #566573; margin: 2px 0 8px; }
#status { padding: 4px 8px; border-radius: 3px; background: #eafaf1; color: #1e8449; display: inline-block; }
#status.error { background: #fdedec; color: #922b21; }
.tiles { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 10px; }
.tile { background: #fff; border: 1px solid #d5d8dc; border-radius: 4px; padding: 6px 10px; min-width: 150px; }
.tile .v { display: block; font-size: 20px; font-weight: bold; }
.tile .k { color: #566573; font-size: 12px; }
.tile .v.unknown { font-size: 14px; font-weight: normal; color: #95a5a6; }
table { border-collapse: collapse; background: #fff; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d5d8dc; padding: 3px 8px; text-align: right; }
th { background: #f2f3f4; font-weight: 600; }
td.text, th.text { text-align: left; }
#windows tbody tr { cursor: pointer; }
#windows tbody tr:hover { background: #f4f6f7; }
#windows tbody tr.chosen { background: #d6eaf8; }
tr.warn td.note { color: #922b21; }
.empty { color: #95a5a6; font-style: italic; }
.row { display: flex; gap: 24px; align-items: flex-start; flex-wrap: wrap; }
#plot { background: #fff; border: 1px solid #d5d8dc; }
#plot .axis { stroke: #566573; stroke-width: 1; }
#plot .grid { stroke: #eaeded; stroke-width: 1; }
#plot text { font-size: 11px; fill: #1c2833; }
#plot text.label { font-size: 13px; }
.pt-other { fill: #bdc3c7; }
.pt-removed { fill: none; stroke: #7f8c8d; stroke-width: 1.2; }
.pt-presumed { fill: #c0392b; }
.pt-added { fill: #e67e22; stroke: #873600; stroke-width: 0.8; }
ul.legend { list-style: none; padding: 0; margin: 6px 0; }
ul.legend li { margin: 2px 0; }
ul.legend svg { vertical-align: middle; margin-right: 6px; }
#cand-wrap { max-height: 440px; overflow-y: auto; }
#agg { background: #fff; border: 1px solid #d5d8dc; }
#agg .axis { stroke: #566573; stroke-width: 1; }
#agg .grid { stroke: #eaeded; stroke-width: 1; }
#agg text { font-size: 11px; fill: #1c2833; }
#agg .band { fill-opacity: 0.18; stroke: none; }
#agg .mean { fill: none; stroke-width: 1.6; }
#hist { background: #fff; border: 1px solid #d5d8dc; }
#hist text { font-size: 11px; fill: #1c2833; }
#hist .axis { stroke: #566573; stroke-width: 1; }
#hist .released { fill: #d5d8dc; }
#hist .estimate { fill: #2471a3; }
#hist .whisker { stroke: #2471a3; stroke-width: 1.4; }
select { font: inherit; }
"""

SCRIPT = r"""
"use strict";
const REFRESH_MS = Math.max(250, Number(document.body.dataset.refresh) * 1000);
const SVGNS = "http://www.w3.org/2000/svg";
const PLOT = {w: 720, h: 440, left: 84, right: 16, top: 16, bottom: 58};
const KINDS = [
  ["others", "pt-other", 2, "other readings"],
  ["removed", "pt-removed", 3.5, "presumed, removed as false positive"],
  ["presumed", "pt-presumed", 3.5, "candidate: presumed outlier, kept"],
  ["added", "pt-added", 3.5, "candidate: added as false negative"],
];
let chosen = null;          // the window the operator picked; null follows the latest
let latest = null;
let shown = "";             // what the plot shows now, to redraw only when it changes
const cache = new Map();    // window -> its candidates (a closed window never changes)
let xCol = 0, yCol = 1;

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
const num = (n) => (n === null || n === undefined) ? null : n.toLocaleString("en-US");

function ago(t, now) {
  if (t === null || t === undefined) return "never";
  const s = Math.max(0, now - t);
  if (s < 90) return s.toFixed(0) + " s ago";
  if (s < 5400) return (s / 60).toFixed(0) + " min ago";
  if (s < 172800) return (s / 3600).toFixed(1) + " h ago";
  return (s / 86400).toFixed(1) + " days ago";
}

async function get(path) {
  const r = await fetch(path, {cache: "no-store"});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}

function tile(id, value, isKnown) {
  const v = document.querySelector("#" + id + " .v");
  v.textContent = value;
  v.classList.toggle("unknown", !isKnown);
}

function drawSummary(s) {
  tile("t-rate", s.rate === null ? "measuring" : s.rate.toFixed(1) + " /s", s.rate !== null);
  tile("t-stored", num(s.stored), true);
  tile("t-ingested", num(s.ingested), true);
  tile("t-duplicates", num(s.duplicates), true);
  tile("t-dead", num(s.dead_letters), true);
  tile("t-gaps", num(s.gaps), true);
  tile("t-windows", num(s.windows_closed), true);
  tile("t-held", num(s.windows_held), true);
  tile("t-failed", num(s.rounds_failed), true);
  tile("t-carried", num(s.readings_carried), true);
  const last = s.last_round_s;
  tile("t-latency", last === null ? "none yet" : last.toFixed(2) + " s", last !== null);
  document.querySelector("#t-latency .k").textContent = "last correction round" + (s.rounds_completed ?
    "; mean " + (s.round_seconds_total / s.rounds_completed).toFixed(2) + " s over " + num(s.rounds_completed) : "");
}

function fill(tableId, rows, cols, onRow) {
  const body = document.querySelector("#" + tableId + " tbody");
  const frag = document.createDocumentFragment();
  if (!rows.length) {
    const tr = el("tr");
    tr.append(el("td", {colspan: cols.length, class: "empty text"}, "none yet"));
    frag.append(tr);
  }
  for (const r of rows) {
    const tr = el("tr");
    for (const [key, fmt, cls] of cols) tr.append(el("td", {"data-col": key, class: cls || ""}, fmt(r)));
    if (onRow) onRow(tr, r);
    frag.append(tr);
  }
  body.replaceChildren(frag);
}

function note(w) {
  const parts = [];
  if (w.state !== "done") {
    parts.push(w.state === "held" ? "held after " + w.attempts + (w.attempts === 1 ? " attempt" : " attempts") +
               (w.last_error ? ": " + w.last_error : "") : "awaiting its correction round");
  }
  if (w.missing) parts.push(num(w.missing) + " readings without a correction record, left out of the correction");
  return parts.join("; ");
}

const sameGroup = (ws) => ws.every((w) => w.group === ws[0].group);
const windowName = (w) => "window " + w.id + " (" + w.group + " #" + w.seq + ")";

function drawWindows(ws, now) {
  const done = ws.filter((w) => w.state === "done");
  latest = done.length ? done[0].id : null;
  fill("windows", ws, [
    ["window", (w) => w.id],
    ["group", (w) => w.group, "text"],
    ["group_window", (w) => w.seq],
    ["interval", (w) => new Date(w.start * 1000).toLocaleTimeString() + " – " +
                        new Date(w.end * 1000).toLocaleTimeString() + (w.kind === "count" ? " (count)" : ""), "text"],
    ["readings", (w) => num(w.n)],
    ["state", (w) => w.state, "text"],
    ["presumed", (w) => w.presumed === null ? "" : num(w.presumed)],
    ["false_positives", (w) => w.removed_fp === null ? "" : num(w.removed_fp)],
    ["false_negatives", (w) => w.added_fn === null ? "" : num(w.added_fn)],
    ["candidates", (w) => w.candidates === null ? "" : num(w.candidates)],
    ["round_s", (w) => w.round_s === null ? "" : w.round_s.toFixed(2)],
    ["closed", (w) => ago(w.closed_at, now), "text"],
    ["note", note, "text note"],
  ], (tr, w) => {
    tr.dataset.window = w.id;
    tr.dataset.state = w.state;
    if (note(w)) tr.classList.add("warn");
    if (w.state !== "done") return;
    if (w.id === (chosen === null ? latest : chosen)) tr.classList.add("chosen");
    tr.addEventListener("click", () => { chosen = (w.id === latest) ? null : w.id; redrawChoice(); });
  });
  const pick = document.getElementById("window-pick");
  const want = [["latest", "latest" + (latest === null ? "" : " (" + windowName(done[0]) + ")")]]
    .concat(done.map((w) => [String(w.id), windowName(w)]));
  if ([...pick.options].map((o) => o.value + "=" + o.text).join() !== want.map((v) => v.join("=")).join()) {
    pick.replaceChildren(...want.map(([v, text]) => el("option", {value: v}, text)));
  }
  pick.value = chosen === null ? "latest" : String(chosen);
}

function eps(x) {
  return (x === null || x === undefined) ? "unknown" : String(Number(x.toPrecision(4)));
}

function drawDevices(ds, now) {
  fill("devices", ds, [
    ["device", (d) => d.device_id],
    ["group", (d) => d.group, "text"],
    ["readings", (d) => num(d.readings)],
    ["candidates", (d) => num(d.candidates)],
    ["last_seen", (d) => ago(d.last_seen, now), "text"],
    ["eps_window", (d) => eps(d.eps_window)],
    ["eps_total", (d) => eps(d.eps_total)],
    ["cap", (d) => eps(d.cap)],
    ["eps_record_worst", (d) => eps(d.eps_record_worst)],
    ["entropy", (d) => d.entropy === null ? "unknown" : d.entropy, "text"],
  ], (tr, d) => {
    if (d.status_at !== null) {
      tr.title = "latest status: " + (d.status_event || "status") + ", " + ago(d.status_at, now) +
        (d.ledger_window === null ? "" : "; ledger window " + d.ledger_window) +
        (d.board ? "; board " + d.board : "");
    }
  });
}

function drawEvents(es, now) {
  fill("events", es, [
    ["at", (e) => ago(e.at, now), "text"],
    ["kind", (e) => e.kind, "text"],
    ["group", (e) => e.group === null ? "" : e.group, "text"],
    ["window", (e) => e.window === null ? "" : e.window],
    ["text", (e) => e.text, "text"],
  ]);
}

function niceTicks(lo, hi, want) {
  const span = hi - lo || 1;
  const raw = span / want;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= want) || 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Math.round(t / step) * step);
  return ticks;
}

function extent(vals) {
  let lo = Math.min(...vals), hi = Math.max(...vals);
  if (!isFinite(lo)) { lo = 0; hi = 1; }
  if (lo === hi) { lo -= 1; hi += 1; }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

function columnPickers(columns) {
  const box = document.getElementById("columns");
  box.hidden = columns <= 2;
  if (columns <= 2) return;
  for (const [id, cur] of [["x-col", xCol], ["y-col", yCol]]) {
    const s = document.getElementById(id);
    if (s.options.length !== columns) {
      s.replaceChildren(...Array.from({length: columns}, (_, i) => el("option", {value: i}, "column " + (i + 1))));
    }
    s.value = String(cur);
  }
}

function drawPlot(c) {
  const svg = document.getElementById("plot");
  const one = c.columns < 2;
  const xOf = one ? (p) => p.index : (p) => p.values[xCol];
  const yOf = one ? (p) => p.values[0] : (p) => p.values[yCol];
  const pts = KINDS.flatMap(([k]) => c[k]);
  const [x0, x1] = extent(pts.map(xOf));
  const [y0, y1] = extent(pts.map(yOf));
  const W = PLOT.w - PLOT.left - PLOT.right, H = PLOT.h - PLOT.top - PLOT.bottom;
  const sx = (v) => PLOT.left + (v - x0) / (x1 - x0) * W;
  const sy = (v) => PLOT.top + H - (v - y0) / (y1 - y0) * H;
  const g = [];
  for (const t of niceTicks(x0, x1, 7)) {
    g.push(el("svg:line", {class: "grid", x1: sx(t), x2: sx(t), y1: PLOT.top, y2: PLOT.top + H}));
    g.push(el("svg:text", {x: sx(t), y: PLOT.top + H + 16, "text-anchor": "middle"}, num(t)));
  }
  for (const t of niceTicks(y0, y1, 6)) {
    g.push(el("svg:line", {class: "grid", x1: PLOT.left, x2: PLOT.left + W, y1: sy(t), y2: sy(t)}));
    g.push(el("svg:text", {x: PLOT.left - 6, y: sy(t) + 4, "text-anchor": "end"}, num(t)));
  }
  g.push(el("svg:line", {class: "axis", x1: PLOT.left, x2: PLOT.left + W, y1: PLOT.top + H, y2: PLOT.top + H}));
  g.push(el("svg:line", {class: "axis", x1: PLOT.left, x2: PLOT.left, y1: PLOT.top, y2: PLOT.top + H}));
  const xLabel = one ? "reading in the window (arrival order)" : "column " + (xCol + 1) + ", perturbed value (quanta)";
  const yLabel = one ? "column 1, perturbed value (quanta)" : "column " + (yCol + 1) + ", perturbed value (quanta)";
  g.push(el("svg:text", {id: "x-label", class: "label", x: PLOT.left + W / 2, y: PLOT.h - 14,
                         "text-anchor": "middle"}, xLabel));
  g.push(el("svg:text", {id: "y-label", class: "label", transform: "rotate(-90)", x: -(PLOT.top + H / 2), y: 18,
                         "text-anchor": "middle"}, yLabel));
  for (const [k, cls, r] of KINDS) {
    for (const p of c[k]) {
      const dot = el("svg:circle", {class: cls, cx: sx(xOf(p)).toFixed(1), cy: sy(yOf(p)).toFixed(1), r: r});
      dot.append(el("svg:title", {}, "device " + p.device + ", boot " + p.boot + ", seq " + p.seq +
                    ": (" + p.values.join(", ") + ")"));
      g.push(dot);
    }
  }
  svg.replaceChildren(...g);
  const shownCands = c.presumed.length + c.added.length;
  document.getElementById("plot-title").textContent = "Window " + c.window + " (group " + c.group + ", its window #" +
    c.group_window + "): " + num(c.candidates) +
    (c.candidates === 1 ? " candidate" : " candidates") + " among " + num(c.readings) + " readings" +
    (shownCands < c.candidates ? " (" + num(shownCands) + " plotted)" : "");
  document.getElementById("plot-title").dataset.candidates = c.candidates;
  document.getElementById("plot-title").dataset.window = c.window;
  const others = c.readings - c.candidates - c.removed.length;
  const counts = {others: "sample of " + num(c.others.length) + " of " + num(Math.max(0, others)),
                  removed: num(c.removed.length), presumed: num(c.presumed.length), added: num(c.added.length)};
  document.getElementById("legend").replaceChildren(...KINDS.slice().reverse().map(([k, cls, r, label]) => {
    const sw = el("svg:svg", {width: 12, height: 12});
    sw.append(el("svg:circle", {class: cls, cx: 6, cy: 6, r: Math.max(r, 3)}));
    const li = el("li");
    li.append(sw, document.createTextNode(label + ": " + counts[k]));
    return li;
  }));
  const rows = [];
  for (const [k, label] of [["presumed", "presumed, kept"], ["added", "added (false negative)"]]) {
    for (const p of c[k]) rows.push({verdict: label, ...p});
  }
  fill("candidates", rows.slice(0, 200), [
    ["verdict", (p) => p.verdict, "text"],
    ["device", (p) => p.device],
    ["boot", (p) => p.boot],
    ["seq", (p) => p.seq],
    ["values", (p) => p.values.join(", "), "text"],
  ]);
}

const AGG = {w: 720, h: 300, left: 84, right: 16, top: 16, bottom: 40};
const GROUP_COLORS = ["#2471a3", "#c0392b", "#229954", "#7d3c98", "#d68910", "#17a589"];
let aggCol = 0;

function drawAggregates(a) {
  const svg = document.getElementById("agg");
  const note = document.getElementById("agg-note");
  const legend = document.getElementById("agg-legend");
  if (a === null) {
    svg.replaceChildren();
    legend.replaceChildren();
    note.textContent = "No device profile in the data dir yet: the means need its noise law.";
    return;
  }
  const pick = document.getElementById("agg-col");
  if (pick.options.length !== a.columns) {
    pick.replaceChildren(...Array.from({length: a.columns}, (_, i) => el("option", {value: i}, "column " + (i + 1))));
  }
  pick.value = String(a.column);
  const groups = Object.keys(a.groups).sort();
  const all = groups.flatMap((g) => a.groups[g]);
  note.textContent = all.length === 0 ? "No readings in the last day." :
    "Mean of column " + (a.column + 1) + " per " + (a.window_s / 60) + " min with its " + Math.round(a.level * 100) +
    "% interval, per group, in physical units: " + a.note + ".";
  note.dataset.bands = String(all.length);
  if (all.length === 0) { svg.replaceChildren(); legend.replaceChildren(); return; }
  const t0 = Math.min(...all.map((b) => b.start)), t1 = Math.max(...all.map((b) => b.end));
  const [y0, y1] = extent(all.flatMap((b) => [b.lo, b.hi]));
  const W = AGG.w - AGG.left - AGG.right, H = AGG.h - AGG.top - AGG.bottom;
  const sx = (t) => AGG.left + (t - t0) / ((t1 - t0) || 1) * W;
  const sy = (v) => AGG.top + H - (v - y0) / (y1 - y0) * H;
  const g = [];
  for (const t of niceTicks(y0, y1, 6)) {
    g.push(el("svg:line", {class: "grid", x1: AGG.left, x2: AGG.left + W, y1: sy(t), y2: sy(t)}));
    g.push(el("svg:text", {x: AGG.left - 6, y: sy(t) + 4, "text-anchor": "end"}, num(t)));
  }
  for (const t of [t0, (t0 + t1) / 2, t1]) {
    g.push(el("svg:text", {x: sx(t), y: AGG.top + H + 16, "text-anchor": "middle"},
              new Date(t * 1000).toLocaleTimeString()));
  }
  g.push(el("svg:line", {class: "axis", x1: AGG.left, x2: AGG.left + W, y1: AGG.top + H, y2: AGG.top + H}));
  g.push(el("svg:line", {class: "axis", x1: AGG.left, x2: AGG.left, y1: AGG.top, y2: AGG.top + H}));
  const items = [];
  groups.forEach((name, i) => {
    const color = GROUP_COLORS[i % GROUP_COLORS.length];
    const bs = a.groups[name];
    const xs = bs.map((b) => sx((b.start + b.end) / 2).toFixed(1));
    const upper = bs.map((b, k) => xs[k] + "," + sy(b.hi).toFixed(1));
    const lower = bs.map((b, k) => xs[k] + "," + sy(b.lo).toFixed(1)).reverse();
    g.push(el("svg:polygon", {class: "band", fill: color, "data-group": name, points: upper.concat(lower).join(" ")}));
    g.push(el("svg:polyline", {class: "mean", stroke: color, "data-group": name,
                               points: bs.map((b, k) => xs[k] + "," + sy(b.value).toFixed(1)).join(" ")}));
    bs.forEach((b, k) => {
      const dot = el("svg:circle", {cx: xs[k], cy: sy(b.value).toFixed(1), r: 2.5, fill: color});
      dot.append(el("svg:title", {}, name + ": " + b.value.toPrecision(4) + " [" + b.lo.toPrecision(4) + ", " +
                    b.hi.toPrecision(4) + "] from " + num(b.n) + " readings"));
      g.push(dot);
    });
    const sw = el("svg:svg", {width: 12, height: 12});
    sw.append(el("svg:rect", {x: 0, y: 0, width: 12, height: 12, fill: color}));
    const li = el("li");
    li.append(sw, document.createTextNode("group " + name + ": latest " + bs[bs.length - 1].value.toPrecision(4) +
                                          " from " + num(bs[bs.length - 1].n) + " readings"));
    items.push(li);
  });
  svg.replaceChildren(...g);
  legend.replaceChildren(...items);
}

const HIST = {w: 720, h: 260, left: 84, right: 16, top: 16, bottom: 52};
let histGroup = null;

function drawHistogram(h) {
  const svg = document.getElementById("hist");
  const title = document.getElementById("hist-title");
  if (h === null) {
    svg.replaceChildren();
    title.textContent = "No window with readings for this group yet.";
    title.dataset.bins = "0";
    return;
  }
  title.textContent = "Group " + h.group + ", column " + (h.column + 1) + ", window " +
    new Date(h.start * 1000).toLocaleTimeString() + " to " + new Date(h.end * 1000).toLocaleTimeString() + ", " +
    num(h.n) + " readings: grey bars count the values as released (noise and all), blue points estimate the " +
    "readings' counts with their 95% intervals (" + h.note + ").";
  title.dataset.bins = String(h.labels.length);
  const k = h.labels.length;
  const top = Math.max(1, ...h.released, ...h.hi);
  const bottom = Math.min(0, ...h.lo);
  const W = HIST.w - HIST.left - HIST.right, H = HIST.h - HIST.top - HIST.bottom;
  const bw = W / k;
  const sy = (v) => HIST.top + H - (v - bottom) / (top - bottom) * H;
  const g = [];
  for (const t of niceTicks(bottom, top, 5)) {
    g.push(el("svg:text", {x: HIST.left - 6, y: sy(t) + 4, "text-anchor": "end"}, num(t)));
  }
  g.push(el("svg:line", {class: "axis", x1: HIST.left, x2: HIST.left + W, y1: sy(0), y2: sy(0)}));
  h.labels.forEach((label, i) => {
    const x = HIST.left + i * bw;
    g.push(el("svg:rect", {class: "released", x: (x + bw * 0.15).toFixed(1), width: (bw * 0.7).toFixed(1),
                           y: sy(h.released[i]).toFixed(1), height: (sy(0) - sy(h.released[i])).toFixed(1)}));
    const cx = (x + bw / 2).toFixed(1);
    g.push(el("svg:line", {class: "whisker", x1: cx, x2: cx, y1: sy(h.lo[i]).toFixed(1), y2: sy(h.hi[i]).toFixed(1)}));
    const dot = el("svg:circle", {class: "estimate", cx: cx, cy: sy(h.value[i]).toFixed(1), r: 3.5});
    dot.append(el("svg:title", {}, label + ": released " + num(h.released[i]) + ", estimated " +
                  h.value[i].toFixed(1) + " [" + h.lo[i].toFixed(1) + ", " + h.hi[i].toFixed(1) + "]"));
    g.push(dot);
    g.push(el("svg:text", {x: cx, y: HIST.top + H + 16 + (i % 2) * 13, "text-anchor": "middle"}, label));
  });
  svg.replaceChildren(...g);
}

async function showHistogram(groups) {
  const pick = document.getElementById("hist-group");
  if (Array.from(pick.options).map((o) => o.value).join("\n") !== groups.join("\n")) {
    pick.replaceChildren(...groups.map((g) => el("option", {value: g}, g)));
  }
  if (histGroup === null || !groups.includes(histGroup)) histGroup = groups.length ? groups[0] : null;
  if (histGroup === null) { drawHistogram(null); return; }
  pick.value = histGroup;
  drawHistogram((await get("/api/histogram?group=" + encodeURIComponent(histGroup) + "&column=" + aggCol)).histogram);
}

async function showWindow() {
  const w = chosen === null ? latest : chosen;
  const key = w + ":" + xCol + ":" + yCol;
  if (w === null) {
    document.getElementById("plot-title").textContent = "No window is done yet.";
    return;
  }
  if (key === shown) return;
  if (!cache.has(w)) cache.set(w, await get("/api/candidates?window=" + w));   // a done window never changes
  const c = cache.get(w);
  if (xCol >= c.columns) xCol = 0;
  if (yCol >= c.columns) yCol = Math.min(1, c.columns - 1);
  columnPickers(c.columns);
  drawPlot(c);
  shown = w + ":" + xCol + ":" + yCol;
}

function redrawChoice() {
  for (const tr of document.querySelectorAll("#windows tbody tr")) {
    tr.classList.toggle("chosen", tr.dataset.window === String(chosen === null ? latest : chosen));
  }
  document.getElementById("window-pick").value = chosen === null ? "latest" : String(chosen);
  showWindow().catch(fail);
}

function fail(e) {
  const st = document.getElementById("status");
  st.textContent = "cannot read the store: " + e.message + " (retrying)";
  st.className = "error";
}

async function tick() {
  try {
    const [s, w, d, e] = await Promise.all([get("/api/summary"), get("/api/windows?limit=20"), get("/api/devices"),
                                            get("/api/events?limit=10")]);
    drawSummary(s.summary);
    drawWindows(w.windows, w.now);
    drawDevices(d.devices, d.now);
    drawEvents(e.events, e.now);
    await showWindow();
    const agg = (await get("/api/aggregates?column=" + aggCol)).aggregates;
    drawAggregates(agg);
    await showHistogram(agg === null ? [] : Object.keys(agg.groups).sort());
    const st = document.getElementById("status");
    st.textContent = "updated " + new Date(s.now * 1000).toLocaleTimeString() + ", every " +
      (REFRESH_MS / 1000) + " s";
    st.className = "";
    document.body.dataset.ready = "1";
    document.body.dataset.ticks = String(Number(document.body.dataset.ticks || 0) + 1);   // for tests: refreshes done
  } catch (e) {
    fail(e);
  } finally {
    setTimeout(tick, REFRESH_MS);
  }
}

document.getElementById("window-pick").addEventListener("change", (ev) => {
  chosen = ev.target.value === "latest" ? null : Number(ev.target.value);
  redrawChoice();
});
document.getElementById("agg-col").addEventListener("change", async (ev) => {
  aggCol = Number(ev.target.value);
  try {
    const agg = (await get("/api/aggregates?column=" + aggCol)).aggregates;
    drawAggregates(agg);
    await showHistogram(agg === null ? [] : Object.keys(agg.groups).sort());
  } catch (e) { fail(e); }
});
document.getElementById("hist-group").addEventListener("change", async (ev) => {
  histGroup = ev.target.value;
  try { await showHistogram(Array.from(ev.target.options).map((o) => o.value)); } catch (e) { fail(e); }
});
for (const [id, set] of [["x-col", (v) => { xCol = v; }], ["y-col", (v) => { yCol = v; }]]) {
  document.getElementById(id).addEventListener("change", (ev) => { set(Number(ev.target.value)); redrawChoice(); });
}
tick();
"""

_BODY = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dpsense dashboard</title>
<style>%(style)s</style>
</head>
<body data-refresh="%(refresh)s">
<h1>dpsense: live view</h1>
<p class="about">Read-only view of the analyst's store <code>%(store)s</code>. Readings are shown as the
boards released them: perturbed values in quanta of each column, never raw ones.
Prometheus metrics: <a href="/metrics">/metrics</a>.</p>
<div id="status">loading&hellip;</div>

<div class="tiles">
<div class="tile" id="t-rate"><span class="v"></span><span class="k">ingest rate, readings stored per second
(up to the last %(rate_window)d s)</span></div>
<div class="tile" id="t-stored"><span class="v"></span><span class="k">readings stored</span></div>
<div class="tile" id="t-ingested"><span class="v"></span><span class="k">messages ingested</span></div>
<div class="tile" id="t-duplicates"><span class="v"></span><span class="k">duplicates, not stored twice</span></div>
<div class="tile" id="t-dead"><span class="v"></span><span class="k">dead letters</span></div>
<div class="tile" id="t-gaps"><span class="v"></span><span class="k">gaps: missing sequence numbers</span></div>
<div class="tile" id="t-windows"><span class="v"></span><span class="k">windows closed</span></div>
<div class="tile" id="t-held"><span class="v"></span><span class="k">windows awaiting their round</span></div>
<div class="tile" id="t-failed"><span class="v"></span><span class="k">correction rounds failed (retried)</span></div>
<div class="tile" id="t-carried"><span class="v"></span><span class="k">readings carried (windows below
the minimum)</span></div>
<div class="tile" id="t-latency"><span class="v"></span><span class="k">last correction round</span></div>
</div>

<h2>Last windows</h2>
<table id="windows">
<thead><tr><th>window</th><th class="text">group</th><th>group's window</th><th class="text">readings arrived</th>
<th>readings</th><th class="text">state</th><th>presumed</th><th>false positives removed</th>
<th>false negatives added</th><th>candidates</th><th>round (s)</th><th class="text">closed</th>
<th class="text">note</th></tr></thead>
<tbody></tbody>
</table>

<h2>Candidates of a window</h2>
<p><label>window <select id="window-pick"><option value="latest">latest</option></select></label>
<span id="columns" hidden> &nbsp; <label>x <select id="x-col"></select></label>
<label>y <select id="y-col"></select></label></span></p>
<p id="plot-title">No window is done yet.</p>
<div class="row">
<div><svg id="plot" width="720" height="440" viewBox="0 0 720 440" role="img"
 aria-label="candidates of the chosen window"></svg>
<ul class="legend" id="legend"></ul></div>
<div id="cand-wrap"><table id="candidates">
<thead><tr><th class="text">verdict</th><th>device</th><th>boot</th><th>seq</th>
<th class="text">values (quanta)</th></tr></thead>
<tbody></tbody>
</table></div>
</div>

<h2>Means per group</h2>
<p class="about">Estimated from the released readings alone, with intervals that account for the boards'
exact noise law: these spend no privacy budget (docs/aggregate.md). <label>column
<select id="agg-col"></select></label></p>
<p id="agg-note">loading&hellip;</p>
<div><svg id="agg" width="720" height="300" viewBox="0 0 720 300" role="img"
 aria-label="each group's mean per window with its interval"></svg>
<ul class="legend" id="agg-legend"></ul></div>
<p><label>histogram of group <select id="hist-group"></select></label></p>
<p id="hist-title">loading&hellip;</p>
<div><svg id="hist" width="720" height="260" viewBox="0 0 720 260" role="img"
 aria-label="released counts and estimated counts per bin of the group's latest window"></svg></div>

<h2>Devices</h2>
<p class="about">Epsilon as each board's ledger reported it in its latest status message: spent in its
current ledger window, against its cap, and per record in the worst case; the total is the readings
held here times each boot's epsilon per record. "unknown": not in the device's latest status message
(none yet, or a device without a ledger, such as <code>dpsense simulate</code>'s).</p>
<table id="devices">
<thead><tr><th>device</th><th class="text">group</th><th>readings</th><th>candidates</th>
<th class="text">last seen</th><th>&epsilon; spent, current window</th><th>&epsilon; total</th>
<th>&epsilon; cap</th><th>&epsilon; per record, worst case</th><th class="text">entropy source</th></tr></thead>
<tbody></tbody>
</table>

<h2>Status log</h2>
<table id="events">
<thead><tr><th class="text">when</th><th class="text">what</th><th class="text">group</th><th>window</th>
<th class="text">detail</th></tr></thead>
<tbody></tbody>
</table>
<script>%(script)s</script>
</body>
</html>
"""


def render(store: str, refresh_s: float, rate_window_s: int) -> str:
    """The page; ``store`` (the storage location shown to the operator) is escaped here."""
    return _BODY % {"style": STYLE, "script": SCRIPT, "store": html.escape(store, quote=True),
                    "refresh": html.escape("%g" % refresh_s, quote=True), "rate_window": rate_window_s}


def content_security_policy() -> str:
    """Only this page's own inline style and script, and requests to this server."""
    return ("default-src 'none'; script-src '%s'; style-src '%s'; connect-src 'self'; img-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'" % (_sha256(SCRIPT), _sha256(STYLE)))


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
