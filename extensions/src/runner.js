// caten_lab GPT-2 runner: prompt, sampling options, Generate/Stop, tokens streamed as the kernel
// produces them (custom messages), live tokens/s and optional top-k probabilities per token.
import { h } from "./dom.js";

function render({ model, el }) {
  const root = h("div", { class: "caten-runner", "data-lm-suppress-shortcuts": "true" });
  root.addEventListener("keydown", (e) => e.stopPropagation()); // typing a prompt must not trigger notebook shortcuts
  const prompt = h("textarea", { class: "cr-prompt", rows: "3", placeholder: "prompt" });
  prompt.value = model.get("prompt");
  const num = (name, step, min, max) => {
    const inp = h("input", { type: "number", class: `cr-${name}`, step, min, max });
    inp.value = String(model.get(name));
    inp.addEventListener("change", () => {
      const v = step === "1" ? parseInt(inp.value, 10) : parseFloat(inp.value);
      if (!Number.isNaN(v)) (model.set(name, v), model.save_changes());
    });
    model.on(`change:${name}`, () => (inp.value = String(model.get(name))));
    return inp;
  };
  const probsChk = h("input", { type: "checkbox", class: "cr-show-probs" });
  probsChk.checked = model.get("show_probs");
  probsChk.addEventListener("change", () => (model.set("show_probs", probsChk.checked), model.save_changes()));
  const genBtn = h("button", { class: "cr-generate", text: "Generate" });
  const stopBtn = h("button", { class: "cr-stop", text: "Stop" });
  const stats = h("span", { class: "cr-stats" });
  const out = h("div", { class: "cr-output" });
  const probsEl = h("div", { class: "cr-probs" });
  const err = h("pre", { class: "cr-error" });
  prompt.addEventListener("change", () => (model.set("prompt", prompt.value), model.save_changes()));
  genBtn.addEventListener("click", () => {
    model.set("prompt", prompt.value);
    model.save_changes();
    out.replaceChildren(h("span", { class: "cr-prompt-echo", text: prompt.value }));
    probsEl.replaceChildren();
    err.textContent = "";
    model.send({ type: "generate" });
  });
  stopBtn.addEventListener("click", () => model.send({ type: "stop" }));
  root.append(
    prompt,
    h(
      "div",
      { class: "cr-options" },
      h("label", {}, "max tokens ", num("max_new_tokens", "1", "1", "4096")),
      h("label", {}, "temperature ", num("temperature", "0.05", "0", "5")),
      h("label", {}, "top-k ", num("top_k", "1", "0", "50000")),
      h("label", {}, "top-p ", num("top_p", "0.05", "0", "1")),
      h("label", {}, "seed ", num("seed", "1", "0", "2147483647")),
      h("label", {}, probsChk, " show top-k probabilities"),
      genBtn,
      stopBtn,
      stats
    ),
    out,
    probsEl,
    err
  );
  el.append(root);
  const sync = () => {
    const running = model.get("running");
    genBtn.disabled = running;
    stopBtn.disabled = !running;
    root.dataset.running = running ? "1" : "0";
    const tps = model.get("tokens_per_s");
    const ft = model.get("first_token_s");
    const first = ft ? ` · first after ${ft < 1 ? `${(ft * 1e3).toFixed(0)} ms` : `${ft.toFixed(2)} s`}` : "";
    stats.textContent = `${model.get("n_tokens")} tokens${first} · ${tps ? tps.toFixed(1) : "–"} tok/s${running ? " · generating…" : ""}`;
    err.textContent = model.get("error") || "";
  };
  for (const t of ["running", "n_tokens", "tokens_per_s", "first_token_s", "error"]) model.on(`change:${t}`, sync);
  sync();
  if (model.get("generated")) out.replaceChildren(h("span", { class: "cr-prompt-echo", text: model.get("prompt") }), h("span", { class: "cr-tok", text: model.get("generated") }));
  model.on("msg:custom", (msg) => {
    if (msg.type === "token") {
      const tok = h("span", { class: "cr-tok", "data-id": String(msg.id), text: msg.text });
      if (msg.probs && msg.probs.length) {
        tok.title = msg.probs.map(([t, p]) => `${JSON.stringify(t)} ${(p * 100).toFixed(1)}%`).join("\n");
        if (model.get("show_probs")) {
          probsEl.append(h("div", { class: "cr-prob-row" }, h("b", { text: JSON.stringify(msg.text) }), " ", msg.probs.map(([t, p]) => `${JSON.stringify(t)} ${(p * 100).toFixed(1)}%`).join(" · ")));
        }
      }
      out.append(tok);
    } else if (msg.type === "reset") {
      out.replaceChildren(h("span", { class: "cr-prompt-echo", text: model.get("prompt") }));
      probsEl.replaceChildren();
    }
  });
}

export default { render };
