"""The frontend: a lazy Tensor that records AIR, symbolic dims, and graph building.

from caten_lab.frontend import Tensor, Sym
x = Tensor.from_numpy(np.ones((2, 3), np.float32))
y = (x * 2).sum(axis=1)
y.numpy()  # -> array([6., 6.], dtype=float32)
"""

from caten_lab.air.dtypes import DType, dtypes
from caten_lab.air.shapes import broadcast_shapes
from caten_lab.air.symbolic import Sym
from caten_lab.errors import CatenError, ShapeError, SymbolError
from caten_lab.frontend import autograd as _autograd
from caten_lab.frontend import creation as _creation
from caten_lab.frontend import random as _random
from caten_lab.frontend.autograd import grad
from caten_lab.frontend.build import build_graph, trace
from caten_lab.frontend.creation import (
    arange,
    cat,
    eye,
    from_numpy,
    full,
    full_like,
    index,
    maximum,
    minimum,
    ones,
    ones_like,
    placeholder,
    stack,
    tensor,
    where,
    zeros,
    zeros_like,
)
from caten_lab.frontend.errors import AxisError, DTypeError, SliceError, StateDictError
from caten_lab.frontend.lazy import no_grad, set_grad_enabled
from caten_lab.frontend.random import manual_seed, rand, randint, randn
from caten_lab.frontend.realize import execute
from caten_lab.frontend.tensor import Tensor

for _name in (
    "zeros",
    "ones",
    "zeros_like",
    "ones_like",
    "full_like",
    "arange",
    "eye",
    "cat",
    "stack",
    "index",
):
    setattr(Tensor, _name, staticmethod(getattr(_creation, _name)))
for _name in ("rand", "randn", "randint", "manual_seed"):
    setattr(Tensor, _name, staticmethod(getattr(_random, _name)))
# autodiff (autograd.py builds on Tensor, so it is attached here rather than imported by tensor.py)
Tensor.backward = _autograd.backward  # type: ignore[attr-defined]
Tensor.detach = _autograd.detach  # type: ignore[attr-defined]
Tensor.requires_grad_ = _autograd.requires_grad_  # type: ignore[attr-defined]
Tensor.grad = property(_autograd.leaf_grad)  # type: ignore[attr-defined]
Tensor.requires_grad = property(_autograd.requires_grad)  # type: ignore[attr-defined]

__all__ = [
    "Tensor",
    "Sym",
    "DType",
    "dtypes",
    "build_graph",
    "grad",
    "no_grad",
    "set_grad_enabled",
    "trace",
    "execute",
    "broadcast_shapes",
    "arange",
    "cat",
    "eye",
    "from_numpy",
    "full",
    "full_like",
    "index",
    "maximum",
    "minimum",
    "ones",
    "ones_like",
    "placeholder",
    "stack",
    "tensor",
    "where",
    "zeros",
    "zeros_like",
    "manual_seed",
    "rand",
    "randint",
    "randn",
    "CatenError",
    "ShapeError",
    "SymbolError",
    "AxisError",
    "DTypeError",
    "SliceError",
    "StateDictError",
]
