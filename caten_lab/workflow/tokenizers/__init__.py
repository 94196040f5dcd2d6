"""Tokenizers written as actions: GPT-2 byte-level BPE, SentencePiece (BPE and unigram), and the
tokenizers GGUF files describe (byte-level BPE with named pre-tokenizers, SentencePiece-style).

Load-time code (file parsing, table building) is plain Python producing flat NumPy arrays; the
encode/decode bodies are actions that run as Python now and compile to C with the action compiler.
"""

from caten_lab.workflow.tokenizers.bpe import GPT2Tokenizer, build_bpe_tables, gpt2_files
from caten_lab.workflow.tokenizers.gguf_vocab import GGUFTokenizer, tokenizer_from_gguf
from caten_lab.workflow.tokenizers.sentencepiece import SentencePieceTokenizer, build_spm_tables

__all__ = ["GGUFTokenizer", "GPT2Tokenizer", "SentencePieceTokenizer", "build_bpe_tables", "build_spm_tables",
           "gpt2_files", "tokenizer_from_gguf"]
