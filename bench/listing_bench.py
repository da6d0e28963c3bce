"""Listing and resolving sessions in a heavy user's history: 2,000 Claude Code sessions, 1.8 GB.

    python bench/listing_bench.py [--sessions 2000] [--mb 1800] [--fixtures DIR]

Builds one Claude Code root of ``--sessions`` files, ``--mb`` in all (the recorded Claude Code
sessions multiplied: bench/multiplied.py; sizes spread 0.2–1.8 × the mean), in a temporary
folder that is deleted afterwards, and a fresh home. Then, each in a fresh state (new Catalog /
History objects):

* ``context-paging sessions`` (the CLI command, output discarded): cold (no catalog cache in the
  home; the files are in the page cache, as after an agent wrote them) and warm (the cache
  written by the cold run, no file changed), then warm after one session grew by a line;
* ``list_sessions`` (what the MCP tool calls: ``History.list_sessions``), cold and warm;
* resolving one reference (``claude:<id>``) to its file.

With less than three times ``--mb`` free in the temporary folder, pass a smaller ``--mb`` (and
``--sessions``) and state the factor.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import tempfile
import time
from pathlib import Path

try:
    from bench.multiplied import build
    from bench.recorded import require, sessions_folder
except ModuleNotFoundError:  # run as a file (python bench/x.py): bench/ itself is on the path
    from multiplied import build
    from recorded import require, sessions_folder


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and of the worker processes it waited for)."""
    start, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - start, _cpu() - cpu


def _cpu() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=1800)
    parser.add_argument("--fixtures", type=Path, default=sessions_folder())
    args = parser.parse_args()
    fixtures = require(args.fixtures)

    from context_paging.index.discovery import resolve
    from context_paging.index.service import History
    from context_paging.server.cli import main as cli

    tmp = Path(tempfile.mkdtemp(prefix="listing-bench-"))
    try:
        root = tmp / "claude"
        files = build(fixtures, {"claude": root, "pi": tmp / "none", "codex": tmp / "none"},
                      args.sessions, args.mb * 1_000_000 // args.sessions, ("claude",))
        total = sum(f.stat().st_size for f in files)
        print(f"{len(files)} Claude Code sessions, {total / 1e9:.2f} GB "
              f"({total / len(files) / 1e6:.2f} MB each on average)")
        roots = {"claude": root, "pi": tmp / "none", "codex": tmp / "none"}

        def sessions_cli(home: Path) -> None:
            home.mkdir(exist_ok=True)
            (home / "config.toml").write_text(
                f'[sources]\nclaude_code = "{root}"\npi = "{tmp / "none"}"\n'
                f'codex = "{tmp / "none"}"\n')
            with contextlib.redirect_stdout(io.StringIO()):
                cli(["--home", str(home), "sessions", "--limit", "50"])

        def list_sessions(home: Path) -> None:
            history = History(roots, home)
            history.list_sessions(limit=20)
            history.close()

        cli_home, mcp_home = tmp / "home-cli", tmp / "home-mcp"
        rows = [
            ("sessions (CLI), cold", timed(lambda: sessions_cli(cli_home))),
            ("sessions (CLI), warm", timed(lambda: sessions_cli(cli_home))),
        ]
        with open(files[0], "a", encoding="utf-8") as out:  # one session grows by a line
            out.write(files[0].read_text(encoding="utf-8").splitlines()[-1] + "\n")
        rows.append(("sessions (CLI), warm, one file grew", timed(lambda: sessions_cli(cli_home))))
        rows.append(("list_sessions, cold", timed(lambda: list_sessions(mcp_home))))
        rows.append(("list_sessions, warm", timed(lambda: list_sessions(mcp_home))))
        ref = f"claude:{files[len(files) // 2].stem}"
        rows.append(("resolve one claude:<id>", timed(lambda: resolve(ref, roots))))
        print(f"{'':<40}{'wall':>8}  {'CPU (all processes)':>20}")
        for label, (seconds, cpu) in rows:
            print(f"{label:<40}{seconds:8.2f} s{cpu:18.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
