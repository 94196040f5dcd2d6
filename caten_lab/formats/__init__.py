"""Strict validation of weight files (safetensors, GGUF) and tokenizer files, below the model layer.

The rules (``rules.h``, read by ``rules.py``) are shared with the exported C loader
(``workflow/c/st_loader.c``); every rejection is a :class:`FormatError` naming its rule.
"""

from caten_lab.formats.rules import RULES, FormatError, Rule, VocabError, WeightsError

__all__ = ["RULES", "FormatError", "Rule", "VocabError", "WeightsError"]
