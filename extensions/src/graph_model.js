// The graphs the Inspector draws: states rebuilt from a pass's rewrite records, the diff of two
// states, and the DOT text of one drawn graph (op colours, the diff palette, kernel and random-number
// boxes). No DOM here: inspector.js lays the DOT out (layout_worker.js) and wires the widget.
const CAT_COLORS = { unary: "#dbeafe", binary: "#e0e7ff", ternary: "#ede9fe", reduce: "#fde68a", buffer: "#dcfce7" };
export const KERNEL_COLORS = ["#fde2e4", "#e2ece9", "#dfe7fd", "#fff1c1", "#e8dff5", "#d8f3dc", "#ffe5d9", "#cddafd", "#f1e3d3", "#e2f0cb"];
// the diff palette: saturated fills with a dark outline of the same hue, none of them near an op colour
// (pale pastels above), and in diff mode every unchanged node is grey, so a colour always means a change
export const DIFF = {
  added: { fill: "#2dd4bf", pen: "#0f766e", label: "added" },
  removed: { fill: "#fb7185", pen: "#9f1239", label: "removed" },
  changed: { fill: "#a78bfa", pen: "#5b21b6", label: "changed" },
};
export const UNCHANGED = { fill: "#f3f4f6", pen: "#d1d5db", font: "#9ca3af" };
export const OUTLINE = { matched: "#dc2626", produced: "#1d4ed8" }; // a rewrite's matched and produced nodes
const RNG_COLOR = "#e5e7eb";
const CHECKPOINT_EVERY = 64;

