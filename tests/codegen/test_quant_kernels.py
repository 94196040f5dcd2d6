"""The C helpers of quantized matmuls (codegen/c/quant.h) against their NumPy reference
(:mod:`caten_lab.formats.act_quant`): activation quantization byte for byte, and every ``cl_qdot_<t>`` and
``cl_qgemm_<t>`` to float rounding, on random GGUF weights and on blocks at the extremes of each layout.

The header is compiled three times, as the renderer pastes it (after runtime.h): for this CPU
(``-march=native``: vpdpbusd where the CPU has VNNI), for AVX2 (vpmaddubsw) and with no SIMD flags (the
portable C); a tiny shim exports the helpers to cffi."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import cffi
import numpy as np
import pytest

from caten_lab.codegen.render import c_file
from caten_lab.formats import act_quant as aq
from caten_lab.formats import gguf_quant as gq
from caten_lab.runtime.toolchain import BASE_FLAGS

TYPES = ("q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k")
SIMD_FLAGS = {"native": ["-march=native"], "avx2": ["-mavx2", "-mfma", "-mf16c"], "portable": []}

_SHIM = "\n".join(
    ["int t_level(void) {",
     "#if defined(CL_QVNNI)", "  return 2;", "#elif defined(CL_QSIMD)", "  return 1;", "#else", "  return 0;",
     "#endif", "}",
     "void t_quant_a32(const float *x, void *o, int64_t k) { cl_quant_rows_a32(x, o, k); }",
     "void t_quant_a256(const float *x, void *o, int64_t k) { cl_quant_rows_a256(x, o, k); }"]
    + [f"float t_dot_{t}(int64_t k, const void *w, const void *x) {{ return cl_qdot_{t}(k, w, x); }}\n"
       f"void t_gemm_{t}(int64_t k, const void *w, int64_t ws, int64_t n, const void *x, int64_t xs, int64_t m, "
       f"float *o, int64_t os) {{ cl_qgemm_{t}(k, w, ws, n, x, xs, m, o, os); }}" for t in TYPES])
_CDEF = ("int t_level(void); void t_quant_a32(const float *, void *, int64_t);"
         "void t_quant_a256(const float *, void *, int64_t);"
         + "".join(f"float t_dot_{t}(int64_t, const void *, const void *);"
                   f"void t_gemm_{t}(int64_t, const void *, int64_t, int64_t, const void *, int64_t, int64_t, "
                   f"float *, int64_t);" for t in TYPES))


def _header() -> str:
    return c_file("runtime.h") + c_file("quant.h")


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    return set(m.group(1).split()) if m else set()


def _cc() -> list[str]:
    return shlex.split(os.environ.get("CC", "cc"))


def _is_gcc(cc: list[str]) -> bool:
    out = subprocess.run([*cc, "--version"], capture_output=True, text=True, check=False).stdout
    return "clang" not in out.lower()


_LOADED: list = []  # never unloaded


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """variant -> (ffi, lib): the three builds, compiled in parallel."""
    d = tmp_path_factory.mktemp("quant_kernels")
    src = d / "shim.c"
    src.write_text(_header() + "\n" + _SHIM + "\n")
    flags = _cpu_flags()
    variants = [v for v in SIMD_FLAGS if v != "avx2" or {"avx2", "f16c", "fma"} <= flags]
    procs = {v: subprocess.Popen([*_cc(), *BASE_FLAGS, *SIMD_FLAGS[v], str(src), "-o", str(d / f"{v}.so"), "-lm"],
                                 stderr=subprocess.PIPE, text=True) for v in variants}
    out = {}
    for v, p in procs.items():
        err = p.communicate()[1]
        assert p.returncode == 0, f"{v} build failed:\n{err}"
        ffi = cffi.FFI()
        ffi.cdef(_CDEF)
        lib = ffi.dlopen(str(d / f"{v}.so"))
        _LOADED.append((ffi, lib))
        out[v] = (ffi, lib)
    return out


def _ptr(ffi, a: np.ndarray):  # noqa: ANN001, ANN202
    return ffi.cast("void *", a.ctypes.data)


def test_each_build_takes_its_path(libs) -> None:  # noqa: ANN001
    """The native and AVX2 builds really run the SIMD code (with gcc on x86), the portable one does not."""
    assert libs["portable"][1].t_level() == 0
    flags = _cpu_flags()
    if not _is_gcc(_cc()) or "avx2" not in flags:
        return
    if "avx2" in libs:
        assert libs["avx2"][1].t_level() == 1
    vnni = {"avx512_vnni", "avx512vl"} <= flags or "avx_vnni" in flags
    assert libs["native"][1].t_level() == (2 if vnni else 1 if "f16c" in flags else 0)


# ---- activation quantization --------------------------------------------------------------------------

def _edge_rows(block: int) -> list[np.ndarray]:
    """Rows of 2 blocks whose first block is an edge case (the second is ordinary)."""
    rng = np.random.default_rng(7)
    rows = []
    for case in range(10):
        x = rng.standard_normal(2 * block).astype(np.float32)
        b = x[:block]
        if case == 0:
            b[:] = 0  # a zero block: d = 0
        elif case == 1:
            b[3] = np.inf  # d = NaN, q = 0
        elif case == 2:
            b[block - 1] = -np.inf
        elif case == 3:
            b[5] = np.nan
        elif case == 4:
            b[:] = np.float32(1e-40) * np.arange(block)  # subnormals: 127 / amax overflows -> zero block
        elif case == 5:
            b[:] = np.float32(1e-36) * rng.standard_normal(block)  # tiny but quantizable
        elif case == 6:
            b[:] = np.float32(1e38) * rng.uniform(-1, 1, block)  # huge
            b[0] = np.float32(3.4e38)
        elif case == 7:  # amax 127: inv = 1 and every value a tie (round half to even)
            b[:] = np.arange(block) % 9 - 4.5
            b[0] = 127.0
            b[1] = -126.5
        elif case == 8:  # amax 254: inv = 0.5, odd integers halve to ties
            b[:] = 2 * (np.arange(block) % 13) - 13 + 0.0
            b[0] = -254.0
        else:
            b[:] = -0.0
            b[1] = np.float32(1.5e-45)  # the smallest subnormal alone
        rows.append(x)
    return rows


@pytest.mark.parametrize("block", [32, 256])
def test_quantized_rows_are_the_reference_bytes(libs, block) -> None:  # noqa: ANN001
    rng = np.random.default_rng(block)
    rows = [rng.standard_normal(block * n).astype(np.float32) * s for n, s in ((1, 1.0), (3, 1e-3), (5, 7e3))]
    # many blocks of many magnitudes: d = amax / 127 must be the division's rounding (amax * (1 / 127)
    # differs in ~5% of blocks), q the products' rounding
    nb = 12800 // block
    rows.append((rng.standard_normal((nb, block)) * np.exp(rng.uniform(-30, 30, (nb, 1)))).astype(np.float32).ravel())
    rows += _edge_rows(block)
    for variant, (ffi, lib) in libs.items():
        fn = lib.t_quant_a32 if block == 32 else lib.t_quant_a256
        for i, x in enumerate(rows):
            want = aq.quantize_rows(x, block)
            got = np.full_like(want, 0xAB)
            fn(ffi.cast("float *", x.ctypes.data), _ptr(ffi, got), x.size)
            assert np.array_equal(got, want), f"{variant} row {i}: bytes {np.flatnonzero(got != want)[:8]} differ"


# ---- dot products and qgemm -------------------------------------------------------------------------------

def _extreme_blocks(t: str, rng: np.random.Generator, nblocks: int) -> np.ndarray:
    """Weight blocks (nblocks of type t, random bytes) with every quantity at its limits in some block."""
    values, nbytes = gq.LAYOUTS[t.upper()]
    raw = rng.integers(0, 256, (nblocks, nbytes), dtype=np.uint8)
    f16 = lambda v: np.array([v], np.float16).view(np.uint8)  # noqa: E731
    kinds = ("max", "zero", "min", "random")
    for i in range(nblocks):
        kind = kinds[i % len(kinds)]
        b = raw[i]
        if t == "q8_0":
            b[2:] = {"max": 127, "zero": 0, "min": 128, "random": b[2:]}[kind]  # 128: int8 -128
            b[0:2] = f16(rng.choice([1.0, -0.5, 3.0e-3, 6.0e4]))
        elif t in ("q4_0", "q4_1"):
            q0 = 2 if t == "q4_0" else 4
            b[q0:] = {"max": 0xFF, "zero": 0x00, "min": 0x88, "random": b[q0:]}[kind]
            b[0:2] = f16(rng.choice([1.0, 0.25, -2.0e-3]))
            if t == "q4_1":
                b[2:4] = f16(rng.choice([-8.0, 0.0, 3.5e-2]))
        elif t in ("q4_k", "q5_k"):
            b[0:2], b[2:4] = f16(rng.choice([1.0, 2.0e-3])), f16(rng.choice([0.5, 0.0, 1.0e-3]))
            if kind == "max":
                b[4:] = 0xFF  # scales and mins 63, every value 15 (31)
            elif kind == "zero":
                b[4:16] = 0xFF
                b[16:] = 0
            elif kind == "min":
                b[4:16] = 0
                b[16:] = 0xFF
        else:  # q6_k
            b[208:210] = f16(rng.choice([1.0, -3.0e-3, 5.0e-2]))
            if kind == "max":
                b[:192] = 0xFF  # every value 63 (+31)
                b[192:208] = 127
            elif kind == "zero":
                b[:192] = 0  # every value 0 (-32)
                b[192:208] = 128  # scale -128
            elif kind == "min":
                b[:192] = 0
                b[192:208] = 127
    return raw.reshape(-1)


def _weights(t: str, n: int, k: int, rng: np.random.Generator, extreme: bool) -> np.ndarray:
    """(n, row bytes) uint8: gguf_quant.quantize of random rows, or hand-made extreme blocks."""
    rb = gq.row_bytes(t.upper(), k)
    if extreme:
        return _extreme_blocks(t, rng, n * k // gq.LAYOUTS[t.upper()][0]).reshape(n, rb)
    w = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(0.01, 2.0, (n, 1)).astype(np.float32)
    return gq.quantize(w, t.upper())


def _acts(m: int, k: int, block: int, rng: np.random.Generator) -> np.ndarray:
    """(m, act row bytes): random rows with edge blocks (all +127, all -127, zero, one huge value, NaN)."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    nb = k // block
    for i in range(m):
        b = (i * 3) % nb
        kind = i % 6
        if kind == 1:
            x[i, b * block:(b + 1) * block] = 1.0  # q = 127
        elif kind == 2:
            x[i, b * block:(b + 1) * block] = -3.0  # q = -127
        elif kind == 3:
            x[i, b * block:(b + 1) * block] = 0.0
        elif kind == 4:
            x[i, b * block] = 1e30
        elif kind == 5 and i == 5:
            x[i, b * block + 1] = np.nan  # one row reads NaN
    return aq.quantize_rows(x, block)


