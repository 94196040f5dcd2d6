"""`make demo` installs only the package (no [dev] extras), `make test` the [dev] extras; the project
metadata uses the SPDX license string setuptools asks for (no deprecated ``license`` table)."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dry_run(target: str, tmp_path: Path) -> str:
    """The commands ``make -n TARGET`` would run in a fresh clone (no .venv yet)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    out = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True)
    return out.stdout


def test_make_demo_installs_the_package_without_the_dev_extras(tmp_path):
    cmds = dry_run("demo", tmp_path)
    installs = [line for line in cmds.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs == [".venv/bin/python -m pip install -q -e ."], cmds
    assert "caten_lab.cli demo" in cmds


def test_make_test_installs_the_dev_extras(tmp_path):
    cmds = dry_run("test", tmp_path)
    assert '.venv/bin/python -m pip install -q -e ".[dev]"' in cmds
    assert "pytest" in cmds


def test_license_is_an_spdx_string_with_its_file():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = meta["project"]
    assert project["license"] == "MIT"
    assert all((ROOT / f).is_file() for f in project["license-files"])
    # setuptools >= 77 reads SPDX strings; the flat layout is explicit (no "same name as folder" warning)
    assert any(
        r.startswith("setuptools>=") and int(r.split(">=")[1].split(".")[0]) >= 77
        for r in meta["build-system"]["requires"]
    )
    assert meta["tool"]["setuptools"]["package-dir"] == {"": "."}
