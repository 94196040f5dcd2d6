// The Inspector's Profile pane: where the cell's time went (tracing, every pass, the C compiler,
// loading, the run), the per-pass table, and the per-kernel run profile with a roofline chart
// against this machine's measured bandwidth and peak FLOP/s. Data: payload.cell_profile
// (caten_lab/notebook/profile_payload.py) and payload.profile (the per-pass rows).
import { h } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const STYLE = `
.ci-pf-section{margin:10px 0 4px;font-weight:600}
.ci-pf-top{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
.ci-pf-col{flex:0 1 auto;min-width:0}
.ci-pf-machine{max-width:560px}
.ci-pf-timeline td.ci-pf-num,.ci-pf-kernels td.ci-pf-num{text-align:right;font-variant-numeric:tabular-nums}
.ci-pf-timeline tr.ci-pf-cached td{color:#9ca3af}
.ci-pf-timeline tr.ci-pf-total td{font-weight:600;border-top:1px solid #d1d5db}
.ci-pf-bar{display:inline-block;height:8px;background:#6366f1;vertical-align:middle;margin-right:4px}
.ci-pf-bar.ci-pf-phase-cc,.ci-pf-bar.ci-pf-phase-load{background:#f59e0b}
.ci-pf-bar.ci-pf-phase-run,.ci-pf-bar.ci-pf-phase-profile{background:#10b981}
.ci-pf-bar.ci-pf-phase-tracing,.ci-pf-bar.ci-pf-phase-python,.ci-pf-bar.ci-pf-phase-display{background:#9ca3af}
.ci-pf-kernels tr.ci-pf-krow{cursor:pointer}
.ci-pf-kernels tr.ci-pf-krow.current td{background:#eef2ff}
.ci-roofline{display:block;margin:6px 0;font:11px sans-serif}
.ci-roofline .ci-roof-point{cursor:pointer;fill:#6366f1;fill-opacity:.75;stroke:#312e81}
.ci-roofline .ci-roof-point.ci-roof-zero{fill:#fff}
.ci-roofline .ci-roof-point.current{fill:#f43f5e;stroke:#881337}
.ci-roofline .ci-roof-line{stroke:#111827;stroke-width:1.5;fill:none}
.ci-roofline .ci-roof-grid{stroke:#e5e7eb}
`;

function fmtNum(x, unit) {
  if (x === null || x === undefined) return "–";
  const p = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [v, s] of p) if (Math.abs(x) >= v) return `${(x / v).toFixed(x / v >= 100 ? 0 : 1)} ${s}${unit}`;
  return `${x.toFixed(x >= 100 || Number.isInteger(x) ? 0 : 2)} ${unit}`;
}

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

/** The timeline rows with the front-end's last one (sending and drawing), total = their sum. */
export function timelineRows(tl, nowS, final = true) {
  const rows = (tl.rows || []).map((r) => ({ ...r }));
  const label = `sending and drawing the Inspector${final ? "" : " (still drawing)"}`;
  if (tl.end) rows.push({ phase: "display", label, seconds: Math.max(0, nowS - tl.end) });
  return { rows, total: rows.reduce((a, r) => a + (r.seconds || 0), 0) };
}

/** The timeline table, drawn again (final) right after the Inspector's first synchronous render:
 * the cell's execute reply is handled then, so the total is the cell's execute-to-idle time. The
 * graph layout that follows (in a worker, after the cell has finished) is not part of the cell. */
function timelineBox(ctx, tl) {
  const box = h("div", { class: "ci-pf-tlbox" });
  const draw = (final) => box.replaceChildren(timelineTable(ctx, tl, final));
  draw(false);
  setTimeout(() => draw(true), 0);
  return box;
}

