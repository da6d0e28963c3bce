"""The built wheel, installed into a fresh virtualenv, clashes with nothing.

The project keeps ``server/``, ``paging/`` and ``index/`` at the top of the repository but
installs them as ``context_paging.server`` and so on. This test builds the wheel from a copy of
the sources, installs it (no network, no dependencies: those come from this test's own
environment) into a new virtualenv, and imports the package from a directory that holds its own
``server.py`` and ``index.py``, as a host script's folder might. A layout that put a top-level
``server`` or ``index`` into site-packages fails here: either the wheel lists them, or the
imports pick up the wrong module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from tests.conftest import PROJECT

SOURCES = ("pyproject.toml", "README.md", "context_paging", "server", "paging", "index")


def run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PIP_NO_INPUT": "1"})
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


def build_wheel(tmp_path: Path) -> Path:
    # Build from a copy: an in-place build would leave build/ and *.egg-info in the checkout.
    source = tmp_path / "src"
    for name in SOURCES:
        origin = PROJECT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(origin, source / name)
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "--no-index", "-q", "-w", wheels, source)
    return next(wheels.glob("context_paging_mcp-*.whl"))


def fresh_venv(tmp_path: Path) -> Path:
    """A virtualenv without pip (quick to make) whose dependencies are this environment's: a
    ``.pth`` line adds our site-packages *after* its own. Paths added that way are not scanned
    for ``.pth`` files, so the editable install of the checkout stays out of it."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                   .stdout.strip())
    (purelib / "deps-from-the-test-environment.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_the_wheel_installs_one_package_and_imports_beside_a_local_server_and_index(tmp_path):
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"context_paging"}
    # the live view's page ships with the package (nothing is fetched to show it)
    assert {f"context_paging/server/data/live-view.{ext}" for ext in ("html", "css", "js")
            } <= set(names)

    python = fresh_venv(tmp_path)
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
        "-q", wheel)

    host = tmp_path / "host-project"  # a host's own folder, with modules of the generic names
    host.mkdir()
    (host / "server.py").write_text("WHO = 'the host script'\n")
    (host / "index.py").write_text("WHO = 'the host index'\n")
    probe = (
        "import pathlib, server, index\n"
        "import context_paging, context_paging.server.cli, context_paging.index, "
        "context_paging.paging\n"
        "from context_paging.index.history import project\n"
        "from context_paging.paging.select import select_context\n"
        "print(server.WHO, '|', index.WHO)\n"
        "print(pathlib.Path(context_paging.server.cli.__file__).parent)\n"
    )
    out = run(python, "-c", probe, cwd=host).stdout.splitlines()
    assert out[0] == "the host script | the host index"  # the host keeps its own modules
    installed = Path(out[1])
    assert installed.parts[-2:] == ("context_paging", "server")
    assert "site-packages" in installed.parts and PROJECT not in installed.parents
    site = installed.parent.parent
    assert not any((site / name).exists() for name in ("server", "index", "paging"))

    helped = run(python, "-m", "context_paging", "--help", cwd=host)
    assert helped.stdout.startswith("usage: context-paging")
