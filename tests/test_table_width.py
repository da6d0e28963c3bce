"""Tables fit the terminal: on a terminal, the widest column is cut with "…" until each row
fits its width; written to a pipe or a file, rows keep their full width."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from context_paging.index.catalog import SessionSummary
from context_paging.server.cli import render_sessions
from context_paging.server.table import fit

from tests.conftest import SAMPLES_DIR


def _summary(n: int) -> SessionSummary:
    return SessionSummary(
        ref=f"claude:0b6f3c1e-4d2a-4e8b-9c7d-{n:012d}", source="claude", session_id=str(n),
        path="/x", title="Refactor the inventory exporter so the nightly job stops timing out "
        "on large warehouses", cwd="/srv/projects/warehouse/inventory-exporter-service",
        created=None, updated="2026-11-20T09:00:00Z", size=123_456, format="claude", parent=None)


def test_sessions_fit_a_100_column_terminal_and_keep_their_reference():
    summaries = [_summary(n) for n in range(3)]
    wide = render_sessions(summaries, width=None).splitlines()
    assert max(len(line) for line in wide) > 150
    lines = render_sessions(summaries, width=100).splitlines()
    assert max(len(line) for line in lines) <= 100
    assert all("…" in line for line in lines[1:])  # the title, the widest column, was cut
    assert [line.split()[0] for line in lines] == [line.split()[0] for line in wide]


def test_fit_cuts_the_widest_column_first_and_never_below_its_heading():
    rows = [("A", "BB", "CCC"), ("a" * 10, "b" * 30, "c" * 50)]
    lines = fit(rows, width=60).splitlines()
    assert max(len(line) for line in lines) <= 60
    assert lines[1].split()[0] == "a" * 10  # the narrow column is whole
    assert fit(rows, width=None).splitlines()[1] == "a" * 10 + "  " + "b" * 30 + "  " + "c" * 50


@pytest.mark.skipif(not sys.platform.startswith(("linux", "darwin")), reason="needs a pty")
def test_sessions_on_a_real_terminal_fit_its_width(tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(
        f'[sources]\npi = "{SAMPLES_DIR / "pi"}"\nclaude_code = "{SAMPLES_DIR / "claude-code"}"'
        f'\ncodex = "{SAMPLES_DIR / "codex"}"\n')
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    command = [sys.executable, "-m", "context_paging", "--home", str(home), "sessions"]
    piped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert max(len(line) for line in piped.stdout.splitlines()) > 100  # full width in a pipe
    run = subprocess.run(command, stdout=follower, stderr=subprocess.PIPE, env=env,
                         timeout=120)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert run.returncode == 0, run.stderr
    lines = out.decode().splitlines()
    assert len(lines) > 3 and lines[0].startswith("SESSION")
    assert max(len(line) for line in lines) <= 100, lines
    assert any("…" in line for line in lines)


def test_replay_tables_fit_the_width_they_are_given():
    from context_paging.server.commands.demo import sample_path
    from context_paging.server.replay.commands import request_table, totals_table
    from context_paging.server.replay.run import ReplayOptions, replay

    result = replay(str(sample_path()), ReplayOptions(budget=12_000, estimator="chars4",
                                                      recover_sample=5))
    assert max(len(line) for line in request_table(result).splitlines()) > 90
    for table in (request_table(result, 90), totals_table(result, 100)):
        lines = table.splitlines()
        assert max(len(line) for line in lines) <= (90 if lines[0].startswith("REQ ") else 100)
        assert lines[0].split()[:3] in (["REQ", "MSGS", "FULL"], ["STRATEGY", "REQUESTS", "PEAK"])
