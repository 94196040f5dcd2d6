"""Host actions: typed call sites whose body the host supplies (the compiled model, a user callback).

A workflow action such as the generation loop calls the compiled GPT-2 and a per-token callback.
Those calls are declared as ``@host_action`` functions: the signature is typed like any action (so
type inference checks every call), the Python body is a placeholder. In interpreted mode the call
goes to a Python callable bound with ``set_host``; in C (``workflow/to_kir.py``) a host action's
function body is a call of ``host_<name>(...)`` with the same parameters, a C function the export
glue defines (its prototype comes from the kernel-IR function, not from the generated C text).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from caten_lab.errors import CatenError
from caten_lab.workflow.action import Action


class HostAction(Action):
    """An action implemented by the host (see the module docstring)."""

    host_linked = True  # its C body calls host_<name>: only an export (which defines that) can link it

    def __init__(self, fn: Callable) -> None:
        super().__init__(fn)
        self.host: Callable[..., Any] | None = None

    def set_host(self, impl: Callable[..., Any] | None) -> None:
        """The Python implementation used in interpreted mode (None to unbind)."""
        self.host = impl

    def __call__(self, *args: Any) -> Any:
        if self.host is None:
            raise CatenError(
                f"host action {self.ir.name} has no implementation bound",
                hint=f"call {self.ir.name}.set_host(python_function) before running interpreted",
            )
        super().bind(args)
        return self.host(*args)

    def compile(self, **options: Any) -> Callable[..., Any]:
        raise CatenError(
            f"host action {self.ir.name} has no C body of its own",
            hint="it is linked by export(); run the calling action interpreted or export it",
        )


def host_action(fn: Callable) -> HostAction:
    """Decorator: declare a host-implemented action (its body is only a placeholder)."""
    return HostAction(fn)


def link_host_calls(source: str, functions: dict[str, str], hosts: list[HostAction]) -> str:
    """The rendered ``source`` with the bodies of ``hosts`` calling ``host_<name>``: ``render_c`` lowers
    every host action that way already, so this only checks that each of ``hosts`` is a host action.

    ``functions`` maps action names to their C names (``RenderedActions.functions``).
    """
    for h in hosts:
        if not getattr(h, "host_linked", False):
            raise CatenError(f"{h!r} is not a host action", hint="declare it with @host_action")
    _ = functions
    return source
