"""Movement ops, view folding, slicing, cat/split/pad, gather and slice assignment, against NumPy/torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caten_lab.frontend import Tensor, build_graph, cat, stack

from .helpers import T, arr, close, tt


def _views(t: Tensor) -> list:
    g, _ = build_graph([t])
    return [n for n in g.nodes if n.op == "view"]


def test_reshape_permute_transpose_expand() -> None:
    a = arr(2, 3, 4)
    close(T(a).reshape(6, 4).numpy(), a.reshape(6, 4))
    close(T(a).reshape(-1).numpy(), a.reshape(-1))
    close(T(a).reshape(4, -1, 2).numpy(), a.reshape(4, -1, 2))
    close(T(a).view(3, 8).numpy(), a.reshape(3, 8))
    close(T(a).permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    close(T(a).transpose(0, -1).numpy(), a.swapaxes(0, -1))
    close(T(a).T.numpy(), a.T)
    close(T(a).movedim(0, 2).numpy(), np.moveaxis(a, 0, 2))
    b = arr(3, 1)
    close(T(b).expand(2, 3, 5).numpy(), np.broadcast_to(b, (2, 3, 5)))
    close(T(b).expand(-1, 4).numpy(), np.broadcast_to(b, (3, 4)))
    close(T(a).unsqueeze(1).numpy(), a[:, None])
    close(T(a).unsqueeze(-1).numpy(), a[..., None])
    close(T(a[:, :1]).squeeze(1).numpy(), a[:, 0])
    close(T(a[:1, :, :1]).squeeze().numpy(), a[0, :, 0])
    close(T(a).flatten(1).numpy(), a.reshape(2, 12))
    close(T(a).flatten().numpy(), a.reshape(-1))


def test_chained_views_fold_into_one_view_on_the_base() -> None:
    a = arr(4, 6, 8)
    x = T(a).permute(2, 0, 1)[1:7:2, ::-1].reshape(3, 4, 3, 2)[:, 1:, :, 0].unsqueeze(0).expand(2, 3, 3, 3)
    want = np.broadcast_to(
        a.transpose(2, 0, 1)[1:7:2, ::-1].reshape(3, 4, 3, 2)[:, 1:, :, 0][None], (2, 3, 3, 3)
    )
    close(x.numpy(), want)
    g, _ = build_graph([x])
    views = [n for n in g.nodes if n.op == "view"]
    assert len(views) == 1
    assert g.producer_of(views[0].reads[0]).op == "allocate"


def test_reshape_that_cannot_be_a_view_copies_once() -> None:
    a = arr(3, 4)
    x = T(a).T.reshape(12)  # transposed -> flat: not a single view
    close(x.numpy(), a.T.reshape(12))
    views = _views(x)
    assert len(views) == 2  # the transpose, materialized; then a reshape of that contiguous value
    y = T(a).T.contiguous().reshape(2, 6)
    close(y.numpy(), a.T.reshape(2, 6))
    close(T(a)[:, 1:3].reshape(6).numpy(), a[:, 1:3].reshape(6))
    close(
        T(a)[:, None, :].expand(3, 2, 4).reshape(6, 4).numpy(),
        np.broadcast_to(a[:, None], (3, 2, 4)).reshape(6, 4),
    )


def test_reshape_keeps_view_when_possible() -> None:
    a = arr(2, 3, 4, 5)
    x = T(a).permute(1, 0, 2, 3).reshape(3, 2, 20)  # merging the contiguous trailing axes is a view
    close(x.numpy(), a.transpose(1, 0, 2, 3).reshape(3, 2, 20))
    assert len(_views(x)) == 1


INDICES = [
    (1,),
    (-1,),
    (slice(None, None, 2),),
    (slice(None, None, -1),),
    (slice(-3, None),),
    (slice(1, -1, 2), 2),
    (Ellipsis, 1),
    (None, 0, Ellipsis, None),
    (slice(5, 2),),
    (slice(None, None, -2), slice(3, 0, -1), -2),
    (0, 0, 0),
    (slice(10, 20),),
    (Ellipsis,),
    (slice(-100, 100, 3),),
]


@pytest.mark.parametrize("idx", INDICES, ids=str)
def test_getitem_matches_numpy(idx: tuple) -> None:
    a = arr(5, 4, 3)
    close(T(a)[idx].numpy(), a[idx])


def test_getitem_on_views_and_pads() -> None:
    a = arr(4, 5)
    x = T(a).pad((1, 2, 2, 0))  # pads the last axis by (1, 2), the first by (2, 0)
    p = np.pad(a, ((2, 0), (1, 2)))
    close(x.numpy(), p)
    for idx in [
        (slice(1, 5),),
        (slice(None, None, -1), slice(None, None, 2)),
        (slice(None, None, 3), -1),
        (1, slice(None, None, -3)),
    ]:
        close(x[idx].numpy(), p[idx])
    close(x.T[::2].numpy(), p.T[::2])
    close(x.reshape(6, 8)[1:].numpy(), p.reshape(6, 8)[1:])


def test_pad_value_and_negative_crop() -> None:
    a = arr(3, 4)
    close(T(a).pad((1, 1), value=7.0).numpy(), torch.nn.functional.pad(tt(a), (1, 1), value=7.0))
    close(T(a).pad((-1, 2, 0, -1)).numpy(), torch.nn.functional.pad(tt(a), (-1, 2, 0, -1)))
    i = arr(2, 2, dtype="int32")
    close(T(i).pad((0, 1), value=5).numpy(), torch.nn.functional.pad(tt(i), (0, 1), value=5))


def test_flip() -> None:
    a = arr(3, 4)
    close(T(a).flip(0).numpy(), np.flip(a, 0))
    close(T(a).flip((0, 1)).numpy(), np.flip(a, (0, 1)))


def test_cat_split_chunk_stack() -> None:
    a, b, c = arr(2, 3), arr(4, 3), arr(0, 3)
    close(cat([T(a), T(b), T(c)], 0).numpy(), np.concatenate([a, b, c], 0))
    close(cat([T(a).T, T(b).T], -1).numpy(), np.concatenate([a.T, b.T], -1))
    close(Tensor.cat([T(a), T(a.astype(np.int32))], 1).numpy(), torch.cat([tt(a), tt(a.astype(np.int32))], 1))
    close(cat([T(a) > 0, T(b) > 0]).numpy(), np.concatenate([a > 0, b > 0]))
    close(stack([T(a), T(a) * 2], 1).numpy(), np.stack([a, a * 2], 1))
    x = arr(7, 4)
    for got, want in zip(T(x).split(3), torch.split(tt(x), 3)):
        close(got.numpy(), want)
    for got, want in zip(T(x).split([2, 5]), torch.split(tt(x), [2, 5])):
        close(got.numpy(), want)
    for got, want in zip(T(x).chunk(3, 1), torch.chunk(tt(x), 3, 1)):
        close(got.numpy(), want)
    assert len(T(x).chunk(3)) == len(torch.chunk(tt(x), 3))


@pytest.mark.parametrize("k", [-1, 0, 2])
def test_triu_tril(k: int) -> None:
    a = arr(2, 4, 5)
    close(T(a).triu(k).numpy(), torch.triu(tt(a), k))
    close(T(a).tril(k).numpy(), torch.tril(tt(a), k))


def test_gather() -> None:
    a = arr(3, 5)
    idx = np.array([[0, 4], [2, 2], [1, 0]], np.int64)
    close(T(a).gather(1, T(idx)).numpy(), torch.gather(tt(a), 1, tt(idx)))
    idx0 = np.array([[2, 0, 1, 1, 0]], np.int64)
    close(T(a).gather(0, T(idx0)).numpy(), torch.gather(tt(a), 0, tt(idx0)))


def test_noncontiguous_views_in_elementwise_and_reduce() -> None:
    a = arr(4, 6)
    x = T(a)[::-1, 1::2] * T(a).T[1::2, ::-1].T + 1
    close(x.numpy(), a[::-1, 1::2] * a.T[1::2, ::-1].T + 1)
    close(T(a)[:, ::2].sum(0).numpy(), a[:, ::2].sum(0), atol=1e-5)


def test_setitem_writes_into_the_bound_array() -> None:
    buf = np.zeros((2, 3, 6), np.float32)
    cache = Tensor.from_numpy(buf)
    k = arr(2, 3, 2)
    cache[:, :, 1:3] = T(k)
    cache[:, :, 4] = 9.0
    cache[0, :, ::5] = T(np.ones((1,), np.float32))
    want = np.zeros((2, 3, 6), np.float32)
    want[:, :, 1:3] = k
    want[:, :, 4] = 9.0
    want[0, :, ::5] = 1.0
    got = cache.numpy()
    close(got, want)
    close(buf, want)  # in place: the caller's array received the update
    assert cache.node.op == "allocate"  # committed: the tensor reads its buffer again
    cache[1, 0, :] = cache[0, 0, :] * 2  # the source reads the (updated) buffer itself
    cache.numpy()
    want[1, 0, :] = want[0, 0, :] * 2
    close(buf, want)


def test_setitem_is_seen_by_later_reads_and_committed_by_them() -> None:
    buf = np.zeros((4,), np.float32)
    x = Tensor.from_numpy(buf)
    x[1:3] = 5.0
    y = x.sum()  # reads the assigned value
    close(y.numpy(), np.float32(10.0))
    close(buf, np.array([0, 5, 5, 0], np.float32))


def test_setitem_on_computed_tensor_and_dtype_cast() -> None:
    a = arr(3, 3)
    x = T(a) + 1
    x[1] = T(np.array([1, 2, 3], np.int32))
    want = a + 1
    want[1] = [1, 2, 3]
    close(x.numpy(), want)


def test_integer_tensor_index_takes_rows() -> None:
    w = arr(6, 3, 2)
    ids = np.array([[5, 0], [2, 2]], np.int64)
    close(T(w)[T(ids)].numpy(), w[ids])
    close(T(w[:, 0, 0])[T(ids.astype(np.int32))].numpy(), w[:, 0, 0][ids])
    i = arr(4, dtype="int32")
    close(T(i)[T(np.array([3, 1]))].numpy(), i[[3, 1]])
