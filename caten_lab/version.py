"""The package version (a bottom-layer module: the root package and the notebook both read it)."""

__version__ = "0.1.0"