def _check(got: np.ndarray, xq: np.ndarray, w: np.ndarray, t: str, k: int, msg: str) -> None:
    """got (m, n) against quant_matmul: |got - want| <= 1e-5 * sum |w||x| + 1e-6; NaN where it has NaN."""
    n = w.shape[0]
    want = aq.quant_matmul(xq, w, t.upper(), n, k).reshape(-1, n)
    xv = np.abs(aq.act_values(xq, aq.act_block(t.upper()), k).reshape(-1, k))
    wv = np.abs(gq.dequantize(np.ascontiguousarray(w).reshape(-1), t.upper(), (n, k)).astype(np.float64))
    with np.errstate(invalid="ignore"):
        bound = 1e-5 * (xv @ wv.T) + 1e-6
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{msg}: NaN pattern")
    err = np.abs(got.astype(np.float64) - want)[~nan]
    assert np.all(err <= bound[~nan]), f"{msg}: max error {err.max()} vs bound {bound[~nan][np.argmax(err - bound[~nan])]}"


def _ks(t: str) -> list[int]:
    return [256, 768, 1536] if t.endswith("_k") else [32, 160, 576, 2240]  # 2240: past one 64-block chunk


@pytest.mark.parametrize("t", TYPES)
def test_dot_products_match_quant_matmul(libs, t) -> None:  # noqa: ANN001
    rng = np.random.default_rng(TYPES.index(t))
    block = aq.act_block(t.upper())
    for k in _ks(t):
        for extreme in (False, True):
            w = _weights(t, 6, k, rng, extreme)
            xq = _acts(6, k, block, rng)
            for variant, (ffi, lib) in libs.items():
                dot = getattr(lib, f"t_dot_{t}")
                got = np.array([[dot(k, _ptr(ffi, w[j]), _ptr(ffi, xq[i])) for j in range(w.shape[0])]
                                for i in range(xq.shape[0])], np.float32)
                _check(got, xq, w, t, k, f"{variant} cl_qdot_{t} k={k} extreme={extreme}")


