"""caten_lab: a deep-learning compiler you can watch work."""

from caten_lab.errors import CatenError

__version__ = "0.1.0"

__all__ = ["CatenError", "__version__"]


def load_ipython_extension(ipython):  # pragma: no cover - exercised by the notebook tests
    """``%load_ext caten_lab``: registers the ``%%caten`` magic (imported lazily)."""
    from caten_lab.notebook.magic import load_ipython_extension as _load

    _load(ipython)


def show(obj, **kwargs):  # pragma: no cover - thin lazy wrapper, tested via caten_lab.notebook
    """Static HTML report of a PassTrace / Program / %%caten result (renders in nbconvert and on GitHub)."""
    from caten_lab.notebook.static_html import show as _show

    return _show(obj, **kwargs)
