"""The validator's rule table, read from ``rules.h`` (the one file the exported C loader includes too).

Every error the strict loaders raise is a :class:`FormatError` whose ``rule`` is the name of the rule
the file broke (``"DUPLICATE_KEY"``, ``"NBYTES"``, ...): the C loader reports the same rule's id, and
``tests/workflow/test_loader_agreement.py`` checks that both give the same verdict for every file of
the corpus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from caten_lab.errors import CatenError

_RULE_LINE = re.compile(r'CT_RULE\((\d+), ([A-Z_]+), "([^"]*)"\)')
_DTYPE_LINE = re.compile(r"CT_DTYPE\(([A-Z0-9_]+), (\d+)\)")


@dataclass(frozen=True)
class Rule:
    id: int
    name: str
    description: str


def rules_header() -> str:
    """The text of ``rules.h`` (the C loader includes it verbatim)."""
    return (resources.files("caten_lab.formats") / "rules.h").read_text(encoding="utf-8")


def _parse() -> tuple[dict[str, Rule], dict[str, int]]:
    rules: dict[str, Rule] = {}
    dtypes: dict[str, int] = {}
    for line in rules_header().splitlines():
        if m := _RULE_LINE.fullmatch(line.strip()):
            rule = Rule(int(m[1]), m[2], m[3])
            if rule.name in rules or any(r.id == rule.id for r in rules.values()):
                raise CatenError(f"rules.h: rule {rule.name} ({rule.id}) is defined twice")
            rules[rule.name] = rule
        elif m := _DTYPE_LINE.fullmatch(line.strip()):
            dtypes[m[1]] = int(m[2])
        elif line.startswith("CT_"):
            raise CatenError(f"rules.h: cannot parse {line!r}")
    return rules, dtypes


RULES, DTYPE_SIZES = _parse()
RULE_BY_ID = {r.id: r for r in RULES.values()}


class FormatError(CatenError):
    """A file that breaks one of the validator's rules; ``rule`` names it (a key of ``RULES``), or is
    None for an error that is not about the file's content (a missing file, a missing package)."""

    def __init__(
        self, message: str, *, rule: str | None = None, where: str | None = None, hint: str | None = None
    ) -> None:
        if rule is not None and rule not in RULES:
            raise KeyError(f"unknown validator rule {rule!r}")
        self.rule = rule
        self.reason = message  # the message without the rule tag
        super().__init__(f"{message} [rule {rule}]" if rule else message, where=where, hint=hint)


class WeightsError(FormatError):
    """A weights file or config that cannot be loaded as GPT-2."""


class VocabError(FormatError):
    """A vocabulary or merges file that cannot be loaded."""
