"""The notebook workbench: ``%%caten``, the Inspector widget, static reports, the pass debugger,
the miscompile bisector and the generator widget (streams tokens from any generator, e.g. GPT-2). Submodules are imported on first use so that
``import caten_lab`` stays cheap and works without a widget front-end."""

from __future__ import annotations

from typing import Any

_LAZY = {
    "show": ("caten_lab.notebook.static_html", "show"),
    "Inspector": ("caten_lab.notebook.inspector", "Inspector"),
    "inspect": ("caten_lab.notebook.inspector", "Inspector"),
    "PassDebugger": ("caten_lab.notebook.debugger", "PassDebugger"),
    "bisect_miscompile": ("caten_lab.notebook.bisect", "bisect_miscompile"),
    "GeneratorWidget": ("caten_lab.notebook.runner", "GeneratorWidget"),
    "logits_generator": ("caten_lab.notebook.runner", "logits_generator"),
    "load_ipython_extension": ("caten_lab.notebook.magic", "load_ipython_extension"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'caten_lab.notebook' has no attribute {name!r}")
