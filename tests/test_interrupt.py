"""Ctrl-C at the terminal: one line on stderr, status 130, no traceback and no hang.

The signal is a real SIGINT sent to the command's whole process group, as a terminal sends it,
so the worker processes of ``index --all`` receive it too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from context_paging.server.commands.demo import sample_path

COPIES = 40  # the sample session is ~290 KB: enough that indexing them all takes a while


def _pi_home(tmp_path: Path) -> Path:
    """A home whose Pi root holds ``COPIES`` sessions, and no other agent's."""
    root = tmp_path / "pi" / "--home-dev-shop--"
    root.mkdir(parents=True)
    text = sample_path().read_text(encoding="utf-8")
    for n in range(COPIES):
        (root / f"2026-11-20T09-00-00_copy{n}.jsonl").write_text(
            text.replace("demo-0f3c9a2e", f"copy{n}", 1), encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    none = tmp_path / "none"
    (home / "config.toml").write_text(
        f'[sources]\npi = "{tmp_path / "pi"}"\nclaude_code = "{none}"\ncodex = "{none}"\n')
    return home


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_ctrl_c_during_index_all_prints_one_line_and_exits_130(tmp_path):
    home = _pi_home(tmp_path)
    run = subprocess.Popen(
        [sys.executable, "-m", "context_paging", "--home", str(home), "index", "--all"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    try:
        for line in run.stderr:  # progress lines; the workers are busy once one names a session
            seen.append(line)
            if "indexing pi:" in line:
                break
        os.killpg(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    err = "".join(seen) + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == "context-paging: interrupted", err
    assert run.returncode == 130
    assert out == ""
