"""Generated C -> one HTML string per source line (Pygments token classes), for the Inspector's C pane.

Per-line output lets the front-end colour each line by the kernel it belongs to and link it to
the AIR nodes recorded in the source map. Multi-line tokens (block comments) are split at newlines.
"""

from __future__ import annotations

import html


def c_lines_html(source: str) -> list[str]:
    """HTML-escaped, token-classed lines of ``source`` (plain escaped lines if Pygments is absent)."""
    n_lines = max(
        1, len(source.splitlines())
    )  # a trailing newline does not start a line (as in the source map)
    try:
        from pygments.lexers import CLexer
        from pygments.token import STANDARD_TYPES
    except ImportError:  # pragma: no cover - pygments ships with IPython
        return [html.escape(line) for line in source.splitlines()] or [""]
    lines: list[list[str]] = [[]]
    for ttype, value in CLexer(stripnl=False, ensurenl=False).get_tokens(source):
        cls = ""
        t = ttype
        while t is not None and not cls:
            cls = STANDARD_TYPES.get(t, "")
            t = t.parent
        parts = value.split("\n")
        for i, part in enumerate(parts):
            if i:
                lines.append([])
            if part:
                text = html.escape(part)
                lines[-1].append(f'<span class="{cls}">{text}</span>' if cls else text)
    out = ["".join(parts) for parts in lines]
    out = out[:n_lines] + [""] * (n_lines - len(out))
    return out
