"""Random chains of movement ops against NumPy (hypothesis): the view tracker must compose exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from caten_lab.frontend import Tensor


def _factorizations(n: int) -> list[tuple[int, ...]]:
    out = [(n,)]
    for a in range(2, n):
        if n % a == 0:
            out.append((a, n // a))
            for b in range(2, n // a):
                if (n // a) % b == 0:
                    out.append((a, b, n // a // b))
    return out


@st.composite
def chains(draw: st.DrawFn) -> list[tuple]:
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["reshape", "permute", "slice", "pad", "expand", "flip"]),
                st.integers(0, 10**6),
            ),
            min_size=1,
            max_size=6,
        )
    )


def _apply(x, np_x: np.ndarray, op: str, r: int):  # noqa: ANN001, ANN202
    rng = np.random.default_rng(r)
    shape = np_x.shape
    if op == "reshape" and np_x.size:
        new = _factorizations(np_x.size)[rng.integers(len(_factorizations(np_x.size)))]
        return x.reshape(*new), np_x.reshape(new)
    if op == "permute" and np_x.ndim:
        order = tuple(rng.permutation(np_x.ndim).tolist())
        return x.permute(*order), np_x.transpose(order)
    if op == "slice" and np_x.ndim:
        idx = []
        for n in shape:
            a, b = sorted(rng.integers(-n - 1, n + 2, 2).tolist())
            step = int(rng.choice([1, 2, 3, -1, -2]))
            idx.append(slice(a, b, step) if step > 0 else slice(b, a, step))
        return x[tuple(idx)], np_x[tuple(idx)]
    if op == "pad" and np_x.ndim:
        pads = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in shape]
        flat = [v for p in reversed(pads) for v in p]
        return x.pad(flat), np.pad(np_x, pads)
    if op == "expand" and np_x.ndim:
        axis = int(rng.integers(np_x.ndim))
        x2, n2 = x.unsqueeze(axis), np.expand_dims(np_x, axis)
        new = list(n2.shape)
        new[axis] = int(rng.integers(1, 4))
        return x2.expand(*new), np.broadcast_to(n2, new)
    if op == "flip" and np_x.ndim:
        axis = int(rng.integers(np_x.ndim))
        return x.flip(axis), np.flip(np_x, axis)
    return x, np_x


@settings(max_examples=150, deadline=None)
@given(chains(), st.sampled_from([(4, 6), (2, 3, 4), (12,), (1, 5, 2)]))
def test_movement_chains_match_numpy(chain: list[tuple], shape: tuple) -> None:
    base = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape)
    x, ref = Tensor.from_numpy(base), base
    for op, r in chain:
        x, ref = _apply(x, ref, op, r)
        if ref.size > 4000:
            break
    got = (x + 0).numpy()
    np.testing.assert_array_equal(got, np.ascontiguousarray(ref))
