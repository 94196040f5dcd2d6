"""Host actions: typed call sites whose body the host supplies (the compiled model, a user callback).

A workflow action such as the generation loop calls the compiled GPT-2 and a per-token callback.
Those calls are declared as ``@host_action`` functions: the signature is typed like any action (so
type inference checks every call), the Python body is a placeholder. In interpreted mode the call
goes to a Python callable bound with ``bind``; in an exported library the placeholder's C body is
replaced by a call to ``host_<name>(...)``, a C function the export glue defines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from caten_lab.errors import CatenError
from caten_lab.workflow.action import Action


class HostAction(Action):
    """An action implemented by the host (see the module docstring)."""

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
    """Replace the placeholder C bodies of ``hosts`` in rendered ``source`` by calls to ``host_<name>``.

    ``functions`` maps action names to their C names (``RenderedActions.functions``).
    """
    for h in hosts:
        cname = functions.get(h.ir.name)
        if cname is None:
            continue  # not called by this action tree
        m = re.search(rf"^static ([^\n(]*?)\b{re.escape(cname)}\(([^)]*)\) \{{\n", source, re.M)
        if m is None:
            raise CatenError(f"cannot find the C definition of host action {h.ir.name}")
        end = source.find("\n}\n", m.end())
        if end < 0:
            raise CatenError(f"cannot find the end of host action {h.ir.name}")
        ret, params = m.group(1).strip(), m.group(2)
        names = [p.strip().split()[-1].lstrip("*") for p in params.split(",")]
        body = f"static {ret} {cname}({params}) {{\n  return host_{h.ir.name}({', '.join(names)});\n}}\n"
        proto = f"{ret} host_{h.ir.name}({params});\n"
        source = source[: m.start()] + proto + body + source[end + 3 :]
    return source
