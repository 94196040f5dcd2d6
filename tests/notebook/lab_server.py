"""Helpers for the real-browser test: find (or install) Debian's chromium, start JupyterLab on
127.0.0.1 with a token in a scratch directory, and stop it again."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def find_chromium(install: bool = True) -> tuple[str | None, str]:
    """(path, reason). Installs chromium with apt-get when missing and we are root (as `make test` does)."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path, ""
    if not install:
        return None, "chromium is not installed"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, "chromium is not installed and cannot be installed here (not root, or no apt-get)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(
            ["apt-get", "install", "-y", "chromium"], env=env, capture_output=True, timeout=600, check=True
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"chromium is not installed and `apt-get install chromium` failed: {exc}"
    path = shutil.which("chromium")
    return (path, "") if path else (None, "apt-get install chromium did not provide a chromium binary")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyter_lab(root_dir: Path, token: str = "catentest") -> Iterator[str]:
    """Run ``jupyter lab`` serving ``root_dir``; yields the base URL. The kernel imports caten_lab from this repo."""
    port = free_port()
    settings = root_dir / ".lab-settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True, exist_ok=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}'
    )
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        JUPYTER_CONFIG_DIR=str(root_dir / ".jupyter"),
        OMP_NUM_THREADS="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root_dir}",
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={root_dir / '.workspaces'}",
    ]
    log = open(root_dir / "lab.log", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root_dir)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {(root_dir / 'lab.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("jupyter lab did not start within 90 s")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
