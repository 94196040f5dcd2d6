import os
from pathlib import Path

import pytest

from caten_lab.config import config

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SMOLLM2_ENV = "CATEN_SMOLLM2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF: ``$CATEN_SMOLLM2``, else the fetched copy in the cache dir.

    A path named by the variable that is not a file fails the test (a broken setup, not a missing model).
    """
    env = os.environ.get(SMOLLM2_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            pytest.fail(f"{SMOLLM2_ENV}={env} is not a file (point it at {SMOLLM2_FILE})")
        return path
    path = config().cache_dir / "models" / SMOLLM2_FILE
    if not path.is_file():
        pytest.skip(
            f"SmolLM2 not fetched ({path} missing): run `caten-lab models fetch smollm2` "
            f"or set {SMOLLM2_ENV}=/path/to/{SMOLLM2_FILE}"
        )
    return path


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
