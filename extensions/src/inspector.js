// caten_lab Inspector: steps through a PassTrace (passes and rewrites) entirely in the browser.
// The kernel sends one JSON document (see caten_lab/notebook/payload.py); graphs per rewrite are
// rebuilt here from the rewrite records; layout runs in a Web Worker with Graphviz compiled to WASM.
import workerSource from "virtual:layout-worker";
import { compactRanges, h } from "./dom.js";
import { makeKernelView } from "./kernel_view.js";
import { buildProfilePane } from "./profile_view.js";
import { DIFF, KERNEL_COLORS, OUTLINE, Replayer, UNCHANGED, diffSets, kernelOf, neighbourhood, producerMap, stateFromGraph, toDot, unionState } from "./graph_model.js";


// ---- layout: one shared worker for every Inspector on the page --------------------------------
let layoutEngine = null;

function makeLayoutEngine() {
  const url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
  const pending = new Map();
  let nextId = 1;
  let worker = null;
  let fallback = null; // the same module imported on the main thread
  try {
    worker = new Worker(url, { type: "module" });
    worker.onmessage = (e) => {
      const job = pending.get(e.data.id);
      if (!job) return;
      pending.delete(e.data.id);
      if (e.data.error) job.reject(new Error(e.data.error));
      else job.resolve(e.data.svg);
    };
    worker.onerror = (e) => {
      // a worker that cannot start (CSP, old browser): fall back to the main thread
      e.preventDefault?.();
      worker = null;
      for (const [, job] of pending) job.retry();
      pending.clear();
    };
  } catch (err) {
    worker = null;
  }
  const mainThread = async (dot) => {
    if (fallback === null) fallback = import(/* webpackIgnore: true */ url);
    const mod = await fallback;
    return mod.renderDot(dot);
  };
  const cache = new Map();
  const layout = (dot) => {
    const hit = cache.get(dot);
    if (hit) return hit;
    const p = new Promise((resolve, reject) => {
      const run = () => {
        if (worker === null) {
          mainThread(dot).then(resolve, reject);
          return;
        }
        const id = nextId++;
        pending.set(id, { resolve, reject, retry: run });
        worker.postMessage({ id, dot });
      };
      run();
    });
    p.catch(() => cache.delete(dot));
    cache.set(dot, p);
    if (cache.size > 400) cache.delete(cache.keys().next().value);
    return p;
  };
  return { layout, isCached: (dot) => cache.has(dot), mode: () => (worker === null ? "main-thread" : "worker") };
}

const stickyByModel = new WeakMap();

function engine() {
  if (layoutEngine === null) layoutEngine = makeLayoutEngine();
  return layoutEngine;
}



function fmtTime(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1e-3) return `${(s * 1e6).toFixed(0)} µs`;
  if (s < 1) return `${(s * 1e3).toFixed(1)} ms`;
  return `${s.toFixed(2)} s`;
}

function fmtBytes(b) {
  if (!b) return "0 B";
  const u = ["B", "kB", "MB", "GB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) {
    b /= 1024;
    i++;
  }
  return `${b.toFixed(i ? 1 : 0)} ${u[i]}`;
}

