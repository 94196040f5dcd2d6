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
        # kernels on Unix-domain sockets: TCP ports picked free can be taken by another worker's kernel
        "--KernelManager.transport=ipc",
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


def open_and_run_all(pw, chromium: str, base: str, notebook: str, errors: list[str]):
    """Launch chromium, open ``notebook`` in the JupyterLab at ``base`` and run all its cells.

    Page errors and caten console errors are appended to ``errors``. Returns (browser, page).
    """
    browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))

    def on_console(m) -> None:
        if m.type == "error" and "caten" in (m.text + str(m.location)).lower():
            errors.append(f"console: {m.text}")

    page.on("console", on_console)
    page.goto(f"{base}/lab/tree/{notebook}?token=catentest")
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    page.wait_for_selector("text=/\\| Idle/", timeout=90_000)
    page.click("text=Run", timeout=10_000)
    page.click("text=Run All Cells", timeout=10_000)
    return browser, page


def wait_inspector_ready(page, nth: int = 0, pass_index=None, rewrite=None, timeout: int = 60_000) -> None:
    """Wait until the ``nth`` Inspector on the page has drawn (at that pass / rewrite, if given)."""
    cond = "el && el.dataset.state === 'ready'"
    if pass_index is not None:
        cond += f" && el.dataset.pass === '{pass_index}'"
    if rewrite is not None:
        cond += f" && el.dataset.rewrite === '{rewrite}'"
    page.wait_for_function(
        f"() => {{ const el = document.querySelectorAll('.caten-inspector')[{nth}]; return {cond}; }}",
        timeout=timeout,
    )


def playwright_and_chromium():
    """(playwright.sync_api, chromium path) for a browser test; skips it when either is missing."""
    import pytest

    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    chromium, reason = find_chromium(install=True)
    if chromium is None:
        pytest.skip(reason)
    return sync_api, chromium


def write_notebook(path: Path, *sources: str) -> None:
    """A notebook of code cells ``sources`` (after ``%load_ext caten_lab``) for the python3 kernel."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in ("%load_ext caten_lab", *sources)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, path)
