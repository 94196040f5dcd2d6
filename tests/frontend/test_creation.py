"""Creation ops and the seeded counter-based random generator."""

from __future__ import annotations

import numpy as np
import torch

from caten_lab.frontend import (
    Tensor,
    arange,
    dtypes,
    eye,
    from_numpy,
    full,
    manual_seed,
    ones,
    rand,
    randint,
    randn,
    zeros,
    zeros_like,
)
from caten_lab.frontend.random import threefry2x32

from .helpers import close


def test_constants() -> None:
    close(zeros(2, 3).numpy(), np.zeros((2, 3), np.float32))
    close(ones((4,), dtype="int32").numpy(), np.ones(4, np.int32))
    close(full((2, 2), 7).numpy(), np.full((2, 2), 7, np.int64))
    close(full((2,), 1.5, "float16").numpy(), np.full(2, 1.5, np.float16))
    close(full((), True).numpy(), np.array(True))
    close(zeros_like(ones(3)).numpy(), np.zeros(3, np.float32))
    close(eye(3, 4).numpy(), np.eye(3, 4, dtype=np.float32))
    close(zeros(0, 3).numpy(), np.zeros((0, 3), np.float32))


def test_arange_matches_torch() -> None:
    for args in [(5,), (2, 9), (1, 10, 3), (10, 0, -2), (0.0, 1.0, 0.25), (3, 3)]:
        close(arange(*args).numpy(), torch.arange(*args))


def test_from_numpy_dtypes_and_reference() -> None:
    for dt in (np.float32, np.float16, np.int32, np.int64, np.bool_):
        a = np.arange(6).reshape(2, 3).astype(dt)
        t = from_numpy(a)
        assert t.dtype.np == np.dtype(dt)
        close(t.numpy(), a)
    d = np.arange(3, dtype=np.float64)
    assert from_numpy(d).dtype == dtypes.float32  # float64 data is stored as float32
    assert Tensor.from_numpy(np.arange(3)).dtype == dtypes.int64


def _threefry_ref(key: tuple[int, int], c0: int, c1: int) -> tuple[int, int]:
    """Plain-Python Threefry-2x32-20 (Salmon et al. 2011) to check the graph version."""
    m = 0xFFFFFFFF
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (key[0], key[1], 0x1BD11BDA ^ key[0] ^ key[1])
    x0, x1 = (c0 + ks[0]) & m, (c1 + ks[1]) & m
    for r in range(20):
        x0 = (x0 + x1) & m
        x1 = ((x1 << rot[r % 8]) | (x1 >> (32 - rot[r % 8]))) & m
        x1 ^= x0
        if r % 4 == 3:
            s = r // 4 + 1
            x0 = (x0 + ks[s % 3]) & m
            x1 = (x1 + ks[(s + 1) % 3] + s) & m
    return x0, x1


def test_threefry_known_answers() -> None:
    z = Tensor.full((1,), 0, "uint32")
    a, b = threefry2x32((0, 0), z, z)
    assert (int(a.numpy()[0]), int(b.numpy()[0])) == (0x6B200159, 0x99BA4EFE)  # Random123 KAT
    f = Tensor.full((1,), 0xFFFFFFFF, "uint32")
    a, b = threefry2x32((0xFFFFFFFF, 0xFFFFFFFF), f, f)
    assert (int(a.numpy()[0]), int(b.numpy()[0])) == (0x1CB996FC, 0xBB002BE7)
    ctr = np.array([1, 2, 12345, 0xFFFFFFF0], np.uint32)
    a, b = threefry2x32((7, 99), Tensor.from_numpy(ctr), Tensor.full((4,), 3, "uint32"))
    want = [_threefry_ref((7, 99), int(c), 3) for c in ctr]
    assert list(zip(a.numpy().tolist(), b.numpy().tolist())) == want


def test_rand_randn_are_seeded_and_well_distributed() -> None:
    manual_seed(42)
    u1 = rand(64, 64).numpy()
    n1 = randn(10000).numpy()
    manual_seed(42)
    u2 = rand(64, 64).numpy()
    assert np.array_equal(u1, u2)
    assert not np.array_equal(rand(64, 64).numpy(), u1)  # the next call draws new numbers
    assert u1.dtype == np.float32 and u1.min() >= 0 and u1.max() < 1
    assert abs(u1.mean() - 0.5) < 0.02
    assert abs(n1.mean()) < 0.05 and abs(n1.std() - 1) < 0.05
    manual_seed(1)
    r = randint(3, 7, (1000,)).numpy()
    assert r.dtype == np.int64 and r.min() == 3 and r.max() == 6
    assert rand(2, 3, dtype="float16").dtype == dtypes.float16
