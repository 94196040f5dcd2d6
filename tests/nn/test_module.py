"""Module naming, state_dict round trips and strict loading errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from caten_lab import nn
from caten_lab.frontend import StateDictError
from caten_lab.frontend.build import build_graph
from caten_lab.frontend.tensor import Tensor


class Net(nn.Module):
    def __init__(self) -> None:
        self.fc = nn.Linear(3, 4)
        self.layers = nn.ModuleList([nn.LayerNorm(4), nn.Linear(4, 2, bias=False)])

    def forward(self, x: Tensor) -> Tensor:
        return self.layers[1](self.layers[0](self.fc(x)))


def test_pytorch_style_names_and_round_trip() -> None:
    net = Net()
    sd = net.state_dict()
    assert list(sd) == ["fc.weight", "fc.bias", "layers.0.weight", "layers.0.bias", "layers.1.weight"]
    assert sd["fc.weight"].shape == (4, 3)
    other = Net().load_state_dict({k: v * 2 for k, v in sd.items()})
    np.testing.assert_array_equal(other.state_dict()["fc.bias"], sd["fc.bias"] * 2)
    x = np.ones((2, 3), np.float32)
    y = other(Tensor.from_numpy(x))
    g, arrays = build_graph([y])
    assert {"fc.weight", "fc.bias", "layers.0.weight", "layers.0.bias", "layers.1.weight"} <= set(arrays)
    assert y.numpy().shape == (2, 2)


def test_strict_loading_errors_name_keys_and_line() -> None:
    net = Net()
    sd = net.state_dict()
    bad = dict(sd)
    del bad["fc.bias"]
    bad["fc.extra"] = np.zeros(1)
    line = sys._getframe().f_lineno + 2
    with pytest.raises(StateDictError) as info:
        net.load_state_dict(bad)
    text = str(info.value)
    assert "missing keys: fc.bias" in text and "unexpected keys: fc.extra" in text
    assert f"{__file__}:{line}" in text
    wrong = dict(sd, **{"layers.1.weight": np.zeros((3, 4), np.float32)})
    with pytest.raises(StateDictError, match=r"'layers.1.weight' has shape \(3, 4\).*expects \(2, 4\)"):
        net.load_state_dict(wrong)
    partial = {"fc.bias": np.ones(4, np.float32)}
    net.load_state_dict(partial, strict=False)
    np.testing.assert_array_equal(net.state_dict()["fc.bias"], np.ones(4, np.float32))
    with pytest.raises(StateDictError, match="fc.weight"):
        net.load_state_dict({**partial, "fc.weight": np.zeros((4, 4))}, strict=False)


def test_parameters_are_lazy_until_needed() -> None:
    net = Net()
    x = Tensor.placeholder((1, 3), "float32", name="x")
    g, arrays = build_graph([net(x)], bind=False)
    assert arrays == {}
    assert {n.attrs.name for n in g.inputs()} >= {"x", "fc.weight"}