@pytest.mark.parametrize("t", TYPES)
def test_qgemm_matches_quant_matmul(libs, t) -> None:  # noqa: ANN001
    """Tiles of every shape at the edges (m, n in 1, 3, 4, 5, 17), strides larger than a row; the output
    between rows (out_stride > n) is left alone."""
    rng = np.random.default_rng(TYPES.index(t) + 10)
    block = aq.act_block(t.upper())
    shapes = [(1, 1), (1, 5), (3, 4), (4, 17), (5, 3), (17, 5), (8, 2)]
    for k in _ks(t)[1:3] + _ks(t)[-1:]:
        for m, n in shapes:
            extreme = (m + n) % 2 == 0
            w = _weights(t, n, k, rng, extreme)
            xq = _acts(m, k, block, rng)
            wpad = np.zeros((n, w.shape[1] + 8), np.uint8)
            wpad[:, : w.shape[1]] = w
            xpad = np.zeros((m, xq.shape[1] + 12), np.uint8)
            xpad[:, : xq.shape[1]] = xq
            for variant, (ffi, lib) in libs.items():
                out = np.full((m, n + 3), -7.0, np.float32)
                getattr(lib, f"t_gemm_{t}")(k, _ptr(ffi, wpad), wpad.shape[1], n, _ptr(ffi, xpad), xpad.shape[1], m,
                                            ffi.cast("float *", out.ctypes.data), n + 3)
                assert np.all(out[:, n:] == -7.0), f"{variant} cl_qgemm_{t} wrote past n"
                _check(out[:, :n], xq, w, t, k, f"{variant} cl_qgemm_{t} k={k} m={m} n={n}")
