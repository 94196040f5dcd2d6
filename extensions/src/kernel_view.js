// The kernel view of the Inspector: what a codegen pass shows instead of the graph.
// A kernel list (function, loop nest, statements, time per call) and, for the selected function, its
// kernel-IR listing before / after the pass or one recorded rewrite, changed lines highlighted and
// scrolled into view. A listing line links to its AIR nodes (the statement's origin) and its C lines
// (the renderer's line -> statement map for the rendered program, else through the AIR nodes).
// The payload's "kir" tables are documented in caten_lab/notebook/kernel_view.py.
import { h } from "./dom.js";

const MAX_ROWS = 3000; // listing rows drawn at once

export function makeKernelView(ctx) {
  const { data, model, graphEl, detailEl, nodeToC, fmtTime, scrollWithin, gotoC, showNode, compactRanges } = ctx;
  const kir = data.kir || { lines: [], origins: [], states: [] };
  const local = { side: "after" }; // which listing the selected line belongs to

  // C line -> (function, listing line) of the rendered program, and AIR node -> listing lines of it
  const cToKir = new Map();
  const renderedFn = new Map(); // function name -> its rendered state index
  kir.states.forEach((st, si) => {
    if (!st.c) return;
    renderedFn.set(st.fn, si);
    st.c.forEach((cls, li) => {
      for (const cl of cls) if (!cToKir.has(cl)) cToKir.set(cl, { fn: st.fn, line: li + 1 });
    });
  });
  // the pass whose program was rendered: the last codegen pass that changed it (else the last codegen pass)
  const lastKirPass = (() => {
    let last = -1;
    for (let i = data.passes.length - 1; i >= 0; i--) {
      const p = data.passes[i];
      if (!p.kir) continue;
      if (last < 0) last = i;
      if (p.kir.functions.some((f) => f.changed)) return i;
    }
    return last;
  })();
  const CLOSERS = new Set(["ENDFOR", "ENDIF", "ENDWHILE", "ELSE", "ENDFUNCTION"]);
  let nodeIndex = null;
  function nodeToKir(id) {
    if (lastKirPass < 0) return [];
    if (nodeIndex === null) {
      nodeIndex = new Map();
      for (const f of data.passes[lastKirPass].kir.functions) {
        const st = kir.states[f.after];
        st.origins.forEach((oi, li) => {
          if (oi < 0 || !st.paths[li] || CLOSERS.has(kir.lines[st.lines[li]].trim())) return;
          for (const n of kir.origins[oi]) {
            if (!nodeIndex.has(n)) nodeIndex.set(n, []);
            const list = nodeIndex.get(n);
            if (list.length < 64) list.push({ fn: f.name, line: li + 1 });
          }
        });
      }
    }
    return nodeIndex.get(id) || [];
  }

  const stateText = (si, li) => kir.lines[kir.states[si].lines[li - 1]];
  const originOf = (si, li) => {
    const oi = kir.states[si].origins[li - 1];
    return oi >= 0 ? kir.origins[oi] : [];
  };
  function cLinesOf(si, li) {
    const st = kir.states[si];
    if (st.c) return { lines: st.c[li - 1] || [], direct: true };
    const seen = new Set();
    for (const n of originOf(si, li)) for (const cl of nodeToC.get(n) || []) seen.add(cl);
    return { lines: [...seen].sort((a, b) => a - b), direct: false };
  }

  // the function shown and the pair of listings of the current step
  function current(pi, k) {
    const p = data.passes[pi];
    const fns = p.kir.functions;
    const step = (k >= 1 && p.kir.steps[k - 1]) || null;
    let name = step ? step.fn : model.get("kernel");
    if (!fns.some((f) => f.name === name)) name = (fns.find((f) => f.changed) || fns[0] || { name: "" }).name;
    const f = fns.find((x) => x.name === name) || null;
    if (step) return { p, step, f, name, before: step.before, after: step.after, hlBefore: step.hl_before, hlAfter: step.hl_after };
    return { p, step, f, name, before: f ? f.before : null, after: f ? f.after : null, hlBefore: f ? f.hl_before : [], hlAfter: f ? f.hl_after : [] };
  }

  function kernelTable(cur) {
    const tbl = h("table", { class: "ci-kir-kernels" });
    tbl.append(h("tr", {}, ...["kernel", "loop nest", "stmts", "time / call", ""].map((t) => h("th", { text: t }))));
    for (const f of cur.p.kir.functions) {
      const per = f.seconds !== null && f.seconds !== undefined && f.calls ? f.seconds / f.calls : null;
      const row = h(
        "tr",
        { class: `ci-kir-k${f.name === cur.name ? " current" : ""}${f.changed ? " changed" : ""}`, "data-kernel": f.name, title: f.kernels.join(", "), onclick: () => select(f.name) },
        h("td", { class: "ci-kir-kname", text: f.name }),
        h("td", { class: "ci-kir-loops", text: f.loops || "–", title: f.loops || "" }),
        h("td", { text: String(f.stmts) }),
        h("td", { text: per === null ? "–" : `${per < 1e-6 ? `${(per * 1e9).toFixed(0)} ns` : fmtTime(per)}${f.calls > 1 ? ` ×${f.calls}` : ""}` }),
        h("td", { class: "ci-kir-mark", text: f.changed ? "changed" : "" })
      );
      tbl.append(row);
    }
    return tbl;
  }

  function select(name) {
    model.set("kernel", name);
    model.set("kernel_line", -1);
    if (model.get("rewrite_index") >= 1) model.set("rewrite_index", -1);
    model.save_changes();
  }

  function listing(si, hl, cls, side) {
    const box = h("div", { class: "ci-kir-listing", "data-side": side });
    if (si === null || si === undefined) {
      box.append(h("div", { class: "ci-empty", text: side === "before" ? "not in the program before this step" : "removed by this pass" }));
      return { box, first: null };
    }
    const marks = new Set(hl);
    const selLine = local.side === side ? model.get("kernel_line") : -1;
    let first = null;
    let selected = null;
    // a very long function (a generated action) is drawn as a window around what matters
    const all = kir.states[si].lines;
    const focus = selLine > 0 ? selLine : hl.length ? hl[0] : 1;
    const lo = all.length > MAX_ROWS ? Math.max(0, Math.min(focus - 1 - MAX_ROWS / 2, all.length - MAX_ROWS)) : 0;
    const hi = Math.min(all.length, lo + MAX_ROWS);
    if (lo > 0 || hi < all.length) box.append(h("div", { class: "ci-hint", text: `lines ${lo + 1}–${hi} of ${all.length}` }));
    all.slice(lo, hi).forEach((li, j) => {
      const k = lo + j;
      const ln = k + 1;
      const row = h(
        "div",
        { class: `ci-kir-row${marks.has(ln) ? ` ${cls}` : ""}${ln === selLine ? " ci-kir-sel" : ""}`, "data-line": String(ln) },
        h("span", { class: "ci-kir-ln", text: String(ln) }),
        h("span", { class: "ci-kir-code", text: kir.lines[li] })
      );
      row.addEventListener("click", () => {
        local.side = side;
        model.set("kernel_line", ln);
        model.save_changes();
      });
      if (marks.has(ln) && first === null) first = row;
      if (ln === selLine) selected = row;
      box.append(row);
    });
    return { box, first: selected || first };
  }

  function render(pi, k) {
    const cur = current(pi, k);
    const view = model.get("view");
    const showBefore = view === "before" || view === "side" || view === "diff";
    const showAfter = view !== "before";
    const head = h("div", { class: "ci-kir" });
    head.append(h("div", { class: "ci-caption", text: `kernel program · ${cur.p.kir.functions.length} functions${cur.p.kir.removed.length ? ` · removed ${cur.p.kir.removed.join(", ")}` : ""}${cur.p.kir.profiled ? "" : " · run program.profile() for times"}` }));
    const tableBox = h("div", { class: "ci-kir-table" }, kernelTable(cur));
    head.append(tableBox);
    const panes = h("div", { class: "ci-kir-panes" });
    const scrolls = [];
    const caption = cur.step ? `rewrite ${k}: ${cur.step.rule}` : "whole pass";
    if (showBefore) {
      const { box, first } = listing(cur.before, cur.hlBefore, "ci-kir-del", "before");
      panes.append(h("div", { class: "ci-kir-pane" }, h("div", { class: "ci-caption", text: `${cur.name} before (${caption}) · ${cur.hlBefore.length} lines replaced` }), box));
      scrolls.push([box, first]);
    }
    if (showAfter) {
      const { box, first } = listing(cur.after, cur.hlAfter, "ci-kir-add", "after");
      panes.append(h("div", { class: "ci-kir-pane" }, h("div", { class: "ci-caption", text: `${cur.name} after (${caption}) · ${cur.hlAfter.length} lines changed` }), box));
      scrolls.push([box, first]);
    }
    if (cur.p.kir.steps_note) head.append(h("div", { class: "ci-hint", text: cur.p.kir.steps_note }));
    head.append(panes);
    graphEl.replaceChildren(head);
    for (const [box, first] of scrolls) if (first) scrollWithin(box, first, true);
    scrollWithin(tableBox, tableBox.querySelector(".ci-kir-k.current"), false);
    renderDetails(cur, k);
    return { kernel: cur.name, hl_after: cur.hlAfter, hl_before: cur.hlBefore, lines: cur.after !== null && cur.after !== undefined ? kir.states[cur.after].lines.length : 0 };
  }

  function renderDetails(cur, k) {
    detailEl.replaceChildren();
    const p = cur.p;
    detailEl.append(h("div", { class: "ci-d-title", text: p.name }), h("div", { class: "ci-d-desc", text: p.description }));
    if (p.error) detailEl.append(h("pre", { class: "ci-error", text: p.error }));
    const changed = p.kir.functions.filter((f) => f.changed).length;
    detailEl.append(h("div", { class: "ci-d-diff", text: `${changed} of ${p.kir.functions.length} functions changed · ${p.kir.n_steps} kernel-IR rewrites` }));
    if (cur.step) detailEl.append(h("div", { class: "ci-d-rw" }, h("b", { text: cur.step.rule }), h("div", { class: "ci-rw-loc" }, h("span", { class: "ci-dim", text: "rule defined at " }), h("code", { text: cur.step.loc || "(unknown)" })), h("div", { text: `in ${cur.step.fn}` })));
    const ln = model.get("kernel_line");
    const si = local.side === "before" ? cur.before : cur.after;
    if (ln < 1 || si === null || si === undefined || ln > kir.states[si].lines.length) {
      detailEl.append(h("div", { class: "ci-hint", text: "click a kernel for its listing; click a statement for its AIR nodes and C lines" }));
      return;
    }
    const table = h("table", { class: "ci-node-table ci-kir-stmt" });
    const row = (a, b) => table.append(h("tr", {}, h("th", { text: a }), h("td", {}, b)));
    row("statement", h("code", { text: stateText(si, ln).trim() }));
    row("function", `${cur.name} (${local.side}, line ${ln})`);
    row("path", kir.states[si].paths[ln - 1] || "(header)");
    const nodes = originOf(si, ln);
    const nodeLinks = h("span", { class: "ci-kir-nodes" });
    for (const n of nodes) nodeLinks.append(h("a", { href: "#", class: "ci-link ci-kir-node", text: `n${n} `, onclick: (e) => (e.preventDefault(), showNode(n)) }));
    row("AIR nodes", nodes.length ? nodeLinks : "–");
    const { lines, direct } = cLinesOf(si, ln);
    row(
      "C lines",
      lines.length
        ? h("a", { href: "#", class: "ci-link ci-kir-goto-c", text: `${compactRanges(lines)}${direct ? "" : " (through its AIR nodes)"}`, title: `${lines.length} lines`, onclick: (e) => (e.preventDefault(), gotoC({ lines })) })
        : "–"
    );
    detailEl.append(h("div", { class: "ci-d-title", text: "selected statement" }), table);
  }

  // jump to the rendered program's listing of `fn`, line `line` (from the C pane or a graph node)
  function gotoKir(fn, line) {
    if (lastKirPass < 0) return;
    local.side = "after";
    model.set("rewrite_index", -1);
    model.set("pass_index", lastKirPass);
    model.set("kernel", fn);
    model.set("kernel_line", line);
    model.save_changes();
  }

  return { render, cToKir: (ln) => cToKir.get(ln) || null, nodeToKir, gotoKir, hasKir: lastKirPass >= 0 };
}