function esc(s) {
  return String(s).replace(/\\/g, "\\\\").replace(/"/g, '\\"');
}

// ---- graph states ---------------------------------------------------------------------------------
// A state is {nodes: Map(id -> {rec, reads}), outputs: [...] }; insertion order = graph order.
export function stateFromGraph(data, gi) {
  const g = data.graphs[gi];
  const nodes = new Map();
  for (const i of g.nodes) {
    const rec = data.nodes[i];
    nodes.set(rec.id, { rec, reads: rec.reads });
  }
  return { nodes, outputs: g.outputs.slice() };
}

function cloneState(s) {
  return { nodes: new Map(s.nodes), outputs: s.outputs.slice() };
}

// Mirrors caten_lab.air.rewriter.replay (and payload.replay_payload in Python).
function applyRewrite(data, s, rw) {
  for (const i of rw.produced) {
    const rec = data.nodes[i];
    s.nodes.set(rec.id, { rec, reads: rec.reads });
  }
  const [oldV, newV] = rw.replaced;
  for (const [id, n] of s.nodes) {
    if (n.reads.some((r) => r === oldV)) s.nodes.set(id, { rec: n.rec, reads: n.reads.map((r) => (r === oldV ? newV : r)) });
  }
  if (typeof newV === "string") s.outputs = s.outputs.map((o) => (o === oldV ? newV : o));
  for (const id of rw.removed) s.nodes.delete(id);
}

export class Replayer {
  constructor(data) {
    this.data = data;
    this.checkpoints = new Map(); // pass index -> Map(k -> state)
  }
  state(passIndex, k) {
    const p = this.data.passes[passIndex];
    if (p.before === null) return null;
    let cps = this.checkpoints.get(passIndex);
    if (!cps) {
      cps = new Map([[0, stateFromGraph(this.data, p.before)]]);
      this.checkpoints.set(passIndex, cps);
    }
    k = Math.max(0, Math.min(k, p.rewrites.length));
    let base = Math.floor(k / CHECKPOINT_EVERY) * CHECKPOINT_EVERY;
    while (!cps.has(base)) base -= CHECKPOINT_EVERY;
    let s = cloneState(cps.get(base));
    for (let j = base; j < k; j++) {
      applyRewrite(this.data, s, p.rewrites[j]);
      if ((j + 1) % CHECKPOINT_EVERY === 0 && !cps.has(j + 1)) cps.set(j + 1, cloneState(s));
    }
    return s;
  }
}

// ---- graph -> DOT ---------------------------------------------------------------------------------
// `outName`: the name of the graph output (out0) or buffer state (a KV cache) this node writes, if any
function nodeLabel(rec, reads, outName) {
  const lits = reads.filter((r) => typeof r !== "string").map((r) => r.lit);
  let head = rec.op + (lits.length ? " " + lits.join(", ") : "") + (outName ? ` → ${outName}` : "");
  const a = rec.attrs || {};
  const bits = [];
  for (const key of ["name", "value", "op", "axes", "dtype"]) {
    if (a[key] !== undefined && !(key === "dtype" && rec.op !== "cast")) bits.push(`${key}=${a[key]}`);
  }
  if (rec.op === "view" && a.strides) bits.push(`strides=${a.strides}`);
  let label = head;
  if (bits.length) label += "\n" + bits.join(" ").slice(0, 48);
  label += `\n${rec.dtype}[${rec.shape.join(",")}]`;
  return label;
}

export function producerMap(state) {
  const m = new Map();
  for (const [id, n] of state.nodes) m.set(n.rec.out, id);
  return m;
}

export function neighbourhood(state, seeds, hops) {
  const prod = producerMap(state);
  const users = new Map();
  for (const [id, n] of state.nodes) {
    for (const r of n.reads) {
      if (typeof r !== "string") continue;
      const p = prod.get(r);
      if (p === undefined) continue;
      if (!users.has(p)) users.set(p, []);
      users.get(p).push(id);
    }
  }
  const seen = new Set(seeds.filter((s) => state.nodes.has(s)));
  let frontier = [...seen];
  for (let d = 0; d < hops && frontier.length; d++) {
    const next = [];
    for (const id of frontier) {
      const n = state.nodes.get(id);
      const around = [];
      for (const r of n.reads) if (typeof r === "string" && prod.has(r)) around.push(prod.get(r));
      for (const u of users.get(id) || []) around.push(u);
      for (const x of around) if (!seen.has(x)) (seen.add(x), next.push(x));
    }
    frontier = next;
  }
  return seen;
}

// Kernel of every node of a state: the schedule's membership, plus buffer nodes (named inputs, weight
// views, consts) whose users all sit in one kernel, which are drawn inside that kernel too, so a
// collapsed model reads as a chain of kernels instead of a fan of weights. O(N + E), cached per state.
const kernelMaps = new WeakMap();

export function kernelOf(state, nodeKernel) {
  const hit = kernelMaps.get(state);
  if (hit && hit.nodeKernel === nodeKernel) return hit.map;
  const map = new Map();
  const prod = producerMap(state);
  const users = new Map();
  const order = [...state.nodes.keys()];
  for (const id of order) {
    const k = nodeKernel.get(id);
    if (k !== undefined) map.set(id, k);
    for (const r of state.nodes.get(id).reads) {
      if (typeof r !== "string") continue;
      const p = prod.get(r);
      if (p === undefined) continue;
      if (!users.has(p)) users.set(p, []);
      users.get(p).push(id);
    }
  }
  for (let i = order.length - 1; i >= 0; i--) {
    const id = order[i];
    if (map.has(id) || state.nodes.get(id).rec.cat !== "buffer") continue;
    const us = users.get(id) || [];
    const ks = new Set(us.map((u) => map.get(u)));
    if (us.length && ks.size === 1 && !ks.has(undefined)) map.set(id, [...ks][0]);
  }
  kernelMaps.set(state, { nodeKernel, map });
  return map;
}

// Build the DOT of one drawn graph. opts: {prefix, marks: Map(id->diff kind), dashed: Set, keep: Set|null,
// kernelsOn: bool (the graph is scheduled), boxed(kernel) -> bool, nodeKernel: Map, kernelIndex: Map,
// grey: bool (diff mode: unchanged nodes drawn grey), outline: Map(id -> "matched"|"produced"),
// rngBoxed(group) -> bool, rngIndex: Map(group -> index)}. Fills opts.drawnAs: node id -> SVG element id.
export function toDot(state, opts) {
  const { prefix, marks, dashed, keep, kernelsOn, boxed, nodeKernel, kernelIndex, refused, grey, outline, rngBoxed, rngIndex, names } = opts;
  const prod = producerMap(state);
  const outs = new Set(state.outputs);
  const drawnAs = new Map();
  opts.drawnAs = drawnAs;
  const lines = [
    "digraph G {",
    '  graph [rankdir=TB, nodesep=0.25, ranksep=0.3, bgcolor="transparent"];',
    '  node [shape=box, style="rounded,filled", fontname="Courier", fontsize=9, margin="0.06,0.03", height=0.3];',
    "  edge [arrowsize=0.5, color=\"#6b7280\"];",
  ];
  const member = kernelsOn ? kernelOf(state, nodeKernel) : null;
  // the box a node is drawn in: its collapsed kernel, else its collapsed random-number group, else none
  const groupOf = (id) => {
    if (kernelsOn) {
      const k = member.get(id);
      if (k !== undefined && boxed(k)) return `k${kernelIndex.get(k)}`;
    }
    const grp = state.nodes.get(id).rec.grp;
    if (grp && rngBoxed && rngBoxed(grp)) return `r${rngIndex.get(grp)}`;
    return null;
  };
  const boxes = new Map(); // box id -> {label, count, mark, kind}
  const clusters = new Map(); // kernel drawn as a frame around its nodes -> lines
  const nodeLine = (id, n) => {
    const kind = marks.get(id);
    const colour = kind ? DIFF[kind].fill : grey ? UNCHANGED.fill : CAT_COLORS[n.rec.cat] || "#f3f4f6";
    const style = dashed.has(id) ? ', style="rounded,filled,dashed"' : "";
    let pen = "";
    if (kind) pen = `, color="${DIFF[kind].pen}", penwidth=2`;
    else if (grey) pen = `, color="${UNCHANGED.pen}", fontcolor="${UNCHANGED.font}"`;
    // a graph output: thick; a node the scheduler refused to fuse (realized on its own): orange outline
    if (outs.has(n.rec.out)) pen += ", penwidth=2.2";
    if (refused && refused.has(id)) pen += ', color="#ea580c", penwidth=2.2';
    // a rewrite's matched / produced nodes: a thick outline of their own (drawn on top of the diff fill)
    const o = outline && outline.get(id);
    if (o) pen += `, color="${OUTLINE[o]}", penwidth=3.5`;
    drawnAs.set(id, `${prefix}n${id}`);
    return `    ${prefix}n${id} [id="${prefix}n${id}", tooltip="n${id}${n.rec.src ? ` · ${esc(n.rec.src)}` : ""}", label="${esc(nodeLabel(n.rec, n.reads, outs.has(n.rec.out) && names ? names[n.rec.out] : ""))}", fillcolor="${colour}"${style}${pen}];`;
  };
  for (const [id, n] of state.nodes) {
    if (keep && !keep.has(id)) continue;
    const gid = groupOf(id);
    if (gid !== null) {
      let b = boxes.get(gid);
      if (!b) {
        const isK = gid[0] === "k";
        const label = isK ? [member.get(id)] : ["random numbers", n.rec.grp.slice(4)];
        b = { label, count: 0, mark: null, kind: isK ? "k" : "r", outline: null };
        boxes.set(gid, b);
      }
      b.count++;
      if (marks.has(id) && !b.mark) b.mark = marks.get(id);
      if (outline && outline.has(id) && !b.outline) b.outline = outline.get(id);
      drawnAs.set(id, `${prefix}${gid}`);
      continue;
    }
    const k = kernelsOn ? member.get(id) : undefined;
    if (k !== undefined) {
      if (!clusters.has(k)) clusters.set(k, []);
      clusters.get(k).push(nodeLine(id, n));
    } else lines.push(nodeLine(id, n));
  }
  for (const [k, body] of clusters) {
    const ki = kernelIndex.get(k);
    lines.push(`  subgraph "cluster_${prefix}${ki}" {`);
    lines.push(`    id="${prefix}c${ki}"; label="${esc(k)} (click the frame to collapse)"; style="rounded,dashed"; color="#9ca3af"; fontsize=9; fontname="Courier";`);
    lines.push(...body);
    lines.push("  }");
  }
  for (const [gid, b] of boxes) {
    const idx = parseInt(gid.slice(1), 10);
    const fill = b.mark ? DIFF[b.mark].fill : grey ? UNCHANGED.fill : b.kind === "k" ? KERNEL_COLORS[idx % KERNEL_COLORS.length] : RNG_COLOR;
    const pen = b.outline ? `, color="${OUTLINE[b.outline]}", penwidth=3.5` : b.mark ? `, color="${DIFF[b.mark].pen}", penwidth=2` : "";
    const hint = b.kind === "r" ? " (click to expand)" : "";
    lines.push(`  ${prefix}${gid} [id="${prefix}${gid}", shape=box3d, style="filled", label="${b.label.map(esc).join("\\n")}\\n${b.count} ops${hint}", fillcolor="${fill}"${pen}];`);
  }
  const seen = new Set();
  for (const [id, n] of state.nodes) {
    if (keep && !keep.has(id)) continue;
    const gd = groupOf(id);
    const dst = gd !== null ? `${prefix}${gd}` : `${prefix}n${id}`;
    for (const r of n.reads) {
      if (typeof r !== "string") continue;
      const p = prod.get(r);
      if (p === undefined || (keep && !keep.has(p))) continue;
      const gs = groupOf(p);
      const src = gs !== null ? `${prefix}${gs}` : `${prefix}n${p}`;
      if (src === dst) continue;
      const key = `${src}>${dst}`;
      if (gs !== null || gd !== null) {
        if (seen.has(key)) continue;
        seen.add(key);
      }
      lines.push(`  ${src} -> ${dst};`);
    }
  }
  lines.push("}");
  return lines.join("\n");
}

// The union of two states (for the diff view): every node of `after`, plus removed nodes of `before`.
export function unionState(before, after) {
  const nodes = new Map(after.nodes);
  for (const [id, n] of before.nodes) if (!nodes.has(id)) nodes.set(id, n);
  return { nodes, outputs: after.outputs };
}

const readsKey = (reads) => reads.map((r) => (typeof r === "string" ? r : `#${r.lit}`)).join("|");

export function diffSets(before, after) {
  const added = new Set();
  const removed = new Set();
  const changed = new Set();
  if (!before || !after) return { added, removed, changed };
  for (const [id, n] of after.nodes) {
    const b = before.nodes.get(id);
    if (!b) added.add(id);
    else if (b.rec !== n.rec || (b.reads !== n.reads && readsKey(b.reads) !== readsKey(n.reads))) changed.add(id);
  }
  for (const id of before.nodes.keys()) if (!after.nodes.has(id)) removed.add(id);
  return { added, removed, changed };
}
