"""Tile sizes of the ``rowblock`` pass (:mod:`caten_lab.codegen.rowblock`): its options and the
register / cache tile they give for a weight width and a reduction length."""

from __future__ import annotations

from dataclasses import dataclass

from caten_lab.codegen.pass_options import check_options


@dataclass(frozen=True)
class RowBlockOptions:
    """Tile sizes of the ``rowblock`` pass (part of the compile-cache key through the pipeline)."""

    enabled: bool = True
    rows: int = 8  # rows per register tile (float32 weights)
    cols: int = 2  # output features per register tile (rows * cols accumulators)
    acc_regs: int = 16  # vector registers for accumulators: half of AVX-512's 32, the rest hold operands
    tile_bytes: int = 384 * 1024  # weight bytes per column tile: fits a 1 MB L2 next to the operand rows
    tile_max: int = 256
    lowbit_scratch: bool = True  # low-bit weights: widen each column's row to float once per register tile
    scratch_below: int = 3  # weight bytes below which the buffer is used: int8 and float16 (float16 only through
    # cl_h2f_n, the hardware conversion: its bit widening in C cost as much as the 8 rows' multiply-adds)
    scratch_max: int = 4096  # longest reduction (K) widened into a stack buffer (16 KB per column)

    def __post_init__(self) -> None:
        check_options(self)


DEFAULTS = RowBlockOptions()

# ------------------------------------------------------------------------------------ tile sizes


def register_tile_for(wbytes: int, o: RowBlockOptions) -> tuple[int, int]:
    """(rows, columns) of the register tile for ``wbytes``-byte loads. gcc vectorizes a loop by its
    narrowest type, so with int8 weights every float accumulator spans 4 vector registers (2 with
    float16): the tile shrinks so the accumulators still fit ``acc_regs`` (a spilling 8 x 2 int8 tile
    ran 2.5x slower)."""
    accs = max(1, o.acc_regs // (4 // min(max(wbytes, 1), 4)))
    cols = o.cols if accs >= o.rows * o.cols else 1
    return max(1, min(o.rows, accs // cols)), cols


def widens(wbytes: int, k: int | None, o: RowBlockOptions) -> bool:
    """Whether a tiled reduction of constant length ``k`` over ``wbytes``-byte weights widens them
    into a float buffer first."""
    return o.lowbit_scratch and wbytes < o.scratch_below and k is not None and k <= o.scratch_max


def register_tile(wbytes: int, k: int | None, o: RowBlockOptions | None = None) -> tuple[int, int]:
    """(rows, columns) of the register tile for ``wbytes``-byte weights and reduction length ``k``."""
    o = o or DEFAULTS
    return register_tile_for(4 if widens(wbytes, k, o) else wbytes, o)


def tile_width(n_out: int, k: int | None, wbytes: int, cols: int, o: RowBlockOptions) -> int:
    """Output features per cache tile: a multiple of ``cols`` whose weight rows fit ``tile_bytes``."""
    kk = k if k is not None else 1024
    jt = max(cols, min(o.tile_max, o.tile_bytes // max(1, kk * wbytes)) // cols * cols)
    return min(jt, -(-n_out // cols) * cols)
