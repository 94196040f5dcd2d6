"""caten_lab.nn: modules with PyTorch-style names, a GPT-2 and a Llama that compile once for every length."""

from caten_lab.nn import functional
from caten_lab.nn.attention import CausalSelfAttention
from caten_lab.nn.decoder import CachedDecoder, DecoderGraph
from caten_lab.nn.gpt2 import GPT2, Block, GPT2Config, GPT2Model
from caten_lab.nn.layers import GELU, MLP, Embedding, LayerNorm, Linear, RMSNorm
from caten_lab.nn.llama import Llama, LlamaConfig
from caten_lab.nn.module import Module, ModuleList, buffer_of, parameter, state

__all__ = [
    "functional",
    "CausalSelfAttention",
    "GPT2",
    "Block",
    "CachedDecoder",
    "DecoderGraph",
    "Llama",
    "LlamaConfig",
    "GPT2Config",
    "GPT2Model",
    "GELU",
    "MLP",
    "Embedding",
    "LayerNorm",
    "Linear",
    "RMSNorm",
    "Module",
    "ModuleList",
    "buffer_of",
    "parameter",
    "state",
]
