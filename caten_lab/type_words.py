"""How error messages name the type of a value a user passed: ``None``, ``an int``, ``a NumPy array``.

Messages used to say ``is a NoneType`` or ``got a int`` (``type(v).__name__`` after a fixed "a").
:func:`a_type` gives the article and a readable name; :func:`type_word` the name alone.
"""

from __future__ import annotations

__all__ = ["a_type", "type_word"]

# readable names for builtin and NumPy types whose class name reads badly in a sentence
_WORDS = {
    "NoneType": "None",
    "ndarray": "NumPy array",
    "str": "string",
    "bytes": "bytes object",
    "dict": "dict",
    "function": "function",
    "builtin_function_or_method": "built-in function",
    "method": "method",
    "module": "module",
}
# names that start with a vowel letter but not a vowel sound ("a uint8", "a unicode ...", "a one-...")
_CONSONANT_SOUND = ("uint", "uni", "use", "usu", "one", "eu")


def type_word(value: object) -> str:
    """The readable type name of ``value``: ``None``, ``int``, ``NumPy array``, ``Tensor``..."""
    name = type(value).__name__
    if name in _WORDS:
        return _WORDS[name]
    module = type(value).__module__ or ""
    if module == "numpy" or module.startswith("numpy."):
        return f"NumPy {name}"  # a NumPy scalar: "NumPy float32", "NumPy int64"
    return name


def a_type(value: object) -> str:
    """``type_word(value)`` with its article: ``None``, ``an int``, ``a float``, ``a NumPy array``."""
    word = type_word(value)
    if value is None:
        return word
    lower = word.lower()
    vowel = lower[:1] in ("a", "e", "i", "o", "u") and not lower.startswith(_CONSONANT_SOUND)
    return f"{'an' if vowel else 'a'} {word}"
