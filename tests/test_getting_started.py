"""Every command docs/getting-started.md shows runs when pasted after ``context-paging demo``.

A new user, in a fresh home, runs the demo and then each ``context-paging`` line of the page's
shell blocks exactly as written (through the shell, so ``~`` and quotes mean what they mean at a
prompt); each must exit 0 without a traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT

PAGE = PROJECT / "docs" / "getting-started.md"


def page_commands() -> list[str]:
    """The ``context-paging`` lines of the page's ``sh`` blocks, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    return [line.strip() for block in blocks for line in block.splitlines()
            if line.strip().startswith("context-paging ")]


def _script() -> str:
    found = shutil.which("context-paging", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("the context-paging script is not installed beside this interpreter")
    return str(Path(found).parent)


@pytest.fixture(scope="module")
def new_user(tmp_path_factory):
    """A fresh user: an empty home directory, no CONTEXT_PAGING_HOME, and the demo run once."""
    home = tmp_path_factory.mktemp("user")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXT_PAGING_")}
    env.update(HOME=str(home), PATH=_script() + os.pathsep + env.get("PATH", ""))
    done = subprocess.run(["context-paging", "demo", "--quiet"], cwd=home, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return home, env, done.stdout


def test_the_page_shows_commands_to_run():
    commands = page_commands()
    assert len(commands) >= 10
    pasted = [c.split("  #")[0] for c in commands]
    assert not [c for c in pasted if "<" in c or "…" in c], "placeholders cannot be pasted"


@pytest.mark.parametrize("command", [c for c in page_commands() if c != "context-paging demo"],
                         ids=lambda c: " ".join(c.split()[1:3]))
def test_each_command_of_the_page_runs_after_the_demo(new_user, command):
    home, env, _ = new_user
    done = subprocess.run(["bash", "-c", command], cwd=home, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    assert "Traceback" not in done.stderr


def test_the_demo_says_how_to_go_on_and_how_to_remove_its_session(new_user):
    _, _, out = new_user
    assert "context-paging forget --session ledger:demo-flaky-checkout" in out
    assert "context-paging search ECONNREFUSED --session ledger:demo-flaky-checkout" in out
