"""A scheduled graph as one kernel-IR program: every unique kernel lowered once (the schedule cache),
plus the entry's call table (one :class:`~caten_lab.codegen.kir.KernelCall` per scheduled kernel)."""

from __future__ import annotations

from caten_lab.codegen.kir import Function, KernelCall, Origin, Program
from caten_lab.codegen.lower import KernelLowerer, LowerOptions
from caten_lab.passes.indexing import linear_form_atoms
from caten_lab.passes.schedule import Kernel, Schedule


def lower_kernel(kernel: Kernel, name: str, symbols: list[str], options: LowerOptions) -> Function:
    """Lower in the tiled matmul form where it applies (decided by a dry run in the plain form)."""
    has_reduce = any(n.op == "reduce" for n in kernel.graph)
    lw = KernelLowerer(kernel, name, symbols, options)
    fn = lw.lower()
    if not has_reduce or lw.inner_main is None:
        return fn
    vec = vector_reduces(lw)
    if not vec:
        return fn
    return KernelLowerer(kernel, name, symbols, options, vectorize=frozenset(vec)).lower()


def vector_reduces(lw: KernelLowerer) -> set[str]:
    """Reduces that read something contiguous along the innermost output axis but strided along their own."""
    out = set()
    inner = lw.inner_main
    for value, (depends_inner, loads, last_stage) in lw.stage_info.items():
        if not depends_inner or last_stage is None:
            continue
        rows = dots = False
        for flat in loads:
            lin = linear_form_atoms(flat)  # a reshape's l // 3 counts as a variable, not as non-linear
            if lin is None:
                continue
            coefs, _ = lin
            ci, cs = coefs.get(inner, 0), coefs.get(last_stage, 0)
            if ci == 1 and cs not in (0, 1):
                rows = True  # a matrix contiguous along the outputs (W^T layout): vectorize over outputs
            elif cs == 1 and ci != 0:
                dots = True  # a matrix contiguous along the reduction (W layout): the dot products vectorize
        if rows and not dots:  # (a per-output vector such as a dequantization scale decides nothing)
            out.add(value)
    return out


def lower_functions(kernels: list[Kernel], symbols: list[str], options: LowerOptions,
                    ) -> tuple[list[Function], dict[str, str]]:
    """Lower each unique kernel once (the schedule cache); returns functions and kernel name -> function."""
    by_key: dict[str, int] = {}
    names: list[list[str]] = []
    fn_of: dict[str, str] = {}
    funcs: list[Function] = []
    for k in kernels:
        i = by_key.get(k.key)
        if i is None:
            i = by_key[k.key] = len(funcs)
            funcs.append(lower_kernel(k, f"kern{len(funcs)}_{_c_ident(k.name.split('_', 1)[-1])}", symbols, options))
            names.append([])
        names[i].append(k.name)
        fn_of[k.name] = funcs[i].name
    funcs = [f if len(ns) == 1 else f.with_meta(kernel_names=tuple(ns)) for f, ns in zip(funcs, names)]
    return funcs, fn_of


def build_program(sched: Schedule, options: LowerOptions) -> Program:
    """Lower every unique kernel once and the entry's call table (one row per scheduled kernel)."""
    funcs, fn_of = lower_functions(sched.kernels, sched.symbols, options)
    buffers = list(sched.buffers)
    bidx = {b: i for i, b in enumerate(buffers)}
    calls = tuple(KernelCall(fn_of[k.name], tuple(bidx[b] for b in k.params), Origin(tuple(k.node_ids)))
                  for k in sched.kernels)
    return Program(tuple(funcs), calls, tuple(sched.symbols), tuple(buffers))


def kernel_nodes(program: Program) -> dict[str, list[int]]:
    """Function name -> AIR node ids of the first kernel it implements (the C view's header lines)."""
    return {f.name: list(f.origin.nodes) for f in program.functions}


def _c_ident(s: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in s)[:40]

