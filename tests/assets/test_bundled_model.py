"""The bundled tiny GPT-2 (assets/tiny_gpt2) loads through the standard Hugging Face path and has learned
its corpus: held-out loss well below chance and below a unigram oracle, and greedy text made of corpus
words."""

import json
import math
import os
import re
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

ASSETS = Path(__file__).resolve().parents[2] / "assets"
MODEL_DIR = ASSETS / "tiny_gpt2"
HELDOUT = ASSETS / "tiny_gpt2_heldout.txt"
REQUIRED_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt")
EOT = "<|endoftext|>"
MAX_TOTAL_BYTES = 20 * 1024 * 1024


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel.from_pretrained(MODEL_DIR).eval()


@pytest.fixture(scope="module")
def bpe():
    return tokenizers.ByteLevelBPETokenizer(str(MODEL_DIR / "vocab.json"), str(MODEL_DIR / "merges.txt"))


@pytest.fixture(scope="module")
def heldout_text():
    return HELDOUT.read_text(encoding="utf-8")


def test_files_exist_and_fit_the_size_budget():
    for name in REQUIRED_FILES:
        assert (MODEL_DIR / name).is_file(), f"missing {name}: run assets/train_tiny_gpt2.py"
    assert HELDOUT.is_file()
    total = sum(p.stat().st_size for p in MODEL_DIR.rglob("*") if p.is_file())
    assert total <= MAX_TOTAL_BYTES, f"bundled model is {total:,} bytes"


def test_tokenizer_files_use_the_gpt2_format():
    merges = (MODEL_DIR / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert merges[0].startswith("#version")
    assert all(len(line.split(" ")) == 2 for line in merges[1:] if line)
    vocab = json.loads((MODEL_DIR / "vocab.json").read_text(encoding="utf-8"))
    assert EOT in vocab
    assert "Ġthe" in vocab  # byte-level BPE marks a leading space with Ġ, as GPT-2 does


def test_config_matches_the_files():
    config = json.loads((MODEL_DIR / "config.json").read_text(encoding="utf-8"))
    vocab = json.loads((MODEL_DIR / "vocab.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "gpt2"
    assert config["vocab_size"] == len(vocab)
    assert config["bos_token_id"] == config["eos_token_id"] == vocab[EOT]
    assert config["n_embd"] % config["n_head"] == 0
    assert config["n_positions"] >= 128


def test_loads_with_transformers(model):
    config = model.config
    assert isinstance(model, transformers.GPT2LMHeadModel)
    assert model.transformer.wte.weight.shape == (config.vocab_size, config.n_embd)
    assert len(model.transformer.h) == config.n_layer
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # tied, as in GPT-2


def test_transformers_tokenizer_agrees_with_tokenizers(bpe, heldout_text):
    hf = transformers.GPT2Tokenizer.from_pretrained(MODEL_DIR)
    text = heldout_text[:2000]
    ids = bpe.encode(text).ids
    assert hf.encode(text) == ids
    assert bpe.decode(ids) == text
    assert hf.eos_token == EOT


def _heldout_ids(bpe, heldout_text, n_tokens: int):
    return bpe.encode(heldout_text).ids[:n_tokens]


def test_heldout_loss_is_far_below_chance_and_unigram(model, bpe, heldout_text):
    block = 128
    ids = _heldout_ids(bpe, heldout_text, 24 * block + 1)
    windows = torch.tensor([ids[i : i + block + 1] for i in range(0, len(ids) - block, block)])
    with torch.no_grad():
        logits = model(input_ids=windows[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
    targets = windows[:, 1:].reshape(-1).tolist()
    counts = Counter(targets)
    # An oracle unigram model fitted on these very targets: beating it means the model uses context.
    unigram = -sum(c * math.log(c / len(targets)) for c in counts.values()) / len(targets)
    chance = math.log(model.config.vocab_size)
    assert loss.item() < 0.65 * chance, (loss.item(), chance)
    assert loss.item() < unigram - 1.0, (loss.item(), unigram)


def test_greedy_generation_reads_like_the_corpus(model, bpe, heldout_text):
    vocab = json.loads((MODEL_DIR / "vocab.json").read_text(encoding="utf-8"))
    corpus_words = {w.lower() for w in re.findall(r"[A-Za-z']+", heldout_text)}
    corpus_words |= {t.lstrip("Ġ").lower() for t in vocab if re.fullmatch(r"Ġ?[A-Za-z']+", t)}
    prompt = "BRUTUS:\nWhat say you, Cassius"
    ids = torch.tensor([bpe.encode(prompt).ids])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=40, do_sample=False, pad_token_id=model.config.eos_token_id)
    new_ids = out[0, ids.shape[1] :].tolist()
    text = bpe.decode(new_ids)
    words = re.findall(r"[A-Za-z']+", text)
    assert len(new_ids) > 0 and text.strip(), text
    assert len(words) >= 5, text
    known = sum(w.lower() in corpus_words for w in words)
    assert known / len(words) >= 0.8, (text, known, len(words))


def test_caten_lab_loader_reads_the_bundled_model(model):
    gpt2_weights = pytest.importorskip("caten_lab.models.gpt2_weights")
    weights = gpt2_weights.load_hf_dir(MODEL_DIR)
    assert weights.config.vocab_size == model.config.vocab_size
    assert weights.config.n_layer == model.config.n_layer
    state = model.state_dict()
    for name, arr in weights.state_dict.items():
        assert torch.equal(torch.from_numpy(arr), state[name]), name
