"""Where did the user create this op? The first stack frame outside the caten_lab package.

Walking ``sys._getframe`` is a few attribute reads per frame, cheap enough to run for every op
(``inspect.stack`` reads source files and would dominate graph building).
"""

from __future__ import annotations

import os
import sys

from caten_lab.errors import where

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_inside: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    hit = _inside.get(filename)
    if hit is None:
        hit = os.path.abspath(filename).startswith(_PACKAGE_DIR)
        _inside[filename] = hit
    return hit


def user_source() -> str | None:
    """``file:line`` of the innermost caller frame that is not caten_lab code (None if there is none);
    a notebook cell is ``In[n]:line`` (:func:`caten_lab.errors.where`)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not _is_internal(code.co_filename):
            return where(code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return None
