"""caten_lab: a deep-learning compiler you can watch work."""

from caten_lab.errors import CatenError

__version__ = "0.1.0"

__all__ = ["CatenError", "__version__"]


def load_ipython_extension(ipython):  # pragma: no cover - exercised by the notebook tests
    """``%load_ext caten_lab``: registers the ``%%caten`` magic (imported lazily)."""
    from caten_lab.notebook.magic import load_ipython_extension as _load

    _load(ipython)
