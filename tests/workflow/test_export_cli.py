"""``caten-lab export DIR``: the subcommand writes a working library, header and command."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from caten_lab.cli import main

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny_gpt2"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def test_export_subcommand_generate_with_custom_name(tmp_path, capsys) -> None:
    out = tmp_path / "lib"
    assert main(["export", str(out), "--model", str(MODEL), "--name", "shakes", "--n-ctx", "128"]) == 0
    printed = capsys.readouterr().out
    assert "libshakes.so" in printed and "try:" in printed
    header = (out / "shakes.h").read_text()
    assert "shakes_ctx *shakes_init(" in header and "SHAKES_ERR_FORMAT" in header
    r = subprocess.run(
        [str(out / "shakes"), "--weights", str(MODEL), "--prompt", "a " * 130, "--tokens", "3"],
        capture_output=True,
        text=True,
        env={},
    )
    assert r.returncode == 2 and "the context holds 128" in r.stderr
    r = subprocess.run(
        [str(out / "shakes"), "--weights", str(MODEL), "--tokens", "5", "--ids"],
        capture_output=True,
        text=True,
        env={},
    )
    assert r.returncode == 0 and len(r.stdout.split()) == 5


def test_export_subcommand_perplexity(tmp_path) -> None:
    out = tmp_path / "ppl"
    assert main(["export", str(out), "--workflow", "perplexity", "--n-ctx", "32"]) == 0
    text = tmp_path / "t.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 10)
    r = subprocess.run(
        [str(out / "gpt2ppl"), "--weights", str(MODEL), "--text", str(text)],
        capture_output=True,
        text=True,
        env={},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("perplexity ")


def test_export_subcommand_reports_bad_model_dir(tmp_path, capsys) -> None:
    assert main(["export", str(tmp_path / "x"), "--model", str(tmp_path)]) == 2
    assert "not found" in capsys.readouterr().err


def test_export_subcommand_weight_format(tmp_path, capsys) -> None:
    """--weight-format int8: the header says so and the command generates from the HF directory."""
    out = tmp_path / "q"
    assert main(["export", str(out), "--model", str(MODEL), "--n-ctx", "64", "--weight-format", "int8"]) == 0
    assert "(int8 weights)" in capsys.readouterr().out
    assert '#define GPT2_WEIGHT_FORMAT "int8"' in (out / "gpt2.h").read_text()
    r = subprocess.run(
        [str(out / "gpt2"), "--weights", str(MODEL), "--tokens", "5", "--ids"],
        capture_output=True,
        text=True,
        env={},
    )
    assert r.returncode == 0 and len(r.stdout.split()) == 5, r.stderr


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["demo", "--tokens", "abc"], "argument --tokens: expected a non-negative integer, got 'abc'"),
        (["demo", "--tokens", "-4"], "argument --tokens: expected a non-negative integer, got '-4'"),
        (["demo", "--top-k", "2.5"], "argument --top-k: expected a non-negative integer, got '2.5'"),
        (["demo", "--seed", "abc"], "argument --seed: expected a non-negative integer, got 'abc'"),
        (["demo", "--seed", str(2**64)], f"argument --seed: expected an integer in 0..{2**64 - 1}"),
        (["demo", "--temperature", "nan"], "argument --temperature: expected a finite number, got 'nan'"),
        (["demo", "--temperature", "warm"], "argument --temperature: expected a finite number, got 'warm'"),
        (["export", "x", "--n-ctx", "-1"], "argument --n-ctx: expected a non-negative integer, got '-1'"),
    ],
)
def test_caten_lab_numbers_are_parsed_strictly(capsys, args: list[str], msg: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert msg in capsys.readouterr().err
