"""Helper for test_quant_graph: does llama.cpp read our K-quant bytes as gguf_quant decodes them?

``write SRC OUT_DIR``: two copies of the GGUF model SRC in which every ``ffn_down`` matrix (rows of
1536 values: whole 256-value super-blocks) is re-encoded by :func:`caten_lab.formats.gguf_quant.quantize`
as Q4_K, Q5_K or Q6_K (layer by layer in turn): ``kq.gguf`` holds those bytes, ``ref.gguf`` holds their
dequantization by :func:`caten_lab.formats.gguf_quant.dequantize` as F32. Every other tensor and all
metadata are copied. ``run FILE PROMPT N``: greedy decoding of N tokens by llama.cpp (xllamacpp),
printed as JSON; run in a subprocess (xllamacpp's threads and logging), ended by ``os._exit``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

KQUANTS = ("Q4_K", "Q5_K", "Q6_K")


def write(src: str, out_dir: str) -> None:
    import gguf
    import numpy as np

    from caten_lab.formats import gguf_quant as gq

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writers = {name: gguf.GGUFWriter(str(Path(out_dir) / f"{name}.gguf"), arch) for name in ("kq", "ref")}
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        for w in writers.values():
            w.add_key_value(field.name, field.contents(), field.types[0], sub)
    changed = 0
    for t in reader.tensors:
        if "ffn_down" in t.name:
            rows, k = int(t.shape[1]), int(t.shape[0])
            w32 = gguf.quants.dequantize(t.data, t.tensor_type).reshape(rows, k)
            kind = KQUANTS[changed % 3]
            raw = gq.quantize(w32, kind)
            writers["kq"].add_tensor(t.name, raw, raw_dtype=gguf.GGMLQuantizationType[kind])
            writers["ref"].add_tensor(t.name, gq.dequantize(raw.reshape(-1), kind, (rows, k)))
            changed += 1
            continue
        for w in writers.values():
            data = np.asarray(t.data)
            if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                w.add_tensor(t.name, data)
            else:
                w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    for w in writers.values():
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    print(json.dumps({"changed": changed}))


def run(path: str, prompt: str, n: int) -> None:
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = path
    p.n_ctx = 256
    p.cpuparams.n_threads = 2
    p.cpuparams_batch.n_threads = 2
    server = xllamacpp.Server(p)
    reply = server.handle_completions({"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True,
                                       "n_probs": 1, "cache_prompt": False})
    if isinstance(reply, str):
        reply = json.loads(reply)
    content = reply["choices"][0]["logprobs"]["content"]
    print(json.dumps({"tokens": [c["id"] for c in content], "text": reply["choices"][0]["text"]}), flush=True)


if __name__ == "__main__":
    try:
        if sys.argv[1] == "write":
            write(sys.argv[2], sys.argv[3])
        else:
            run(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    finally:
        sys.stdout.flush()
        os._exit(0)
