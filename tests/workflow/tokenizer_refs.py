"""Shared reference tokenizers for the tokenizer tests (built offline from local files)."""

from __future__ import annotations

import os
from functools import cache

from caten_lab.workflow.tokenizers import GPT2Tokenizer, gpt2_files


def slow_scale() -> float:
    return float(os.environ.get("CATEN_SLOW_SCALE", "0.02"))


@cache
def tiktoken_gpt2():
    import tiktoken
    import tiktoken.load
    import tiktoken_ext.openai_public as public

    enc_path, bpe_path = gpt2_files()
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(str(bpe_path), str(enc_path))
    return tiktoken.Encoding("gpt2-local", pat_str=public.r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


@cache
def hf_gpt2():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    enc_path, bpe_path = gpt2_files()
    tok = Tokenizer(models.BPE.from_file(str(enc_path), str(bpe_path)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


@cache
def ours_gpt2(semantics: str = "ranks") -> GPT2Tokenizer:
    return GPT2Tokenizer.gpt2(semantics=semantics)
