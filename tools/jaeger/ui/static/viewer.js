// SPDX-License-Identifier: Apache-2.0
// Sluice's trace viewer: one trace as a waterfall (each span a row, indented
// under its parent, its bar placed on the trace's time line; a click shows
// its tags), or the list of a submission's traces. Reads Jaeger's query API
// (/api/traces/<id>, /api/traces?service=...&tags=...). Plain JavaScript.
"use strict";

const main = document.getElementById("main");
const colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function ms(us) { return us >= 1000 ? (us / 1000).toFixed(us >= 100000 ? 0 : 1) + " ms" : us + " µs"; }

function parentOf(span) {
  const r = (span.references || []).find((x) => x.refType === "CHILD_OF");
  return r ? r.spanID : null;
}

// the spans in tree order (children by start time), each with its depth
function order(spans) {
  const byId = new Map(spans.map((s) => [s.spanID, s]));
  const kids = new Map();
  const roots = [];
  for (const s of spans) {
    const p = parentOf(s);
    if (p && byId.has(p)) {
      if (!kids.has(p)) kids.set(p, []);
      kids.get(p).push(s);
    } else {
      roots.push(s);
    }
  }
  const out = [];
  const walk = (s, depth) => {
    out.push([s, depth]);
    (kids.get(s.spanID) || []).sort((a, b) => a.startTime - b.startTime).forEach((c) => walk(c, depth + 1));
  };
  roots.sort((a, b) => a.startTime - b.startTime).forEach((r) => walk(r, 0));
  return out;
}

function drawTrace(t) {
  const services = Object.fromEntries(Object.entries(t.processes).map(([k, v]) => [k, v.serviceName]));
  const names = [...new Set(Object.values(services))].sort();
  const color = (svc) => colors[names.indexOf(svc) % colors.length];
  const t0 = Math.min(...t.spans.map((s) => s.startTime));
  const t1 = Math.max(...t.spans.map((s) => s.startTime + s.duration));
  const span = Math.max(1, t1 - t0);
  main.replaceChildren();
  main.append(el("h1", "", "Trace " + t.traceID));
  main.append(el("div", "meta", `${ms(span)} · ${t.spans.length} spans · ${names.length} services: ${names.join(", ")}`));
  for (const [s, depth] of order(t.spans)) {
    const svc = services[s.processID];
    const row = el("div", "row");
    const name = el("div", "name");
    name.style.paddingLeft = depth * 14 + "px";
    name.append(el("span", "svc", svc.replace(/^sluice-/, "") + " "), document.createTextNode(s.operationName));
    const lane = el("div", "lane");
    const bar = el("div", "bar");
    const left = ((s.startTime - t0) / span) * 100;
    bar.style.left = left + "%";
    bar.style.width = (s.duration / span) * 100 + "%";
    bar.style.background = color(svc);
    if ((s.tags || []).some((x) => x.key === "error" && x.value === true)) bar.classList.add("error");
    const dur = el("span", "dur", ms(s.duration));
    const end = left + (s.duration / span) * 100;
    if (end > 85) dur.style.right = `calc(${100 - left}% + 4px)`; // before the bar, near the end
    else dur.style.left = `calc(${end}% + 4px)`;
    lane.append(bar, dur);
    row.append(name, lane);
    row.addEventListener("click", () => {
      const open = row.nextSibling && row.nextSibling.classList && row.nextSibling.classList.contains("tags");
      if (open) { row.nextSibling.remove(); return; }
      const tags = el("div", "tags", (s.tags || []).map((x) => `${x.key} = ${x.value}`).join("\n") +
        (s.references || []).filter((r) => r.refType !== "CHILD_OF").map((r) => `\nlink: trace ${r.traceID} span ${r.spanID}`).join(""));
      row.after(tags);
    });
    main.append(row);
  }
}

async function get(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}

async function showTrace(id) {
  const d = await get("/api/traces/" + encodeURIComponent(id));
  if (!d.data || !d.data.length) throw new Error("no trace " + id);
  drawTrace(d.data[0]);
}

async function showSubmission(sid) {
  const tags = JSON.stringify({ "sluice.submission": sid });
  const d = await get(`/api/traces?service=sluice-presign&limit=100&lookback=7d&tags=${encodeURIComponent(tags)}`);
  main.replaceChildren(el("h1", "", "Submission " + sid));
  if (!d.data || !d.data.length) { main.append(el("p", "hint", "no traces of this submission")); return; }
  const table = el("table", "list");
  for (const t of d.data) {
    const q = t.spans.flatMap((s) => s.tags || []).find((x) => x.key === "sluice.question");
    const t0 = Math.min(...t.spans.map((s) => s.startTime));
    const t1 = Math.max(...t.spans.map((s) => s.startTime + s.duration));
    const tr = el("tr");
    const a = el("a", "", t.traceID);
    a.href = "/trace/" + t.traceID;
    const c = el("td");
    c.append(a);
    tr.append(el("td", "", "Q" + (q ? q.value : "?")), c, el("td", "", ms(t1 - t0)), el("td", "", t.spans.length + " spans"));
    table.append(tr);
  }
  main.append(table);
}

async function route() {
  const m = location.pathname.match(/^\/trace\/([0-9a-f]{16,32})$/);
  const q = new URLSearchParams(location.search).get("q");
  try {
    if (m) await showTrace(m[1]);
    else if (q && /^[0-9a-f]{32}$/.test(q)) await showTrace(q);
    else if (q) await showSubmission(q.trim());
  } catch (e) {
    main.replaceChildren(el("p", "err", String(e.message || e)));
  }
}

document.getElementById("find").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const q = document.getElementById("q").value.trim();
  if (q) location.href = "/?q=" + encodeURIComponent(q);
});
route();
