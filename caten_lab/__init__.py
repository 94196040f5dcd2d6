"""caten_lab: a deep-learning compiler you can watch work."""

import os

from caten_lab.errors import CatenError
from caten_lab.version import __version__

# Compiled programs use OpenMP. Its default spin-waiting collapses throughput when the other core is
# busy (a notebook server, a second job): measured here, 100x slower decode. libgomp reads this
# variable when it is first loaded, so it is set before any compiled library is. Users can override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["CatenError", "__version__", "grad", "show"]


def load_ipython_extension(ipython):  # pragma: no cover - exercised by the notebook tests
    """``%load_ext caten_lab``: registers the ``%%caten`` magic (imported lazily)."""
    from caten_lab.notebook.magic import load_ipython_extension as _load

    _load(ipython)


def show(obj, **kwargs):  # pragma: no cover - thin lazy wrapper, tested via caten_lab.notebook
    """Static HTML report of a PassTrace / Program / %%caten result (renders in nbconvert and on GitHub)."""
    from caten_lab.notebook.static_html import show as _show

    return _show(obj, **kwargs)


def grad(outputs, inputs, grad_outputs=None, *, allow_unused=False):
    """The gradients of ``outputs`` with respect to ``inputs`` as lazy Tensors of the same graph
    (:func:`caten_lab.frontend.grad`; imported lazily like :func:`show`)."""
    from caten_lab.frontend.autograd import grad as _grad

    return _grad(outputs, inputs, grad_outputs, allow_unused=allow_unused)
