"""Varied test/benchmark text built from local sources only (no downloads).

Mixes Python standard-library sources, the Debian license texts, and generated text in many
scripts: letters, digits of several number systems, emoji, combining marks, unusual whitespace,
contractions and long whitespace/punctuation runs — the cases where tokenizers tend to disagree.
"""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

# (first, last) code point ranges sampled for generated "words"
SCRIPTS = {
    "latin": (0x41, 0x7A), "latin1": (0xC0, 0xFF), "latin_ext": (0x100, 0x24F), "greek": (0x391, 0x3C9),
    "cyrillic": (0x410, 0x44F), "armenian": (0x531, 0x556), "hebrew": (0x5D0, 0x5EA),
    "arabic": (0x621, 0x64A), "devanagari": (0x905, 0x939), "bengali": (0x985, 0x9B9), "thai": (0xE01, 0xE30),
    "georgian": (0x10D0, 0x10FA),
    "hangul": (0xAC00, 0xD7A3), "hiragana": (0x3041, 0x3096), "katakana": (0x30A1, 0x30FA),
    "cjk": (0x4E00, 0x9FFF), "cjk_ext_b": (0x20000, 0x2A6DF), "ethiopic": (0x1200, 0x1248),
}
DIGITS = [(0x30, 0x39), (0x660, 0x669), (0x966, 0x96F), (0xFF10, 0xFF19), (0x2160, 0x2188), (0xBC, 0xBE)]
SYMBOLS = [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E), (0x2010, 0x2027), (0x2200, 0x22FF),
           (0x2190, 0x21FF), (0x300, 0x36F)]
EMOJI = [(0x1F600, 0x1F64F), (0x1F300, 0x1F5FF), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF), (0x2600, 0x26FF)]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\x0b", "\x0c", "\x85",
          "\u2028", " \n ", "\n    ", "\t\t", "        "]
CONTRACTIONS = ["I'm", "don't", "we'll", "they've", "she'd", "it's", "you're", "O'Neil", "rock'n'roll",
                "'tis", "CAN'T", "WE'LL", "'S", "''", "'''", "' s", "x'y"]
EMOJI_SEQUENCES = ["\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F44D\U0001F3FD",
                   "\U0001F1EF\U0001F1F5", "\u2764\uFE0F", "e\u0301", "\U0001F9D1\u200D\U0001F4BB"]


def _rand_from(rng: random.Random, ranges: list[tuple[int, int]] | tuple[int, int], n: int) -> str:
    if isinstance(ranges, tuple):
        ranges = [ranges]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def generated_text(size: int, seed: int = 0) -> str:
    """``size`` characters of random multilingual text with the tricky cases mixed in."""
    rng = random.Random(seed)
    scripts = list(SCRIPTS.values())
    parts: list[str] = []
    total = 0
    while total < size:
        r = rng.random()
        if r < 0.45:
            piece = _rand_from(rng, rng.choice(scripts), rng.randint(1, 9))
        elif r < 0.55:
            piece = _rand_from(rng, DIGITS, rng.randint(1, 7))
        elif r < 0.63:
            piece = _rand_from(rng, SYMBOLS, rng.randint(1, 4))
        elif r < 0.70:
            piece = _rand_from(rng, EMOJI, rng.randint(1, 3))
        elif r < 0.76:
            piece = rng.choice(CONTRACTIONS)
        elif r < 0.80:
            piece = rng.choice(EMOJI_SEQUENCES)
        elif r < 0.82:
            piece = " " * rng.randint(4, 80) + rng.choice(["", "\n", "x"])
        else:
            piece = rng.choice(SPACES)
        parts.append(piece)
        total += len(piece)
        if rng.random() < 0.5:
            parts.append(" ")
            total += 1
    return "".join(parts)[:size]


def _local_files() -> list[Path]:
    files = sorted(Path("/usr/share/common-licenses").glob("*"))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files += sorted(stdlib.glob("*.py"))
    return [f for f in files if f.is_file()]


def local_text(size: int, seed: int = 0) -> str:
    """About ``size`` characters taken from license texts and stdlib sources (random slices)."""
    rng = random.Random(seed)
    files = _local_files()
    parts: list[str] = []
    total = 0
    while total < size and files:
        f = rng.choice(files)
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not text:
            continue
        start = rng.randrange(len(text))
        chunk = text[start : start + rng.randint(200, 4000)]
        parts.append(chunk)
        total += len(chunk)
    return "".join(parts)[:size]


def varied_text(size: int, seed: int = 0) -> str:
    """Half local prose/code, half generated multilingual text, interleaved in chunks."""
    rng = random.Random(seed)
    local = local_text(size // 2 + 1, seed)
    gen = generated_text(size // 2 + 1, seed + 1)
    parts = []
    i = j = 0
    while i < len(local) or j < len(gen):
        a = rng.randint(100, 2000)
        parts.append(local[i : i + a])
        i += a
        b = rng.randint(100, 2000)
        parts.append(gen[j : j + b])
        j += b
    return "".join(parts)[:size]


def all_code_points_text(seed: int = 0) -> str:
    """Every code point except surrogates, in shuffled runs with spaces, digits and letters between."""
    rng = random.Random(seed)
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    rng.shuffle(cps)
    parts = []
    i = 0
    while i < len(cps):
        n = rng.randint(1, 6)
        parts.append("".join(map(chr, cps[i : i + n])))
        parts.append(rng.choice([" ", "a", "1", " a", "'s", "\n", "", " 1", "  "]))
        i += n
    return "".join(parts)
