"""Run the tokenizer actions compiled to C (through ``Action.compile()``), when the compiler exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from caten_lab.errors import CatenError
from caten_lab.workflow.tokenizers._action import ACTIONS

ENTRY_POINTS = ("gpt2_encode", "tokens_to_bytes", "spm_encode", "spm_decode", "gguf_bpe_encode", "gguf_spm_encode",
                "gguf_decode")


def compiled_available() -> bool:
    """True when the action compiler is importable (the tokenizers can then run natively)."""
    action = ACTIONS.get("gpt2_encode")
    if action is None or not hasattr(action, "compile"):
        return False
    try:
        import caten_lab.workflow.native  # noqa: F401
    except ImportError:
        return False
    return True


def compiled_runner() -> Callable[[str, tuple], Any]:
    """A ``run(name, args)`` that calls the compiled entry point ``name`` (compiled once, cached)."""
    if not compiled_available():
        raise CatenError("compiled tokenizer actions need the action compiler (caten_lab.workflow.native)",
                         hint="use compiled=False (interpreted mode) until the action compiler is installed")
    cache: dict[str, Callable] = {}

    def run(name: str, args: tuple) -> Any:
        fn = cache.get(name)
        if fn is None:
            fn = cache[name] = ACTIONS[name].compile()
        return fn(*args)

    return run
