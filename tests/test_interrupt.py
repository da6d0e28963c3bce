"""Ctrl-C at the terminal: one line on stderr, status 130, no traceback and no hang.

The signal is a real SIGINT sent to the command's whole process group, as a terminal sends it,
so the worker processes of ``index --all`` receive it too.
"""

from __future__ import annotations

import json
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


def _big_pi_session(root: Path, outputs: int = 30, size: int = 90_000) -> None:
    """One Pi session of ``outputs`` tool results of ``size`` characters: large enough that a
    first search indexes it in a child process."""
    folder = root / "--home-dev-shop--"
    folder.mkdir(parents=True)
    lines = [{"type": "session", "version": 3, "id": "big-session-1", "cwd": "/home/dev/shop",
              "timestamp": "2026-11-20T09:00:00.000Z"}]
    parent = None

    def entry(n: int, message: dict) -> None:
        nonlocal parent
        ident = f"{n:08d}"
        lines.append({"type": "message", "id": ident, "parentId": parent,
                      "timestamp": f"2026-11-20T09:{n // 60 % 60:02d}:{n % 60:02d}.000Z",
                      "message": message})
        parent = ident

    entry(1, {"role": "user", "content": "Find the slow query."})
    for k in range(outputs):
        call = f"call_{k}"
        entry(3 * k + 2, {"role": "assistant", "stopReason": "toolUse", "content": [
            {"type": "toolCall", "id": call, "name": "bash", "arguments": {"command": "cat x"}}]})
        text = "\n".join(f"row {k}-{i} query took {i % 97} ms on shard {i % 13}"
                         for i in range(size // 40))
        entry(3 * k + 3, {"role": "toolResult", "toolCallId": call, "toolName": "bash",
                          "content": [{"type": "text", "text": text}], "isError": False})
        entry(3 * k + 4, {"role": "user", "content": f"Next {k}"})
    (folder / "2026-11-20T09-00-00_big-session-1.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_ctrl_c_while_a_first_search_indexes_in_a_child_process(tmp_path):
    _big_pi_session(tmp_path / "pi")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    none = tmp_path / "none"
    (home / "config.toml").write_text(
        f'[sources]\npi = "{tmp_path / "pi"}"\nclaude_code = "{none}"\ncodex = "{none}"\n')
    run = subprocess.Popen(
        [sys.executable, "-m", "context_paging", "--home", str(home), "search", "shard",
         "--session", "pi:big-session-1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = run.stdout.readline()  # the reply is out; the child is writing the index now
        os.killpg(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    assert first.startswith("Searched"), first
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == "context-paging: interrupted", err
    assert run.returncode == 130