// ---- C syntax highlighting (in the browser: keeps Pygments off the kernel's path) ---------------
const C_KEYWORDS = new Set("for if else while do return static inline const restrict void struct typedef sizeof break continue switch case default extern volatile goto enum union".split(" "));
const C_TYPES = /^(?:int|float|double|char|long|short|unsigned|signed|bool|_Bool|size_t|ptrdiff_t|u?int(?:8|16|32|64)_t)$/;
const C_TOKEN = /(\/\*.*?\*\/|\/\*.*$)|(\/\/.*$)|("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')|(\b(?:0[xX][0-9a-fA-F]+|\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+(?:[eE][+-]?\d+)?)[fFuUlL]*\b)|([A-Za-z_]\w*)(?=\s*\()|([A-Za-z_]\w*)|([^\w\s"'/]+|\/)/g;
const escHtml = (t) => t.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

function highlightC(text) {
  const out = [];
  let inComment = false;
  for (const line of text.replace(/\n$/, "").split("\n")) {
    let rest = line;
    let html = "";
    if (inComment) {
      const end = rest.indexOf("*/");
      if (end < 0) {
        out.push(`<span class="cm">${escHtml(rest)}</span>`);
        continue;
      }
      html += `<span class="cm">${escHtml(rest.slice(0, end + 2))}</span>`;
      rest = rest.slice(end + 2);
      inComment = false;
    }
    if (/^\s*#/.test(rest)) {
      out.push(html + `<span class="cp">${escHtml(rest)}</span>`);
      continue;
    }
    let last = 0;
    rest.replace(C_TOKEN, (m, blk, line1, str, num, fn, ident, op, offset) => {
      html += escHtml(rest.slice(last, offset));
      last = offset + m.length;
      let cls = "";
      if (blk) {
        cls = "cm";
        if (!blk.endsWith("*/") || blk.length < 4) inComment = true;
      } else if (line1) cls = "c1";
      else if (str) cls = "s";
      else if (num) cls = /[.eE]/.test(num) && !/^0[xX]/.test(num) ? "mf" : "mi";
      else if (fn) cls = C_KEYWORDS.has(fn) ? "k" : C_TYPES.test(fn) ? "kt" : "nf";
      else if (ident) cls = C_KEYWORDS.has(ident) ? "k" : C_TYPES.test(ident) ? "kt" : "";
      else if (op) cls = "o";
      html += cls ? `<span class="${cls}">${escHtml(m)}</span>` : escHtml(m);
      return m;
    });
    out.push(html + escHtml(rest.slice(last)));
  }
  return out;
}

// scroll a box so that `item` is visible, without scrolling the notebook around it
function scrollWithin(box, item, center) {
  if (!box || !item) return;
  const top = item.offsetTop; // the box is position: relative, so this is relative to it
  const bottom = top + item.offsetHeight;
  if (center) box.scrollTop = Math.max(0, top - box.clientHeight / 3);
  else if (top < box.scrollTop) box.scrollTop = top;
  else if (bottom > box.scrollTop + box.clientHeight) box.scrollTop = bottom - box.clientHeight;
}

// ---- the widget -------------------------------------------------------------------------------------
// over the node cap, a whole pass that changed at most this many nodes draws them and their neighbours
const MAX_FOCUS_CHANGES = 60;
// a pass worth showing when unchanged passes are hidden: it changed the graph, failed, or produced artifacts
const interesting = (p) => p.changed || p.error || (p.artifacts && p.artifacts.length > 0);
// steps of a pass: its graph rewrites, or for a codegen pass its kernel-IR rewrites
const nSteps = (p) => (p.kir ? p.kir.steps.length : p.rewrites.length);
const stepAt = (p, k) => (p.kir ? p.kir.steps[k - 1] : p.rewrites[k - 1]);

function render({ model, el }) {
  const data = JSON.parse(model.get("data_json") || "{}");
  if (!data.passes || !data.passes.length) {
    const box = h("div", { class: "caten-inspector" }, h("div", { class: "ci-tabs" }, h("span", { class: "ci-title", text: data.title || "caten_lab inspector" })));
    box.append(h("div", { class: "ci-empty", text: "no passes were traced (the numpy backend interprets the graph directly)" }));
    const res = data.result;
    if (res) {
      const tbl = h("table", { class: "ci-result-table" });
      tbl.append(h("tr", {}, ...["output", "shape", "dtype", "min", "max", "mean", "first values"].map((t) => h("th", { text: t }))));
      for (const o of res.outputs || []) tbl.append(h("tr", {}, ...[o.name, o.shape, o.dtype, o.min, o.max, o.mean, o.head].map((t) => h("td", { text: t === undefined ? "" : String(t) }))));
      box.append(h("div", { class: "ci-dim", text: `run time ${fmtTime(res.run_s)}${res.note ? " · " + res.note : ""}` }), tbl);
    }
    el.append(box);
    return;
  }
  const replayer = new Replayer(data);
  const kernels = data.kernels || [];
  const nodeKernel = new Map();
  const kernelIndex = new Map();
  kernels.forEach((k, i) => {
    kernelIndex.set(k.name, i);
    for (const id of k.node_ids) nodeKernel.set(id, k.name);
  });
  const cLines = (data.c && data.c.source_map) || [];
  const nodeToC = new Map();
  cLines.forEach((ids, i) => {
    for (const id of ids) {
      if (!nodeToC.has(id)) nodeToC.set(id, []);
      nodeToC.get(id).push(i + 1);
    }
  });
  const toggled = new Set(); // kernels the user expanded (when collapsed) or collapsed (when framed)
  const scheduleAt = data.passes.findIndex((p) => (p.artifacts || []).includes("schedule"));
  // kernels are drawn from the scheduling pass on; before it only on request (collapse), for the nodes
  // that survive into the scheduled graph (node ids are stable across passes)
  const kernelsOnAt = (pi) => kernels.length > 0 && ((scheduleAt >= 0 && pi >= scheduleAt) || model.get("collapse_kernels"));
  const boxed = (k) => model.get("collapse_kernels") !== toggled.has(k);
  // view state that outlives a pass change and a re-rendered output of the same cell (one model per cell)
  if (!stickyByModel.has(model)) stickyByModel.set(model, { renderAll: false, follow: true, rngOpen: new Set() });
  const sticky = stickyByModel.get(model);
  // random-number internals (payload.py marks them "grp": "rng <source line>"): one box each, expandable
  const rngIndex = new Map();
  for (const r of data.nodes) if (r.grp && !rngIndex.has(r.grp)) rngIndex.set(r.grp, rngIndex.size);
  const rngByIndex = [...rngIndex.keys()];
  const rngBoxed = (grp) => !sticky.rngOpen.has(grp);
  let playTimer = null;
  let renderSeq = 0;
  let lastRenderMs = 0;
  const local = { tab: "graph" };

  // ---- skeleton
  const root = h("div", { class: "caten-inspector", tabindex: "0" });
  el.append(root);
  const panes = model.get("panes") || ["graph", "profile", "c", "result"];
  const tabs = h("div", { class: "ci-tabs" });
  const title = h("span", { class: "ci-title", text: data.title || "caten_lab inspector" });
  tabs.append(title);
  const paneEls = {};
  const tabBtns = {};
  const body = h("div", { class: "ci-body" });
  for (const name of ["graph", "profile", "c", "result"]) {
    if (!panes.includes(name)) continue;
    const label = { graph: "Graph", profile: "Profile", c: "C source", result: "Result" }[name];
    tabBtns[name] = h("button", { class: "ci-tab", "data-pane": name, text: label, onclick: () => showTab(name) });
    tabs.append(tabBtns[name]);
    paneEls[name] = h("div", { class: `ci-pane ci-pane-${name}` });
    body.append(paneEls[name]);
  }
  root.append(tabs, body);

  function showTab(name) {
    local.tab = name;
    // the matplotlib chart is drawn by the kernel only when somebody looks at it
    if (name === "profile" && !model.get("profile_png") && !(data.profile && data.profile.png) && !local.askedProfile) {
      local.askedProfile = true;
      model.send({ type: "need_profile_png" });
    }
    for (const [n, p] of Object.entries(paneEls)) p.style.display = n === name ? "" : "none";
    for (const [n, b] of Object.entries(tabBtns)) b.classList.toggle("active", n === name);
  }

  // ---- graph pane
  const g = paneEls.graph;
  const passListEl = h("div", { class: "ci-passlist" });
  const graphEl = h("div", { class: "ci-graph" });
  const detailEl = h("div", { class: "ci-details" });
  const btn = (text, title, fn, cls = "") => h("button", { class: `ci-btn ${cls}`, title, text, onclick: fn });
  const passSlider = h("input", { type: "range", min: "0", max: String(data.passes.length - 1), value: "0", class: "ci-pass-slider" });
  const rwSlider = h("input", { type: "range", min: "0", max: "0", value: "0", class: "ci-rw-slider" });
  const passLabel = h("span", { class: "ci-pass-label" });
  const rwLabel = h("span", { class: "ci-rw-label" });
  const viewSel = h("select", { class: "ci-view" });
  for (const [v, t] of [["after", "after"], ["before", "before"], ["side", "before | after"], ["diff", "diff"]]) viewSel.append(h("option", { value: v, text: t }));
  const hideChk = h("input", { type: "checkbox", class: "ci-hide" });
  const collapseChk = h("input", { type: "checkbox", class: "ci-collapse" });
  const hopsIn = h("input", { type: "number", min: "0", max: "9", value: "0", class: "ci-hops", title: "show only k hops around the selected node (0 = whole graph)" });
  const playBtn = btn("play", "play / pause (space)", () => togglePlay(), "ci-play");
  const zoomState = { scale: 1, fit: false };
  const followChk = h("input", { type: "checkbox", class: "ci-follow" });
  followChk.checked = sticky.follow;
  const changeLabel = h("span", { class: "ci-change-label" });
  const legendEl = h("div", { class: "ci-legend" });
  const findIn = h("input", { type: "search", class: "ci-find", placeholder: "find node: op, name, v12, n3, source line…", title: "the node list: every node of the step matching all the words (op, value name, value id, node id, source line)" });
  const nodeListEl = h("div", { class: "ci-nodelist" });
  if (g) {
    g.append(
      h(
        "div",
        { class: "ci-toolbar" },
        btn("|◀", "first pass (Home)", () => stepPass("first"), "ci-first"),
        btn("◀", "previous pass (←)", () => stepPass(-1), "ci-prev"),
        playBtn,
        btn("▶", "next pass (→)", () => stepPass(1), "ci-next"),
        btn("▶|", "last pass (End)", () => stepPass("last"), "ci-last"),
        passSlider,
        passLabel
      ),
      h(
        "div",
        { class: "ci-toolbar" },
        h("span", { class: "ci-lbl", text: "rewrite" }),
        btn("◀", "previous rewrite (↑)", () => stepRewrite(-1), "ci-rw-prev"),
        rwSlider,
        btn("▶", "next rewrite (↓)", () => stepRewrite(1), "ci-rw-next"),
        btn("whole pass", "show the whole pass (Esc)", () => setRewrite(-1), "ci-rw-all"),
        rwLabel
      ),
      h(
        "div",
        { class: "ci-toolbar" },
        btn("◀ change", "previous change (p)", () => stepChange(-1), "ci-change-prev"),
        btn("change ▶", "next change (n): the next node this step touched, then the next step that changes something", () => stepChange(1), "ci-change-next"),
        changeLabel,
        h("label", { title: "after every step, zoom and scroll to what it changed; unchecked: keep the view still" }, followChk, " go to the change"),
        findIn
      ),
      nodeListEl,
      h(
        "div",
        { class: "ci-toolbar" },
        h("label", {}, "view ", viewSel),
        h("label", {}, hideChk, " hide unchanged passes"),
        h("label", {}, collapseChk, " collapse kernels"),
        h("label", {}, "focus hops ", hopsIn),
        btn("−", "zoom out", () => zoom(1 / 1.25)),
        btn("fit", "fit the whole graph in the pane (both axes)", () => zoom(0), "ci-fit"),
        btn("+", "zoom in", () => zoom(1.25)),
        btn("SVG", "download the drawn graph as an SVG file", () => downloadSvg(), "ci-svg")
      ),
      legendEl,
      h("div", { class: "ci-main" }, passListEl, graphEl, detailEl)
    );
  }

  function visiblePasses() {
    const hide = model.get("hide_unchanged");
    const out = [];
    data.passes.forEach((p, i) => {
      if (!hide || interesting(p) || i === model.get("pass_index")) out.push(i);
    });
    return out;
  }

  function setPass(i) {
    i = Math.max(0, Math.min(i, data.passes.length - 1));
    model.set("pass_index", i);
    model.set("rewrite_index", -1);
    model.save_changes();
  }

  function stepPass(d) {
    const vis = visiblePasses().filter((i) => !model.get("hide_unchanged") || interesting(data.passes[i]));
    if (!vis.length) return;
    const cur = model.get("pass_index");
    if (d === "first") return setPass(vis[0]);
    if (d === "last") return setPass(vis[vis.length - 1]);
    if (d > 0) {
      const nxt = vis.find((i) => i > cur);
      if (nxt !== undefined) setPass(nxt);
      else stopPlay();
    } else {
      const prv = [...vis].reverse().find((i) => i < cur);
      if (prv !== undefined) setPass(prv);
    }
  }

  function setRewrite(k) {
    const p = data.passes[model.get("pass_index")];
    k = Math.max(-1, Math.min(k, nSteps(p)));
    if (k === 0 && nSteps(p)) k = 1;
    model.set("rewrite_index", k);
    model.save_changes();
  }

  function stepRewrite(d) {
    const p = data.passes[model.get("pass_index")];
    if (!nSteps(p)) return stepPass(d);
    const k = model.get("rewrite_index");
    if (d > 0) {
      if (k < 0) setRewrite(1);
      else if (k < nSteps(p)) setRewrite(k + 1);
      else stepPass(1);
    } else if (k > 1) setRewrite(k - 1);
    else setRewrite(-1);
  }

  function togglePlay() {
    if (playTimer) return stopPlay();
    playBtn.textContent = "pause";
    playTimer = setInterval(() => {
      const p = data.passes[model.get("pass_index")];
      if (model.get("rewrite_index") >= 0 && nSteps(p)) stepRewrite(1);
      else stepPass(1);
    }, Math.max(200, model.get("play_interval_ms") || 700));
  }

  function stopPlay() {
    if (playTimer) clearInterval(playTimer);
    playTimer = null;
    playBtn.textContent = "play";
  }

  function downloadSvg() {
    const svg = graphEl.querySelector("svg");
    if (!svg) return;
    const p = data.passes[model.get("pass_index")];
    const blob = new Blob([svg.outerHTML], { type: "image/svg+xml" });
    const a = h("a", { href: URL.createObjectURL(blob), download: `caten_${p.index}_${p.name}.svg` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  function zoom(f) {
    zoomState.fit = f === 0;
    if (f !== 0) {
      // from what is on screen (a focused change may have zoomed), not from the last button press
      const svg0 = graphEl.querySelector("svg");
      const cur = svg0 && svg0.parentElement.dataset.scale ? parseFloat(svg0.parentElement.dataset.scale) : null;
      zoomState.scale = Math.max(0.05, Math.min(8, (cur || zoomState.scale) * f));
      zoomState.abs = true;
    }
    for (const svg of graphEl.querySelectorAll("svg")) applyZoom(svg);
  }

  // the scale of a drawn graph: "fit" fits both axes of the pane; else the user's zoom; else the
  // width, never shrinking labels below legibility (wide graphs scroll instead)
  function applyZoom(svg) {
    const w0 = parseFloat(svg.dataset.w0 || svg.getAttribute("width") || "0");
    if (!svg.dataset.w0) {
      svg.dataset.w0 = String(w0);
      svg.dataset.h0 = String(parseFloat(svg.getAttribute("height") || "0"));
    }
    const h0 = parseFloat(svg.dataset.h0);
    const holder = svg.parentElement;
    const availW = Math.max(200, (holder && holder.clientWidth) || 600) - 4;
    const availH = Math.max(200, (holder && holder.clientHeight) || 560) - 4;
    let s;
    if (zoomState.fit) s = Math.min(availW / Math.max(1, w0), availH / Math.max(1, h0), 1.2);
    else if (zoomState.abs) s = zoomState.scale;
    else s = Math.max(0.6, Math.min(1.2, availW / Math.max(1, w0)));
    setScale(svg, s);
  }

  // the pair of states the current step compares: (before, after) of the pass or of one rewrite
  function currentPair() {
    const pi = model.get("pass_index");
    const p = data.passes[pi];
    const k = model.get("rewrite_index");
    if (k >= 1 && k <= p.rewrites.length) {
      return { before: replayer.state(pi, k - 1), after: replayer.state(pi, k), rewrite: p.rewrites[k - 1] };
    }
    const before = p.before === null ? null : stateFromGraph(data, p.before);
    const after = p.after === null ? null : stateFromGraph(data, p.after);
    return { before, after, rewrite: null };
  }

  function renderPassList() {
    passListEl.replaceChildren();
    const cur = model.get("pass_index");
    const hide = model.get("hide_unchanged");
    data.passes.forEach((p, i) => {
      if (hide && !interesting(p) && i !== cur) return;
      const item = h(
        "div",
        { class: `ci-pass${i === cur ? " current" : ""}${p.changed ? " changed" : " unchanged"}${p.error ? " error" : ""}`, "data-index": String(i), title: p.description, onclick: () => setPass(i) },
        h("span", { class: "ci-pass-name", text: `${i}. ${p.name}` }),
        h("span", { class: "ci-pass-meta", text: `${fmtTime(p.wall_s)} · ${p.nodes_before}→${p.nodes_after}${p.n_rewrites ? ` · ${p.n_rewrites} rw` : ""}${p.artifacts && p.artifacts.length ? ` · +${p.artifacts.join(",")}` : ""}` })
      );
      passListEl.append(item);
    });
    scrollWithin(passListEl, passListEl.querySelector(".current"), false);
  }

  function drawSpecs(pair, pi) {
    const view = model.get("view");
    const sel = model.get("selected_node");
    const hops = model.get("focus_hops");
    const { added, removed, changed } = diffSets(pair.before, pair.after);
    const cap = model.get("node_cap");
    const all = sticky.renderAll;
    const rwSeeds = (state) => {
      // what the rewrite touched: the value it replaced, its users, what it produced
      const seeds = [...pair.rewrite.matched, ...pair.rewrite.produced.map((i) => data.nodes[i].id)];
      const prod = producerMap(state);
      for (const v of pair.rewrite.replaced) if (typeof v === "string" && prod.has(v)) seeds.push(prod.get(v));
      return seeds;
    };
    const focusFor = (state) => {
      if (!state) return [null, ""];
      if (hops > 0 && sel >= 0 && state.nodes.has(sel)) return [neighbourhood(state, [sel], hops), `${hops} hops around n${sel}`];
      const over = state.nodes.size > cap && !all;
      // over the cap: a selected node (from the C pane or the node list) is shown with its neighbourhood
      if (over && sel >= 0 && state.nodes.has(sel)) return [neighbourhood(state, [sel], 2), `2 hops around n${sel}`];
      if (pair.rewrite && (hops > 0 || over)) return [neighbourhood(state, rwSeeds(state), hops > 0 ? hops : 2), `${hops > 0 ? hops : 2} hops around the rewrite`];
      // a whole pass over the cap that changed a few nodes: what it changed, with their neighbours
      const nChanged = added.size + removed.size + changed.size;
      if (over && !model.get("collapse_kernels") && nChanged > 0 && nChanged <= MAX_FOCUS_CHANGES) {
        // (found in the union of before and after, so a removed node's neighbours show in "after" too)
        const around = neighbourhood(unionState(pair.before, pair.after), [...added, ...removed, ...changed], 2);
        const keep = new Set([...around].filter((id) => state.nodes.has(id)));
        return [keep, `2 hops around the ${nChanged} changed node${nChanged > 1 ? "s" : ""}`];
      }
      return [null, ""];
    };
    const showRefused = (data.passes[pi].artifacts || []).includes("fusion");
    const common = { kernelsOn: kernelsOnAt(pi), boxed, nodeKernel, kernelIndex, dashed: new Set(), refused: showRefused ? refusedNodes : null, rngBoxed, rngIndex, names: data.value_names || {} };
    const specs = [];
    const marksFor = (which) => {
      const m = new Map();
      if (which !== "before") for (const id of added) m.set(id, "added");
      if (which !== "after") for (const id of removed) m.set(id, "removed");
      for (const id of changed) m.set(id, "changed");
      return m;
    };
    // a rewrite: the nodes its pattern matched and the nodes it produced, outlined
    const outline = new Map();
    if (pair.rewrite) {
      for (const id of pair.rewrite.matched) outline.set(id, "matched");
      for (const i of pair.rewrite.produced) outline.set(data.nodes[i].id, "produced");
    }
    const push = (caption, state, opts) => {
      const [keep, note] = focusFor(state);
      specs.push({ caption: note ? `${caption} · ${note}` : caption, state, aroundSel: note.endsWith(`n${sel}`), opts: { ...common, outline, ...opts, keep } });
    };
    if (view === "diff" && pair.before && pair.after) {
      push("diff", unionState(pair.before, pair.after), { prefix: "d", marks: marksFor("diff"), dashed: removed, grey: true });
    } else {
      const showBefore = view === "before" || view === "side" || !pair.after;
      const showAfter = view === "after" || view === "side" || (view !== "side" && !showBefore);
      if (showBefore && pair.before) push("before", pair.before, { prefix: "b", marks: marksFor("before") });
      if (showAfter && pair.after) push("after", pair.after, { prefix: "a", marks: marksFor("after") });
    }
    for (const s2 of specs) s2.count = s2.opts.keep ? s2.opts.keep.size : s2.state.nodes.size;
    return { specs, added, removed, changed };
  }

  // how many boxes a spec draws: collapsed kernels and random-number groups count once
  function visibleCount(spec) {
    const ks = new Set();
    let n = 0;
    const member = spec.opts.kernelsOn ? kernelOf(spec.state, nodeKernel) : null;
    for (const [id, node] of spec.state.nodes) {
      if (spec.opts.keep && !spec.opts.keep.has(id)) continue;
      const k = member ? member.get(id) : undefined;
      if (k !== undefined && boxed(k)) ks.add(`k${k}`);
      else if (node.rec.grp && rngBoxed(node.rec.grp)) ks.add(`r${node.rec.grp}`);
      else n++;
    }
    return n + ks.size;
  }

  async function renderGraph() {
    if (!g) return;
    const seq = ++renderSeq;
    const t0 = performance.now();
    root.dataset.state = "rendering";
    const pi = model.get("pass_index");
    const p = data.passes[pi];
    // a step index left over from another pass (the pass changes first, then its step) means the whole pass
    const k0 = model.get("rewrite_index");
    const k = k0 > nSteps(p) ? -1 : k0;
    passSlider.value = String(pi);
    passLabel.textContent = `${pi}/${data.passes.length - 1} ${p.name}${p.changed ? "" : " (no change)"}${p.error ? " — FAILED" : ""}`;
    const ns = nSteps(p);
    rwSlider.max = String(Math.max(0, ns));
    rwSlider.min = ns ? "1" : "0";
    rwSlider.value = String(Math.max(0, k));
    rwSlider.disabled = !ns;
    const what = p.kir ? "kernel-IR rewrites" : "rewrites";
    rwLabel.textContent = ns
      ? k >= 1
        ? `${k}/${ns}: ${stepAt(p, k).rule}  (${stepAt(p, k).loc})`
        : `whole pass · ${ns} ${what}`
      : p.rewrites_truncated || (p.kir && p.kir.steps_note)
        ? `${p.n_rewrites} ${what} (${p.kir ? p.kir.steps_note : "too many to step"})`
        : `no recorded ${what}`;
    viewSel.value = model.get("view");
    hideChk.checked = model.get("hide_unchanged");
    collapseChk.checked = model.get("collapse_kernels");
    hopsIn.value = String(model.get("focus_hops"));
    renderPassList();
    if (p.kir) {
      // a codegen pass: the kernel list and the kernel-IR listings instead of the graph (whose changed
      // lines kernel_view.js highlights and scrolls to; "next change" steps its rewrites)
      const st = kview.render(pi, k);
      legendEl.replaceChildren();
      drawn = [];
      nav.items = [];
      changeLabel.textContent = "kernel-IR rewrites: ↓ / n";
      lastRenderMs = performance.now() - t0;
      root.dataset.state = "ready";
      root.dataset.pass = String(pi);
      root.dataset.rewrite = String(k);
      root.dataset.mode = "kernel";
      root.dataset.kernel = st.kernel;
      root.dataset.renderMs = lastRenderMs.toFixed(1);
      model.set("status", JSON.stringify({ pass: pi, rewrite: k, view: model.get("view"), ms: Math.round(lastRenderMs), mode: "kernel", kernel: st.kernel, hl_after: st.hl_after, hl_before: st.hl_before, lines: st.lines }));
      model.save_changes();
      return;
    }
    root.dataset.mode = "graph";
    const pair = currentPair();
    const { specs } = drawSpecs(pair, pi);
    const cap = model.get("node_cap");
    const boxes = [];
    const jobs = [];
    const prevScroll = new Map(); // prefix -> scroll of its holder, to keep the view still
    for (const hEl of graphEl.querySelectorAll(".ci-svg-holder[data-prefix]")) prevScroll.set(hEl.dataset.prefix, { left: hEl.scrollLeft, top: hEl.scrollTop, scale: parseFloat(hEl.dataset.scale || "0") });
    for (const spec of specs) {
      const count = visibleCount(spec);
      const box = h("div", { class: "ci-graph-box" }, h("div", { class: "ci-caption", text: `${spec.caption} · ${count} nodes` }));
      if (count > cap && !sticky.renderAll) {
        const msg = h(
          "div",
          { class: "ci-cap" },
          h("div", { text: `${count} nodes is more than the cap of ${cap}: laying it out may take a while.` }),
          btn(`render anyway (${count} nodes)`, "lay out the whole graph (for every pass of this cell)", () => {
            sticky.renderAll = true;
            renderGraph();
          }, "ci-render-anyway"),
          kernels.length ? btn("collapse by kernel", "one box per fused kernel", () => (model.set("collapse_kernels", true), model.save_changes())) : null,
          h("div", { class: "ci-hint", text: "or pick a node in the node list (the \u201cfind node\u201d box above) or from a C line: it is drawn with its neighbourhood" })
        );
        box.append(msg);
        boxes.push(box);
        continue;
      }
      const holder = h("div", { class: "ci-svg-holder", "data-prefix": spec.opts.prefix, text: "laying out…" });
      box.append(holder);
      boxes.push(box);
      const dot = toDot(spec.state, spec.opts);
      jobs.push(engine().layout(dot).then((svg) => ({ holder, svg, spec })));
    }
    if (pair.after === null && pair.before === null) boxes.push(h("div", { class: "ci-cap", text: "this pass recorded no graph" }));
    let results;
    try {
      results = await Promise.all(jobs);
    } catch (err) {
      if (seq !== renderSeq) return;
      graphEl.replaceChildren(h("pre", { class: "ci-error", text: `layout failed: ${err.message}` }));
      root.dataset.state = "error";
      return;
    }
    if (seq !== renderSeq) return; // a newer step superseded this one
    graphEl.replaceChildren(...boxes);
    for (const { holder, svg } of results) {
      holder.innerHTML = svg;
      const svgEl = holder.querySelector("svg");
      if (svgEl) applyZoom(svgEl);
      holder.addEventListener("click", (e) => onGraphClick(e));
    }
    drawn = results.map(({ holder, spec }) => ({ holder, spec }));
    renderLegend(pair, specs);
    buildChangeList(pair);
    const follow = sticky.follow && nav.pendingNode === null;
    if (nav.pendingNode !== null) {
      const id = nav.pendingNode;
      nav.pendingNode = null;
      focusIds([id], false);
    } else if (follow && nav.items.length) {
      if (nav.pending === "last") nav.idx = nav.items.length - 1;
      else if (nav.pending === "first") nav.idx = 0;
      else nav.idx = -1;
      focusChange();
    } else if (!sticky.follow) {
      for (const { holder } of drawn) {
        const was = prevScroll.get(holder.dataset.prefix);
        const svgEl = holder.querySelector("svg");
        if (!was) continue;
        if (svgEl && was.scale) setScale(svgEl, was.scale);
        holder.scrollLeft = was.left;
        holder.scrollTop = was.top;
      }
    }
    nav.pending = null;
    updateChangeLabel();
    markSelection();
    renderDetails(pair);
    if (findIn.value) renderNodeList();
    lastRenderMs = performance.now() - t0;
    root.dataset.state = "ready";
    root.dataset.pass = String(pi);
    root.dataset.rewrite = String(k);
    root.dataset.renderMs = lastRenderMs.toFixed(1);
    root.dataset.layout = engine().mode();
    root.dataset.changes = String(nav.items.length);
    model.set("status", JSON.stringify({ pass: pi, rewrite: k, view: model.get("view"), ms: Math.round(lastRenderMs), graphs: results.length, changes: nav.items.length }));
    model.save_changes();
    prefetch();
  }

  // ---- finding the change: the nodes a step added, removed or changed (and a rewrite's matched and
  // produced nodes), in drawing order; the view zooms and scrolls to them after every step
  let drawn = []; // [{holder, spec}] of the graphs on screen
  const nav = { items: [], idx: -1, pending: null, pendingNode: null };

  function buildChangeList(pair) {
    const { added, removed, changed } = diffSets(pair.before, pair.after);
    const ids = new Set([...added, ...removed, ...changed]);
    if (pair.rewrite) {
      for (const id of pair.rewrite.matched) ids.add(id);
      for (const i of pair.rewrite.produced) ids.add(data.nodes[i].id);
    }
    // order: top to bottom, left to right on screen; one entry per drawn element (a box counts once)
    const seen = new Map();
    for (const { holder, spec } of drawn) {
      for (const id of ids) {
        const elId = spec.opts.drawnAs && spec.opts.drawnAs.get(id);
        if (!elId || seen.has(elId.slice(1))) continue;
        const el2 = holder.querySelector(`[id="${elId}"]`);
        if (!el2) continue;
        const r = el2.getBoundingClientRect();
        seen.set(elId.slice(1), { ids: [id], y: r.top, x: r.left });
      }
    }
    nav.items = [...seen.values()].sort((a, b) => a.y - b.y || a.x - b.x);
    nav.idx = -1;
  }

  function setScale(svgEl, sc) {
    svgEl.setAttribute("width", `${parseFloat(svgEl.dataset.w0) * sc}px`);
    svgEl.setAttribute("height", `${parseFloat(svgEl.dataset.h0) * sc}px`);
    svgEl.parentElement.dataset.scale = String(sc);
  }

  // zoom so the elements of `ids` fit each drawn graph (never past 1.2 ×, the labels' natural size),
  // then scroll them to the middle of the pane; `exact`: one change (next / previous change)
  function focusIds(ids, exact) {
    for (const el2 of graphEl.querySelectorAll(".ci-focus")) el2.classList.remove("ci-focus");
    for (const { holder, spec } of drawn) {
      const svgEl = holder.querySelector("svg");
      const els = ids.map((id) => spec.opts.drawnAs && spec.opts.drawnAs.get(id)).filter(Boolean).map((x) => holder.querySelector(`[id="${x}"]`)).filter(Boolean);
      if (!svgEl || !els.length) continue;
      const cur = parseFloat(holder.dataset.scale || "0") || parseFloat(svgEl.getAttribute("width")) / parseFloat(svgEl.dataset.w0);
      const box = () => {
        const rs = els.map((e2) => e2.getBoundingClientRect());
        return { l: Math.min(...rs.map((r) => r.left)), t: Math.min(...rs.map((r) => r.top)), r: Math.max(...rs.map((r) => r.right)), b: Math.max(...rs.map((r) => r.bottom)) };
      };
      let bb = box();
      const cw = holder.clientWidth || 600;
      const ch = holder.clientHeight || 560;
      // the scale at which the bounding box fills 85% of the pane, bounded: 0.25 (a pass that touched
      // the whole graph: its first change at a legible size instead) to 1.2
      let target = Math.min((0.85 * cw) / Math.max(1, (bb.r - bb.l) / cur), (0.85 * ch) / Math.max(1, (bb.b - bb.t) / cur), 1.2);
      if (target < 0.25 && els.length > 1 && !exact) return focusIds([ids[0]], true);
      target = Math.max(0.25, target);
      setScale(svgEl, target);
      bb = box();
      const hr = holder.getBoundingClientRect();
      holder.scrollLeft += (bb.l + bb.r) / 2 - (hr.left + hr.right) / 2;
      holder.scrollTop += (bb.t + bb.b) / 2 - (hr.top + hr.bottom) / 2;
      if (exact) for (const e2 of els) e2.classList.add("ci-focus");
    }
  }

  function focusChange() {
    if (!nav.items.length) return;
    if (nav.idx < 0) focusIds(nav.items.flatMap((it) => it.ids), false);
    else focusIds(nav.items[nav.idx].ids, true);
    updateChangeLabel();
  }

  function updateChangeLabel() {
    const n = nav.items.length;
    changeLabel.textContent = !n ? "no change" : nav.idx < 0 ? `${n} change${n > 1 ? "s" : ""} in view` : `${nav.idx + 1} of ${n} changes`;
  }

  // next / previous change: within the step, then on to the next (previous) step that changes something
  function stepChange(d) {
    if (data.passes[model.get("pass_index")].kir) return stepRewrite(d);
    const n = nav.items.length;
    if (n && (d > 0 ? nav.idx < n - 1 : nav.idx > 0)) {
      nav.idx = d > 0 ? nav.idx + 1 : nav.idx - 1;
      return focusChange();
    }
    const pi = model.get("pass_index");
    const p = data.passes[pi];
    const k = model.get("rewrite_index");
    nav.pending = d > 0 ? "first" : "last";
    if (k >= 1 && (d > 0 ? k < p.rewrites.length : k > 1)) return setRewrite(k + d);
    for (let i = pi + d; i >= 0 && i < data.passes.length; i += d) {
      if (data.passes[i].changed && !data.passes[i].kir) return setPass(i);
    }
    nav.pending = null;
  }

  function renderLegend(pair, specs) {
    legendEl.replaceChildren();
    const diff = specs.some((sp) => sp.opts.grey);
    const sw = (fill, pen, text, dashed) => h("span", { class: "ci-legend-item" }, h("span", { class: "ci-swatch", style: `background:${fill};border:2px ${dashed ? "dashed" : "solid"} ${pen}` }), text);
    legendEl.append(sw(DIFF.added.fill, DIFF.added.pen, "added"), sw(DIFF.removed.fill, DIFF.removed.pen, "removed", true), sw(DIFF.changed.fill, DIFF.changed.pen, "changed"));
    if (diff) legendEl.append(sw(UNCHANGED.fill, UNCHANGED.pen, "unchanged"));
    if (pair.rewrite) legendEl.append(sw("#fff", OUTLINE.matched, "matched by the rule"), sw("#fff", OUTLINE.produced, "produced by the rule"));
    if (!diff) legendEl.append(h("span", { class: "ci-dim", text: " · other fills: op category (pale)" }));
  }

  // lay out the next step while the user looks at this one, so stepping forward is instant
  function prefetch() {
    if (lastRenderMs > 1500) return;
    const pi = model.get("pass_index");
    const p = data.passes[pi];
    const k = model.get("rewrite_index");
    let next = null;
    if (p.kir && k >= 1) return;
    if (k >= 1 && k < p.rewrites.length) next = [pi, k + 1];
    else {
      const vis = visiblePasses();
      const n = vis.find((i) => i > pi);
      if (n !== undefined) next = [n, -1];
    }
    if (!next) return;
    setTimeout(() => {
      if (model.get("pass_index") !== pi || model.get("rewrite_index") !== k) return;
      // compute the DOT of the next step without touching the model
      const np = data.passes[next[0]];
      if (np.kir) return;
      let pair;
      if (next[1] >= 1) pair = { before: replayer.state(next[0], next[1] - 1), after: replayer.state(next[0], next[1]), rewrite: np.rewrites[next[1] - 1] };
      else pair = { before: np.before === null ? null : stateFromGraph(data, np.before), after: np.after === null ? null : stateFromGraph(data, np.after), rewrite: null };
      const { specs } = drawSpecs(pair, next[0]);
      for (const spec of specs) if (visibleCount(spec) <= model.get("node_cap")) engine().layout(toDot(spec.state, spec.opts));
    }, 50);
  }

  function onGraphClick(e) {
    const gEl = e.target.closest("g.node, g.cluster");
    if (!gEl || !gEl.id) return;
    const id = gEl.id.slice(1);
    if (id.startsWith("k") || id.startsWith("c")) {
      const ki = parseInt(id.slice(1), 10);
      const name = kernels[ki] && kernels[ki].name;
      if (name === undefined) return;
      if (toggled.has(name)) toggled.delete(name);
      else toggled.add(name);
      renderGraph();
      return;
    }
    if (id.startsWith("r")) {
      const grp = rngByIndex[parseInt(id.slice(1), 10)];
      if (grp !== undefined) sticky.rngOpen.add(grp);
      renderGraph();
      return;
    }
    if (id.startsWith("n")) {
      model.set("selected_node", parseInt(id.slice(1), 10));
      model.save_changes();
    }
  }

  function markSelection() {
    const sel = model.get("selected_node");
    for (const el2 of graphEl.querySelectorAll("g.node.ci-selected")) el2.classList.remove("ci-selected");
    if (sel < 0) return;
    for (const prefix of ["a", "b", "d"]) {
      const el2 = graphEl.querySelector(`#${prefix}n${sel}`);
      if (el2) el2.classList.add("ci-selected");
    }
  }

  function findNode(id) {
    const pair = currentPair();
    for (const s of [pair.after, pair.before]) if (s && s.nodes.has(id)) return s.nodes.get(id);
    for (let i = data.nodes.length - 1; i >= 0; i--) if (data.nodes[i].id === id) return { rec: data.nodes[i], reads: data.nodes[i].reads };
    return null;
  }

  function renderDetails(pair) {
    if (!g) return;
    detailEl.replaceChildren();
    const p = data.passes[model.get("pass_index")];
    detailEl.append(h("div", { class: "ci-d-title", text: p.name }), h("div", { class: "ci-d-desc", text: p.description }));
    if (p.error) detailEl.append(h("pre", { class: "ci-error", text: p.error }));
    const { added, removed, changed } = diffSets(pair.before, pair.after);
    detailEl.append(h("div", { class: "ci-d-diff", text: `+${added.size} added · −${removed.size} removed · ~${changed.size} changed` }));
    if (pair.rewrite) {
      const rw = pair.rewrite;
      const produced = rw.produced.map((i) => `n${data.nodes[i].id}`);
      detailEl.append(
        h(
          "div",
          { class: "ci-d-rw" },
          h("b", { text: rw.rule }),
          h("div", { class: "ci-rw-loc" }, h("span", { class: "ci-dim", text: "rule defined at " }), h("code", { text: rw.loc || "(unknown)" })),
          h("div", { text: `matched ${rw.matched.map((x) => `n${x}`).join(", ") || "–"} (outlined red)` }),
          h("div", { text: `produced ${produced.join(", ") || "nothing"}${produced.length ? " (outlined blue)" : ""}` }),
          rw.replaced[0] ? h("div", { text: `${nameOf(rw.replaced[0])} := ${nameOf(rw.replaced[1])}` }) : null
        )
      );
    }
    const sel = model.get("selected_node");
    if ((p.artifacts || []).includes("fusion") && fusion.length) {
      const refused = fusion.filter((d) => d.refused);
      const roots = fusion.filter((d) => d.action === "root").length;
      const box = h("div", { class: "ci-fusion" }, h("div", { class: "ci-d-title", text: `fusion: ${roots} kernels, ${fusion.filter((d) => d.action === "inline").length} nodes inlined, ${refused.length} refused` }), h("div", { class: "ci-dim", text: refused.length ? "refused nodes are outlined in orange" : "" }));
      for (const d of refused.slice(0, 40)) {
        box.append(h("div", { class: "ci-fusion-refused" }, h("a", { href: "#", class: "ci-link", text: `n${d.node} ${d.op}`, onclick: (e) => (e.preventDefault(), model.set("selected_node", d.node), model.save_changes()) }), h("span", { text: ` → ${d.kernels.join(", ")}: ${d.reason}` })));
      }
      detailEl.append(box);
    }
    if (sticky.rngOpen.size) detailEl.append(btn("collapse random numbers", "draw each Tensor.rand/randn as one box again", () => (sticky.rngOpen.clear(), renderGraph()), "ci-rng-collapse"));
    if (sel < 0) {
      detailEl.append(h("div", { class: "ci-hint", text: "click a node for its details; click a kernel or random-number box to expand it; n / p: next / previous change" }));
      return;
    }
    const n = findNode(sel);
    if (!n) return;
    const rec = n.rec;
    const table = h("table", { class: "ci-node-table" });
    const row = (k2, v) => table.append(h("tr", {}, h("th", { text: k2 }), h("td", {}, v)));
    row("node", `n${rec.id}`);
    row("op", rec.op);
    row("value", rec.out ? nameOf(rec.out) : "–");
    row("reads", n.reads.map(nameOf).join(", ") || "–");
    if (rec.grp) row("part of", h("span", {}, "random numbers ", h("a", { href: "#", class: "ci-link", text: sticky.rngOpen.has(rec.grp) ? "(collapse)" : "", onclick: (e) => (e.preventDefault(), sticky.rngOpen.delete(rec.grp), renderGraph()) })));
    for (const [k2, v] of Object.entries(rec.attrs || {})) if (k2 !== "shape" && k2 !== "dtype") row(k2, String(v));
    row("shape", `(${rec.shape.join(", ")})`);
    row("dtype", rec.dtype);
    const srcText = rec.src ? data.source_lines[rec.src] : null;
    row("source", rec.src ? h("span", {}, h("code", { text: rec.src }), srcText ? h("div", { class: "ci-src-line", text: srcText }) : null) : "–");
    const kern = nodeKernel.get(rec.id);
    if (kern !== undefined) row("kernel", h("a", { href: "#", class: "ci-link", text: kern, onclick: (e) => (e.preventDefault(), gotoC({ kernel: kern })) }));
    const kl = kview.nodeToKir(rec.id);
    if (kl.length) {
      const span = h("span", {});
      for (const t of kl.slice(0, 6)) span.append(h("a", { href: "#", class: "ci-link ci-goto-kir", text: `${t.fn}:${t.line} `, onclick: (e) => (e.preventDefault(), kview.gotoKir(t.fn, t.line)) }));
      if (kl.length > 6) span.append(h("span", { class: "ci-dim", text: `+${kl.length - 6} more` }));
      row("kernel IR", span);
    }
    const fu = fusionOf.get(rec.id);
    if (fu) row("fusion", `${fu.action}${fu.kernels.length ? ` → ${fu.kernels.join(", ")}` : ""}: ${fu.reason}`);
    const cl = nodeToC.get(rec.id);
    if (cl && cl.length) row("C lines", h("a", { href: "#", class: "ci-link ci-goto-c", text: compactRanges(cl), title: `${cl.length} lines`, onclick: (e) => (e.preventDefault(), gotoC({ node: rec.id })) }));
    else row("C lines", "–");
    detailEl.append(h("div", { class: "ci-d-title", text: "selected node" }), table);
  }

  // ---- C pane
  const c = paneEls.c;
  let cRows = [];
  function buildC() {
    if (!c) return;
    const cd = data.c || {};
    const text = cd.text || "";
    if (!text) {
      c.append(h("div", { class: "ci-empty", text: "no C source (the numpy backend, or compilation stopped early)" }));
      return;
    }
    c.append(
      h("div", { class: "ci-c-head", text: `backend ${cd.backend || "?"} · flags: ${cd.flags || "–"} · compile ${fmtTime(cd.compile_s)} · cc ${cd.cached ? "cached library" : fmtTime(cd.cc_s)}` })
    );
    const lineKernel = new Map();
    for (const [k2, [a, b]] of Object.entries(cd.kernel_lines || {})) for (let i = a; i <= b; i++) lineKernel.set(i, k2);
    const html = cd.lines_html || highlightC(text);
    const tbl = h("div", { class: "ci-c-lines" });
    cRows = [];
    html.forEach((lh, i) => {
      const ln = i + 1;
      const kern = lineKernel.get(ln);
      const ki = kern !== undefined ? kernelIndex.get(kern) : undefined;
      const bg = ki !== undefined ? KERNEL_COLORS[ki % KERNEL_COLORS.length] : "";
      const code = h("span", { class: "ci-c-code" });
      code.innerHTML = lh || " ";
      const r = h("div", { class: "ci-c-row", "data-line": String(ln), style: bg ? `background:${bg}` : "", title: kern ? `kernel ${kern}` : "" }, h("span", { class: "ci-c-ln", text: String(ln) }), code);
      r.addEventListener("click", () => onCLine(ln));
      tbl.append(r);
      cRows.push(r);
    });
    c.append(tbl);
    c.append(h("div", { class: "ci-c-info" }));
  }

  function onCLine(ln) {
    const ids = cLines[ln - 1] || [];
    for (const r of cRows) r.classList.remove("ci-c-hit");
    cRows[ln - 1].classList.add("ci-c-hit");
    const info = c.querySelector(".ci-c-info");
    info.replaceChildren(h("span", { text: `line ${ln} came from ${ids.length ? "nodes " : "no node"}` }));
    for (const id of ids) {
      info.append(h("a", { href: "#", class: "ci-link ci-goto-graph", text: ` n${id}`, onclick: (e) => (e.preventDefault(), gotoNode(id)) }));
    }
    const at = kview.cToKir(ln);
    if (at) {
      info.append(h("span", { text: " · kernel IR " }), h("a", { href: "#", class: "ci-link ci-goto-kir", text: `${at.fn}:${at.line}`, onclick: (e) => (e.preventDefault(), showTab("graph"), kview.gotoKir(at.fn, at.line)) }));
    }
  }

  function gotoC({ node, kernel, lines: given }) {
    if (!c) return;
    let lines = given ? [...given] : [];
    if (node !== undefined) lines = nodeToC.get(node) || [];
    if (kernel !== undefined) {
      const r = (data.c.kernel_lines || {})[kernel];
      if (r) for (let i = r[0]; i <= r[1]; i++) lines.push(i);
    }
    showTab("c");
    for (const r of cRows) r.classList.remove("ci-c-hit");
    for (const ln of lines) if (cRows[ln - 1]) cRows[ln - 1].classList.add("ci-c-hit");
    if (lines.length && cRows[lines[0] - 1]) scrollWithin(c.querySelector(".ci-c-lines"), cRows[lines[0] - 1], true);
    const info = c.querySelector(".ci-c-info");
    if (info) {
      info.replaceChildren(h("span", { text: node !== undefined ? `lines of node n${node}: ${lines.length} ` : kernel !== undefined ? `kernel ${kernel} ` : `${lines.length} lines of the selected kernel-IR statement ` }));
      if (node !== undefined) info.append(h("a", { href: "#", class: "ci-link ci-goto-graph", text: "back to the graph", onclick: (e) => (e.preventDefault(), gotoNode(node)) }));
    }
  }

  // show node `id` in the graph: selected, zoomed to and scrolled into view; on a graph over the node
  // cap, its neighbourhood is drawn (see drawSpecs)
  function gotoNode(id) {
    showTab("graph");
    nav.pendingNode = id;
    const same = model.get("selected_node") === id;
    model.set("selected_node", id);
    model.save_changes();
    if (same || !graphEl.querySelector(`#an${id}, #bn${id}, #dn${id}`)) renderGraph();
    else {
      nav.pendingNode = null;
      focusIds([id], true);
    }
  }

  // ---- the node list: every node of the current step that matches all the words typed
  const valueNames = data.value_names || {};
  const nameOf = (v) => (typeof v === "string" ? (valueNames[v] ? `${valueNames[v]} (${v})` : v) : v.lit);
  function nodeHaystack(id, n) {
    const r = n.rec;
    const name = valueNames[r.out] || (r.attrs && r.attrs.name) || "";
    return `n${id} ${r.op} ${r.out} ${name} ${r.src || ""} ${(r.src && data.source_lines[r.src]) || ""} ${r.grp ? "random" : ""}`.toLowerCase();
  }
  function renderNodeList() {
    nodeListEl.replaceChildren();
    const q = findIn.value.trim().toLowerCase();
    if (!q) return;
    const words = q.split(/\s+/);
    const pair = currentPair();
    const state = pair.after && pair.before ? unionState(pair.before, pair.after) : pair.after || pair.before;
    if (!state) return;
    const hits = [];
    for (const [id, n] of state.nodes) {
      const hay = nodeHaystack(id, n);
      if (words.every((w) => hay.includes(w))) hits.push([id, n]);
    }
    nodeListEl.append(h("div", { class: "ci-dim", text: `${hits.length} of ${state.nodes.size} nodes match${hits.length > 200 ? " (first 200 listed)" : ""}` }));
    for (const [id, n] of hits.slice(0, 200)) {
      const r = n.rec;
      const name = valueNames[r.out];
      nodeListEl.append(
        h(
          "div",
          { class: "ci-nodelist-item", "data-node": String(id), onclick: () => gotoNode(id) },
          h("b", { text: `n${id}` }),
          h("span", { text: ` ${r.op} → ${name ? `${name} (${r.out})` : r.out}  ${r.dtype}[${r.shape.join(",")}]` }),
          r.src ? h("span", { class: "ci-dim", text: `  ${r.src}` }) : null
        )
      );
    }
  }

  // ---- kernel view (codegen passes): kernel_view.js
  const fusion = data.fusion || [];
  const fusionOf = new Map(fusion.map((d) => [d.node, d]));
  const refusedNodes = new Set(fusion.filter((d) => d.refused).map((d) => d.node));
  // an AIR node clicked in a kernel listing: show it in the scheduled graph (kernel frames, fusion log),
  // else in the last graph pass before lowering
  const graphPassFor = () => {
    if (scheduleAt >= 0) return scheduleAt;
    const firstKir = data.passes.findIndex((p) => p.kir);
    return Math.max(0, firstKir - 1);
  };
  const kview = makeKernelView({
    data,
    model,
    graphEl,
    detailEl,
    nodeToC,
    fmtTime,
    scrollWithin,
    gotoC,
    compactRanges,
    showNode: (id) => {
      model.set("rewrite_index", -1);
      model.set("pass_index", graphPassFor());
      model.save_changes();
      gotoNode(id);
    },
  });

  // ---- profile pane: profile_view.js
  function buildProfile() {
    if (paneEls.profile) buildProfilePane({ pane: paneEls.profile, data, model, fmtTime, fmtBytes, showTab, setPass, gotoNode });
  }

  // ---- result pane
  function buildResult() {
    const rp = paneEls.result;
    if (!rp) return;
    const res = data.result;
    if (!res) {
      rp.append(h("div", { class: "ci-empty", text: "not run (--no-run)" }));
      return;
    }
    rp.append(h("div", { class: "ci-dim", text: `run time ${fmtTime(res.run_s)}${res.note ? " · " + res.note : ""}` }));
    const tbl = h("table", { class: "ci-result-table" });
    tbl.append(h("tr", {}, ...["output", "shape", "dtype", "min", "max", "mean", "first values"].map((t) => h("th", { text: t }))));
    for (const o of res.outputs || []) {
      tbl.append(h("tr", {}, ...[o.name === undefined ? "" : nameOf(String(o.name)), o.shape, o.dtype, o.min, o.max, o.mean, o.head].map((t) => h("td", { text: t === undefined ? "" : String(t) }))));
    }
    rp.append(tbl);
    if (res.mismatch) rp.append(h("pre", { class: "ci-error", text: res.mismatch }));
  }

  // ---- events
  passSlider.addEventListener("input", () => setPass(parseInt(passSlider.value, 10)));
  rwSlider.addEventListener("input", () => setRewrite(parseInt(rwSlider.value, 10)));
  viewSel.addEventListener("change", () => (model.set("view", viewSel.value), model.save_changes()));
  hideChk.addEventListener("change", () => (model.set("hide_unchanged", hideChk.checked), model.save_changes()));
  collapseChk.addEventListener("change", () => (model.set("collapse_kernels", collapseChk.checked), model.save_changes()));
  hopsIn.addEventListener("change", () => (model.set("focus_hops", parseInt(hopsIn.value, 10) || 0), model.save_changes()));
  followChk.addEventListener("change", () => {
    sticky.follow = followChk.checked;
    if (sticky.follow) focusChange();
  });
  findIn.addEventListener("input", () => renderNodeList());
  // keys typed inside the widget are ours: keep JupyterLab's notebook shortcuts (Enter, arrows, ...) out of it
  root.dataset.lmSuppressShortcuts = "true";
  root.addEventListener("keydown", (e) => {
    e.stopPropagation();
    if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "SELECT") && e.target.type !== "range") return;
    const keys = {
      ArrowRight: () => stepPass(1),
      ArrowLeft: () => stepPass(-1),
      ArrowDown: () => stepRewrite(1),
      ArrowUp: () => stepRewrite(-1),
      Home: () => stepPass("first"),
      End: () => stepPass("last"),
      " ": () => togglePlay(),
      Escape: () => (model.set("selected_node", -1), model.set("rewrite_index", -1), model.save_changes()),
      d: () => (model.set("view", model.get("view") === "diff" ? "after" : "diff"), model.save_changes()),
      s: () => (model.set("view", model.get("view") === "side" ? "after" : "side"), model.save_changes()),
      k: () => (model.set("collapse_kernels", !model.get("collapse_kernels")), model.save_changes()),
      n: () => stepChange(1),
      p: () => stepChange(-1),
      f: () => findIn.focus(),
    };
    const fn = keys[e.key];
    if (fn) {
      e.preventDefault();
      fn();
    }
  });
  const rerender = () => renderGraph();
  for (const t of ["pass_index", "rewrite_index", "view", "hide_unchanged", "collapse_kernels", "focus_hops", "node_cap"]) model.on(`change:${t}`, rerender);
  const onKernel = () => {
    if (data.passes[model.get("pass_index")].kir) renderGraph();
  };
  model.on("change:kernel", onKernel);
  model.on("change:kernel_line", onKernel);
  const onSelect = () => {
    if (data.passes[model.get("pass_index")].kir) return;
    const sel = model.get("selected_node");
    const drawnSel = sel < 0 || drawn.some(({ spec }) => spec.opts.drawnAs && spec.opts.drawnAs.has(sel));
    // drawn around the previous selection (a graph over the cap): redraw for the new one, or the cap
    const aroundSel = drawn.some(({ spec }) => spec.aroundSel);
    if (model.get("focus_hops") > 0 || !drawnSel || aroundSel) renderGraph();
    else {
      markSelection();
      renderDetails(currentPair());
    }
  };
  model.on("change:selected_node", onSelect);

  buildProfile();
  buildC();
  buildResult();
  showTab(Object.keys(paneEls)[0] || "graph");
  renderGraph();

  return () => {
    stopPlay();
    for (const t of ["pass_index", "rewrite_index", "view", "hide_unchanged", "collapse_kernels", "focus_hops", "node_cap"]) model.off(`change:${t}`, rerender);
    model.off("change:selected_node", onSelect);
    model.off("change:kernel", onKernel);
    model.off("change:kernel_line", onKernel);
  };
}

export default { render };