function timelineTable(ctx, tl, final) {
  const { fmtTime, showTab, setPass } = ctx;
  const drawn = Date.now() / 1000;
  const { rows, total } = timelineRows(tl, drawn, final);
  const tbl = h("table", { class: "ci-profile-table ci-pf-timeline", "data-total-s": String(total), "data-start": String(tl.start), "data-drawn": String(drawn), "data-start-source": tl.start_source, "data-final": final ? "1" : "0" });
  tbl.append(h("tr", {}, ...["step of the cell", "time", "share"].map((t) => h("th", { text: t }))));
  for (const r of rows) {
    const share = total > 0 ? r.seconds / total : 0;
    const tr = h(
      "tr",
      { class: `ci-pf-trow${r.cached ? " ci-pf-cached" : ""}`, "data-phase": r.phase, "data-seconds": String(r.seconds) },
      h("td", { text: r.label + (r.cached ? " (compiled in an earlier cell)" : "") }),
      h("td", { class: "ci-pf-num", text: fmtTime(r.seconds) }),
      h("td", {}, h("span", { class: `ci-pf-bar ci-pf-phase-${r.phase}`, style: `width:${Math.round(share * 120)}px` }), `${(share * 100).toFixed(1)}%`)
    );
    if (r.pass_index !== undefined) {
      tr.style.cursor = "pointer";
      tr.addEventListener("click", () => (showTab("graph"), setPass(r.pass_index)));
    }
    tbl.append(tr);
  }
  tbl.append(h("tr", { class: "ci-pf-total" }, h("td", { text: "total (execute to drawn)" }), h("td", { class: "ci-pf-num ci-pf-total-s", text: fmtTime(total) }), h("td", { text: "" })));
  return tbl;
}

function passTable(ctx) {
  const { data, fmtTime, fmtBytes, showTab, setPass } = ctx;
  const prof = data.profile || {};
  const rows = prof.rows && prof.rows.length ? prof.rows : data.passes.map((p) => ({ pass: p.name, time_s: p.wall_s, mem_bytes: p.mem_bytes, nodes_before: p.nodes_before, nodes_after: p.nodes_after, rewrites: p.n_rewrites }));
  const total = rows.reduce((a, r) => a + (r.time_s || 0), 0) || 1;
  const tbl = h("table", { class: "ci-profile-table" });
  tbl.append(h("tr", {}, ...["pass", "time", "share", "memory", "nodes before", "nodes after", "rewrites"].map((t) => h("th", { text: t }))));
  rows.forEach((r, i) => {
    const share = r.share !== undefined ? r.share : (r.time_s || 0) / total;
    tbl.append(
      h(
        "tr",
        { class: "ci-prow", onclick: () => (showTab("graph"), setPass(i)) },
        h("td", { text: r.pass }),
        h("td", { text: fmtTime(r.time_s) }),
        h("td", {}, h("span", { class: "ci-bar", style: `width:${Math.round(share * 60)}px` }), ` ${(share * 100).toFixed(1)}%`),
        h("td", { text: fmtBytes(r.mem_bytes) }),
        h("td", { text: String(r.nodes_before) }),
        h("td", { text: String(r.nodes_after) }),
        h("td", { text: String(r.rewrites) })
      )
    );
  });
  return [h("div", { class: "ci-dim", text: `passes: ${fmtTime(prof.total_s || total)}` }), tbl];
}

/** Select a profiled kernel: its listing in the last kernel-IR pass, and its graph nodes. */
function selectKernel(ctx, pt) {
  const { data, model, showTab } = ctx;
  let kirPass = -1;
  data.passes.forEach((p, i) => {
    if (p.kir && (p.kir.functions || []).some((f) => f.name === pt.function)) kirPass = i;
  });
  showTab("graph");
  if (kirPass >= 0) model.set("pass_index", kirPass);
  model.set("rewrite_index", -1);
  model.set("kernel", pt.function);
  model.set("kernel_line", -1);
  if (pt.node_ids && pt.node_ids.length) model.set("selected_node", pt.node_ids[pt.node_ids.length - 1]);
  model.save_changes();
}

function selectNodes(ctx, pt) {
  const { data, gotoNode, setPass } = ctx;
  const at = data.passes.findIndex((p) => (p.artifacts || []).includes("schedule"));
  if (at >= 0) setPass(at);
  if (pt.node_ids && pt.node_ids.length) gotoNode(pt.node_ids[pt.node_ids.length - 1]);
}

