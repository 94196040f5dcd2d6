"""Error messages name a value's type in English: ``None``, ``an int``, ``a NumPy array``."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.errors import CatenError
from caten_lab.token_ids import check_token_ids
from caten_lab.type_words import a_type, type_word


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "None"),
        (3, "an int"),
        (2.5, "a float"),
        (True, "a bool"),
        ("x", "a string"),
        (b"x", "a bytes object"),
        ([1], "a list"),
        ((1,), "a tuple"),
        ({"a": 1}, "a dict"),
        (np.zeros(2), "a NumPy array"),
        (np.float32(1), "a NumPy float32"),
        (np.uint8(1), "a NumPy uint8"),
        (object(), "an object"),
        (len, "a built-in function"),
    ],
)
def test_a_type_reads_as_english(value, expected):
    assert a_type(value) == expected


def test_article_follows_the_sound_not_the_letter():
    class Expr: ...

    class UInt8Box: ...

    class Tensor: ...

    assert a_type(Expr()) == "an Expr"
    assert a_type(UInt8Box()) == "a UInt8Box"
    assert a_type(Tensor()) == "a Tensor"
    assert type_word(None) == "None"


@pytest.mark.parametrize(("ids", "word"), [(None, "got None"), (7, "got an int"), ("12", "got a string")])
def test_messages_use_it(ids, word):
    with pytest.raises(CatenError) as e:
        check_token_ids(ids, 10, "prompt")
    msg = str(e.value)
    assert word in msg
    assert "NoneType" not in msg and "a int" not in msg and "a str," not in msg
