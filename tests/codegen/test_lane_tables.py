"""lane_tables: index tables evaluated at compile time, and the unroll span of a blocked lane loop."""

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import Alu, Cast, Const, Decl, Var
from caten_lab.codegen.lane_tables import IndexTable, table_constants, unroll_span

I64, I32, F32, B = DType.int64, DType.int32, DType.float32, DType.bool


def _q4_tables(size: int = 96) -> tuple[IndexTable, IndexTable]:
    """The Q4 nibble mask and scale tables as the hoist pass builds them: ``(h / 16) % 2 ? 240 : 15``."""
    h = Var("_i", I64)
    d16 = Alu("div", (h, Const(16, I64)), I64)
    odd = Decl("odd", B, Alu("ne", (Cast(Alu("sub", (d16, Alu("mul", (Alu("div", (d16, Const(2, I64)), I64),
                                                                        Const(2, I64)), I64)), I64), I32),
                                    Const(0, I32)), B))
    mask = Decl("mask", I64, Alu("where", (Var("odd", B), Const(240, I64), Const(15, I64)), I64))
    scale = Decl("scale", F32, Alu("where", (Var("odd", B), Const(0.0625, F32), Const(1.0, F32)), F32))
    return (IndexTable("_i", size, (odd, mask), Cast(Var("mask", I64), I32)),
            IndexTable("_i", size, (odd, scale), Var("scale", F32)))


def test_a_q4_nibble_table_is_one_constant_per_half_block():
    mask, scale = _q4_tables()
    assert [c.value for c in table_constants(mask, 32, 16)] == [15, 240]
    assert [c.dtype for c in table_constants(mask, 32, 16)] == [I32, I32]
    assert [c.value for c in table_constants(scale, 32, 16)] == [1.0, 0.0625]
    assert table_constants(mask, 32, 8) is not None  # four sub-blocks of 8: 15, 15, 240, 240
    assert [c.value for c in table_constants(mask, 32, 8)] == [15, 15, 240, 240]
    assert table_constants(mask, 16, 16) is None  # not constant over a lane block of a 16-value span
    assert table_constants(mask, 64, 64) is None  # nor over 64 values
    assert table_constants(_q4_tables(size=40)[0], 32, 16) is None  # no whole number of spans


def test_a_table_that_reads_its_index_directly_is_no_constant():
    h = Var("_i", I64)
    within = IndexTable("_i", 64, (), Alu("sub", (h, Alu("mul", (Alu("div", (h, Const(16, I64)), I64),
                                                                Const(16, I64)), I64)), I64))
    assert table_constants(within, 32, 16) is None


def test_unroll_span():
    assert unroll_span({16, 32}, 16) == 2  # Q4_1: two nibble halves of 16 per 32-value block
    assert unroll_span({32}, 32) == 1  # Q8_0: a lane block is a block
    assert unroll_span({32, 64, 128, 256}, 32) == 2  # K-quants: the next level up
    assert unroll_span({16, 48}, 16) == 3
    assert unroll_span({16, 48, 64}, 16) == 1  # 64 is no multiple of 48: not one span
    assert unroll_span({16, 256}, 16) == 1  # more than MAX_UNROLL lane loops
