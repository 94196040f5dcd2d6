"""Tokenizer tables linked into a C library as data (.incbin), read back from C."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizer_refs import ours_gpt2

from caten_lab.config import config
from caten_lab.errors import CatenError
from caten_lab.workflow.tokenizers.static_data import pack_static

cffi = pytest.importorskip("cffi")


def test_pack_static_round_trips_gpt2_tables():
    args = ours_gpt2("ranks").static_args()
    blob = pack_static(args)
    for name, value in args.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(blob.array(name), value), name
            assert blob.arrays[name][0] % 64 == 0
        else:
            assert blob.scalars[name] == value
    assert len(blob.data) < 8_000_000


def test_incbin_blob_is_readable_from_c(tmp_path):
    from caten_lab.runtime.toolchain import build_library, toolchain
    from caten_lab.workflow.tokenizers.static_data import incbin_c

    args = ours_gpt2("ranks").static_args()
    blob = pack_static(args)
    path = tmp_path / "gpt2_tables.bin"
    path.write_bytes(blob.data)
    names = [n for n in blob.arrays if blob.arrays[n][1] in ("uint8", "int32")]
    body = [incbin_c(blob, path, "gpt2_tab")]
    for n in names:
        body.append(f"int64_t sum_{n}(void) {{ int64_t s = 0; for (int64_t i = 0; i < gpt2_tab_{n}_len; i++) "
                    f"s += gpt2_tab_{n}[i]; return s; }}")
    body.append("int64_t get_pmask(void) { return gpt2_tab_pmask; }")
    source = "\n".join(body) + "\n"
    cfg = config()
    built = build_library(source, toolchain(cfg.cc, cfg.cache_dir), cfg.cache_dir)
    ffi = cffi.FFI()
    ffi.cdef("".join(f"int64_t sum_{n}(void);" for n in names) + "int64_t get_pmask(void);")
    lib = ffi.dlopen(str(built.path))
    for n in names:
        assert getattr(lib, f"sum_{n}")() == int(args[n].astype(np.int64).sum()), n
    assert lib.get_pmask() == args["pmask"]


def test_pack_static_rejects_unsupported_values():
    with pytest.raises(CatenError):
        pack_static({"x": np.zeros((2, 2), dtype=np.int32)})
    with pytest.raises(CatenError):
        pack_static({"x": "text"})
