"""Every kernel-IR statement of a compiled GPT-2 block names AIR nodes of the scheduled graph, so the
Inspector's statement -> node links always land on a node (a kernel's parameter reads used to carry
the id of a scheduler-made allocate node that no graph of the trace holds)."""

from __future__ import annotations

import numpy as np

from caten_lab.codegen.kir_walk import walk
from caten_lab.compiler import lower_to_c
from caten_lab.frontend import Tensor, build_graph
from caten_lab.nn.gpt2 import GPT2, GPT2Config


def test_statement_origins_are_nodes_of_the_scheduled_graph():
    block = GPT2(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2))
    g, _ = build_graph([block(Tensor.from_numpy(np.array([[1, 2, 3, 4]], dtype=np.int64), name="tokens"), 0)])
    tr = lower_to_c(g, trace=True).trace
    ids = {n.id for n in tr["schedule"].after.nodes}
    final = tr["render"].kernel_after
    named = [n for f in final.functions for s in walk(f.body) for n in s.origin.nodes]
    assert len(named) > 100
    assert set(named) <= ids, sorted(set(named) - ids)