function rooflineChart(ctx, run) {
  const { fmtBytes } = ctx;
  const W = 560, H = 300, L = 58, R = 14, T = 14, B = 38;
  const pts = run.points; // every kernel: one with no floating-point work (or too quick to time) sits on the axes
  const good = pts.filter((p) => p.intensity > 0 && p.flops_per_s > 0);
  const bw = run.bandwidth, peak = run.peak_flops;
  const ais = good.map((p) => p.intensity).concat(bw && peak ? [run.ridge] : []);
  const perf = good.map((p) => p.flops_per_s).concat(peak ? [peak] : []);
  const lx0 = Math.floor(Math.log10(Math.min(...ais, 0.1))) , lx1 = Math.ceil(Math.log10(Math.max(...ais, 10)) + 0.3);
  const ly0 = Math.floor(Math.log10(Math.min(...perf, 1e8))), ly1 = Math.ceil(Math.log10(Math.max(...perf, 1e9)) + 0.2);
  const X = (ai) => L + ((Math.log10(ai) - lx0) / (lx1 - lx0)) * (W - L - R);
  const Y = (f) => T + (1 - (Math.log10(f) - ly0) / (ly1 - ly0)) * (H - T - B);
  const el = svg("svg", { class: "ci-roofline", width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-points": pts.length });
  for (let e = lx0; e <= lx1; e++) {
    el.append(svg("line", { class: "ci-roof-grid", x1: X(10 ** e), x2: X(10 ** e), y1: T, y2: H - B }));
    el.append(svg("text", { x: X(10 ** e), y: H - B + 14, "text-anchor": "middle" }, `${10 ** e >= 1 ? 10 ** e : (10 ** e).toPrecision(1)}`));
  }
  for (let e = ly0; e <= ly1; e++) {
    el.append(svg("line", { class: "ci-roof-grid", x1: L, x2: W - R, y1: Y(10 ** e), y2: Y(10 ** e) }));
    el.append(svg("text", { x: L - 4, y: Y(10 ** e) + 4, "text-anchor": "end" }, fmtNum(10 ** e, "")));
  }
  el.append(svg("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, "arithmetic intensity (FLOP / byte)"));
  el.append(svg("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - B) / 2})` }, "FLOP/s"));
  if (bw && peak) {
    const a0 = 10 ** lx0, a1 = 10 ** lx1, r = run.ridge;
    const pathPts = [[a0, Math.max(bw * a0, 10 ** ly0)], [r, peak], [a1, peak]];
    el.append(svg("polyline", { class: "ci-roof-line", points: pathPts.map(([a, f]) => `${X(a)},${Y(f)}`).join(" ") }));
    el.append(svg("text", { x: X(r) + 6, y: Y(peak) - 4 }, `peak ${fmtNum(peak, "FLOP/s")}`));
    el.append(svg("text", { x: X(a0) + 4, y: Y(Math.max(bw * a0, 10 ** ly0)) - 6 }, `memory ${fmtNum(bw, "B/s")}`));
  }
  for (const p of pts) {
    const onAxes = !(p.intensity > 0 && p.flops_per_s > 0);
    const ai = p.intensity > 0 ? Math.max(p.intensity, 10 ** lx0) : 10 ** lx0;
    const fs = p.flops_per_s > 0 ? Math.max(p.flops_per_s, 10 ** ly0) : 10 ** ly0;
    const c = svg("circle", { class: `ci-roof-point${onAxes ? " ci-roof-zero" : ""}`, cx: X(ai), cy: Y(fs), r: Math.max(3, Math.min(9, 3 + 12 * Math.sqrt(p.share || 0))), "data-kernel": p.kernel, "data-function": p.function });
    c.append(svg("title", {}, onAxes ? `${p.kernel}: ${p.flops ? "too quick to time" : "no floating-point work"} (${fmtBytes(p.bytes)} moved)` : `${p.kernel}: ${fmtNum(p.flops_per_s, "FLOP/s")} at ${p.intensity.toFixed(3)} FLOP/B${p.efficiency ? ` (${(p.efficiency * 100).toFixed(0)}% of the ${p.bound} roof)` : ""}`));
    c.addEventListener("click", () => selectKernel(ctx, p));
    el.append(c);
  }
  return el;
}

function kernelTable(ctx, run) {
  const { fmtTime, fmtBytes, model } = ctx;
  const total = run.points.reduce((a, p) => a + p.seconds, 0) || 1;
  const tbl = h("table", { class: "ci-profile-table ci-pf-kernels" });
  tbl.append(h("tr", {}, ...["kernel", "calls", "time / run", "share", "bytes", "flops", "FLOP/B", "GFLOP/s", "GB/s", "of roof", ""].map((t) => h("th", { text: t }))));
  for (const p of run.points) {
    p.share = p.seconds / total;
    const tr = h(
      "tr",
      { class: `ci-pf-krow${model.get("kernel") === p.function ? " current" : ""}`, "data-kernel": p.kernel, onclick: () => selectKernel(ctx, p) },
      h("td", { text: p.kernel }),
      h("td", { class: "ci-pf-num", text: String(p.calls) }),
      h("td", { class: "ci-pf-num", text: fmtTime(p.seconds) }),
      h("td", { class: "ci-pf-num", text: `${(p.share * 100).toFixed(1)}%` }),
      h("td", { class: "ci-pf-num", text: fmtBytes(p.bytes) }),
      h("td", { class: "ci-pf-num", text: fmtNum(p.flops, "") }),
      h("td", { class: "ci-pf-num", text: p.intensity === null ? "–" : p.intensity.toFixed(3) }),
      h("td", { class: "ci-pf-num", text: p.flops_per_s ? (p.flops_per_s / 1e9).toFixed(2) : "–" }),
      h("td", { class: "ci-pf-num", text: p.bytes_per_s ? (p.bytes_per_s / 1e9).toFixed(2) : "–" }),
      h("td", { class: "ci-pf-num", text: p.efficiency ? `${(p.efficiency * 100).toFixed(0)}% ${p.bound}` : "–" }),
      h("td", {}, h("a", { href: "#", class: "ci-link ci-pf-nodes", text: "nodes", onclick: (e) => (e.preventDefault(), e.stopPropagation(), selectNodes(ctx, p)) }))
    );
    tbl.append(tr);
  }
  return tbl;
}

/** Fill the Profile pane. ctx: {pane, data, model, fmtTime, fmtBytes, showTab, setPass, gotoNode}.
 * Top: the cell's timeline beside the roofline; then the per-kernel run profile; then the passes. */
export function buildProfilePane(ctx) {
  const { pane, data, model } = ctx;
  pane.append(h("style", { text: STYLE }));
  const cp = data.cell_profile;
  const top = h("div", { class: "ci-pf-top" });
  pane.append(top);
  if (cp && cp.timeline) {
    top.append(h("div", { class: "ci-pf-col" }, h("div", { class: "ci-pf-section", text: "Where the cell's time went" }), timelineBox(ctx, cp.timeline)));
  }
  const run = cp && cp.run;
  const right = h("div", { class: "ci-pf-col" }, h("div", { class: "ci-pf-section", text: "Run profile per kernel: roofline" }));
  top.append(right);
  if (!run || !run.profiled) {
    right.append(h("div", { class: "ci-dim ci-pf-note", text: (cp && cp.note) || "run with %%caten --profile for the per-kernel run profile and the roofline" }));
  } else {
    const m = run.machine;
    const tbl = kernelTable(ctx, run); // sets each point's share of the run (the chart's marker size)
    const chart = rooflineChart(ctx, run);
    right.append(
      chart,
      h("div", { class: "ci-dim ci-pf-machine", text: m ? `${m.cpu} · ${m.threads} thread(s) · memory bandwidth ${fmtNum(m.bandwidth, "B/s")} · peak ${fmtNum(m.peak_flops, "FLOP/s")} (float32 multiply-add), measured once on this machine · ridge ${run.ridge.toFixed(2)} FLOP/B · click a point for its kernel` : cp.note || "no machine ceilings" })
    );
    pane.append(h("div", { class: "ci-pf-section", text: "Kernels of the profiled run" }), tbl);
    const mark = () => {
      const cur = model.get("kernel");
      for (const c of chart.querySelectorAll(".ci-roof-point")) c.classList.toggle("current", c.getAttribute("data-function") === cur);
      for (const r of tbl.querySelectorAll(".ci-pf-krow")) r.classList.toggle("current", run.points.some((p) => p.kernel === r.getAttribute("data-kernel") && p.function === cur));
    };
    mark();
    model.on("change:kernel", mark);
  }
  const prof = data.profile || {};
  const img = h("img", { class: "ci-profile-img", alt: "time per pass (matplotlib)" });
  const setImg = () => {
    const png = model.get("profile_png") || prof.png;
    if (png) img.src = `data:image/png;base64,${png}`;
    img.style.display = png ? "" : "none";
  };
  setImg();
  model.on("change:profile_png", setImg);
  pane.append(h("div", { class: "ci-pf-section", text: "Passes" }), img, ...passTable(ctx));
}
