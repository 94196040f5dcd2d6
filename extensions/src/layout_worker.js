// Graphviz (WASM, @viz-js/viz) layout, run inside a Web Worker so the page stays responsive while
// a large graph is laid out. The same module also exports renderDot for the main-thread fallback.
import { instance } from "@viz-js/viz";

let vizPromise = null;

export async function renderDot(dot) {
  if (vizPromise === null) vizPromise = instance();
  const viz = await vizPromise;
  const result = viz.render(dot, { format: "svg" });
  if (result.status !== "success") {
    const msg = result.errors.filter((e) => e.level === "error").map((e) => e.message).join("; ");
    throw new Error(msg || "graphviz failed");
  }
  return result.output;
}

const inWorker = typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope;
if (inWorker) {
  self.onmessage = async (event) => {
    const { id, dot } = event.data;
    const t0 = performance.now();
    try {
      const svg = await renderDot(dot);
      self.postMessage({ id, svg, ms: performance.now() - t0 });
    } catch (err) {
      self.postMessage({ id, error: String((err && err.message) || err) });
    }
  };
}
