"""Speed of the quantized matmul helpers (caten_lab/codegen/c/quant.h): portable C against the SIMD code.

Per weight type, at SmolLM2-135M sizes (hidden 576, MLP 1536, vocabulary 49152 for Q8_0; K-quants only
where the row length is a multiple of 256: the 576 x 1536 down projection):

- matvec (a decode step): GB/s of weight bytes for ``n x k`` weights times one activation row, as the
  compiler lowers it (one ``cl_qdot_<t>`` per weight row) and as one ``cl_qgemm_<t>`` call with m = 1;
- qgemm (a prefill): GFLOP/s (2 m n k / time) of m = 128 activation rows, in the compiler's tiles
  (``cl_qgemm_<t>`` on at most 64 weight rows x 64 activation rows per call).

Each build is the header pasted after runtime.h, compiled with the project's flags and -march=native;
``portable`` adds -DCL_QUANT_PORTABLE, ``avx2`` replaces -march=native by -mavx2 -mfma -mf16c. Times are
the best of several runs on one thread (caches warm: SmolLM2's matrices fit in L2/L3).

    .venv/bin/python bench/quant_kernels.py --quick
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import cffi
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from caten_lab.codegen.render import c_file  # noqa: E402
from caten_lab.formats import act_quant as aq  # noqa: E402
from caten_lab.runtime.toolchain import BASE_FLAGS  # noqa: E402

TYPES = ("q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k")
BUILDS = {"portable": ["-march=native", "-DCL_QUANT_PORTABLE"], "avx2": ["-mavx2", "-mfma", "-mf16c"],
          "native": ["-march=native"]}
TILE = 64  # weight rows and activation rows per cl_qgemm call, as the compiler's qgemm_tiles

_SHIM = """
double b_matvec_{t}(int64_t k, const char *w, int64_t ws, int64_t n, const char *x, float *out, int gemm, int reps) {{
  double best = 1e30;
  for (int r = 0; r < reps; r++) {{
    double t0 = cl_now();
    if (gemm) cl_qgemm_{t}(k, w, ws, n, x, 0, 1, out, n);
    else for (int64_t j = 0; j < n; j++) out[j] = cl_qdot_{t}(k, w + j * ws, x);
    double t = cl_now() - t0;
    best = t < best ? t : best;
  }}
  return best;
}}
double b_gemm_{t}(int64_t k, const char *w, int64_t ws, int64_t n, const char *x, int64_t xs, int64_t m, float *out,
                  int reps) {{
  float c[{tile} * {tile}];
  double best = 1e30;
  for (int r = 0; r < reps; r++) {{
    double t0 = cl_now();
    for (int64_t jt = 0; jt < n; jt += {tile})
      for (int64_t lt = 0; lt < m; lt += {tile}) {{
        int64_t nn = n - jt < {tile} ? n - jt : {tile}, mm = m - lt < {tile} ? m - lt : {tile};
        cl_qgemm_{t}(k, w + jt * ws, ws, nn, x + lt * xs, xs, mm, c, {tile});
        for (int64_t i = 0; i < mm; i++)
          for (int64_t j = 0; j < nn; j++) out[(lt + i) * n + jt + j] = c[i * {tile} + j];
      }}
    double t = cl_now() - t0;
    best = t < best ? t : best;
  }}
  return best;
}}
"""
_CDEF = "".join(
    f"double b_matvec_{t}(int64_t, const char *, int64_t, int64_t, const char *, float *, int, int);"
    f"double b_gemm_{t}(int64_t, const char *, int64_t, int64_t, const char *, int64_t, int64_t, float *, int);"
    for t in TYPES)

# f16 scale fields of each layout (byte offset, value): finite, modest values over random payload bytes
_SCALES = {"q8_0": ((0, 0.01),), "q4_0": ((0, 0.01),), "q4_1": ((0, 0.01), (2, -0.05)),
           "q4_k": ((0, 0.01), (2, 0.002)), "q5_k": ((0, 0.01), (2, 0.002)), "q6_k": ((208, 0.01),)}
_LAYOUT = {"q8_0": (32, 34), "q4_0": (32, 18), "q4_1": (32, 20), "q4_k": (256, 144), "q5_k": (256, 176),
           "q6_k": (256, 210)}


def build(header: str, flags: list[str], tmp: Path, name: str):  # noqa: ANN201
    src = tmp / f"{name}.c"
    src.write_text(c_file("runtime.h") + header + "".join(_SHIM.format(t=t, tile=TILE) for t in TYPES))
    cc = shlex.split(os.environ.get("CC", "cc"))
    subprocess.run([*cc, *BASE_FLAGS, *flags, str(src), "-o", str(tmp / f"{name}.so"), "-lm"], check=True)
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    return ffi, ffi.dlopen(str(tmp / f"{name}.so"))


def weights(t: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    values, nbytes = _LAYOUT[t]
    raw = rng.integers(0, 256, (n * k // values, nbytes), dtype=np.uint8)
    for at, v in _SCALES[t]:
        raw[:, at:at + 2] = np.array([v], np.float16).view(np.uint8)
    return raw.reshape(n, -1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs, no 49152-row matvec (under a minute)")
    ap.add_argument("--header", type=Path, help="benchmark this copy of quant.h instead of the project's")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated weight types")
    ap.add_argument("--builds", default=",".join(BUILDS), help="comma-separated builds: " + ", ".join(BUILDS))
    args = ap.parse_args(argv)
    header = args.header.read_text() if args.header else c_file("quant.h")
    types = [t for t in args.types.split(",") if t]
    builds = [b for b in args.builds.split(",") if b]
    mv_reps, gemm_reps, m = (20, 2, 128) if args.quick else (200, 5, 128)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        libs = {b: build(header, BUILDS[b], Path(tmp), b) for b in builds}
        head = f"{'type':6} {'size':>10} {'what':12}" + "".join(f"{b:>10}" for b in builds) + "   unit"
        print(head)
        print("-" * len(head))
        for t in types:
            block = 32 if t in ("q8_0", "q4_0", "q4_1") else 256
            shapes = [(1536, 576), (576, 1536)] if block == 32 else [(576, 1536)]  # K-quants: k % 256 == 0
            if t == "q8_0" and not args.quick:
                shapes.append((49152, 576))
            for n, k in shapes:
                w = weights(t, n, k, rng)
                xs = aq.quantize_rows(rng.standard_normal((m, k)).astype(np.float32), block)
                out = np.zeros(m * n, np.float32)
                rows = {"matvec dot": [], "matvec gemm": [], "qgemm m=128": []}
                for b, (ffi, lib) in libs.items():
                    pw, px = ffi.from_buffer(w), ffi.from_buffer(xs)
                    po = ffi.cast("float *", out.ctypes.data)
                    reps = max(2, mv_reps // 10) if b == "portable" else mv_reps
                    for gemm, key in ((0, "matvec dot"), (1, "matvec gemm")):
                        sec = getattr(lib, f"b_matvec_{t}")(k, pw, w.shape[1], n, px, po, gemm, reps)
                        rows[key].append(w.nbytes / sec / 1e9)
                    if n * k <= 1536 * 1536:
                        sec = getattr(lib, f"b_gemm_{t}")(k, pw, w.shape[1], n, px, xs.shape[1], m, po,
                                                          1 if b == "portable" else gemm_reps)
                        rows["qgemm m=128"].append(2.0 * m * n * k / sec / 1e9)
                for key, vals in rows.items():
                    if vals:
                        unit = "GFLOP/s" if key.startswith("qgemm") else "GB/s"
                        print(f"{t:6} {f'{n}x{k}':>10} {key:12}" + "".join(f"{v:10.1f}" for v in vals) + f"   {unit}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
