// Builds the notebook front-end into ../caten_lab/notebook/static/ (committed, so pip users need no Node).
// 1. the layout worker (Graphviz WASM inline) as one ESM file, 2. the Inspector, which embeds the
// worker's source as a string (started from a Blob URL), 3. the GPT-2 runner. Run: npm run build
import * as esbuild from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "caten_lab", "notebook", "static");
mkdirSync(join(here, "build"), { recursive: true });
mkdirSync(out, { recursive: true });

const common = { bundle: true, format: "esm", minify: true, charset: "utf8", legalComments: "inline", target: "es2020" };

const worker = await esbuild.build({
  ...common,
  entryPoints: [join(here, "src", "layout_worker.js")],
  write: false,
});
const workerSource = worker.outputFiles[0].text;

const embedWorker = {
  name: "embed-layout-worker",
  setup(build) {
    build.onResolve({ filter: /^virtual:layout-worker$/ }, () => ({ path: "layout-worker", namespace: "embed" }));
    build.onLoad({ filter: /.*/, namespace: "embed" }, () => ({ contents: workerSource, loader: "text" }));
  },
};

await esbuild.build({
  ...common,
  entryPoints: [join(here, "src", "inspector.js")],
  outfile: join(out, "inspector.js"),
  plugins: [embedWorker],
});
await esbuild.build({ ...common, entryPoints: [join(here, "src", "runner.js")], outfile: join(out, "runner.js") });
copyFileSync(join(here, "src", "inspector.css"), join(out, "inspector.css"));
copyFileSync(join(here, "src", "runner.css"), join(out, "runner.css"));
console.log("built", out);
