"""Listing and resolving sessions in a heavy user's history: 2,000 Claude Code sessions.

    python bench/listing_bench.py [--sessions 2000] [--turns 6] [--lines 40]

Generates one Claude Code root with ``--sessions`` files (bench/corpus.py's writer; the default
6 turns of 40-line outputs make ~25 KB files, ~50 MB in all: smaller than a real 706 MB history,
but the same number of files, which is what listing scales with once the cache is warm), and a
fresh home. Then, each in a fresh process-like state (new Catalog / History objects):

* ``context-paging sessions`` (the CLI command, output discarded): cold (no catalog cache in the
  home) and warm (the cache written by the cold run, no file changed), then warm after one
  session grew by a turn;
* ``list_sessions`` (what the MCP tool calls: ``History.list_sessions``), cold and warm;
* resolving one reference (``claude:<id>``) to its file.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from bench.corpus import claude_session


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--lines", type=int, default=40)
    args = parser.parse_args()

    from context_paging.index.discovery import resolve
    from context_paging.index.service import History
    from context_paging.server.cli import main as cli

    tmp = Path(tempfile.mkdtemp(prefix="listing-bench-"))
    try:
        rng = random.Random(5)
        root = tmp / "claude"
        folder = root / "-bench-claude"
        folder.mkdir(parents=True)
        files = []
        for _ in range(args.sessions):
            path = folder / f"{uuid.UUID(int=rng.getrandbits(128))}.jsonl"
            claude_session(path, rng, args.turns, args.lines)
            files.append(path)
        total = sum(f.stat().st_size for f in files)
        print(f"{len(files)} Claude Code sessions, {total / (1 << 20):.0f} MB "
              f"({total / len(files) / 1024:.0f} KB each)")
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
        with open(files[0], "a", encoding="utf-8") as out:  # one session grows
            out.write(files[1].read_text(encoding="utf-8").splitlines()[0] + "\n")
        rows.append(("sessions (CLI), warm, one file grew", timed(lambda: sessions_cli(cli_home))))
        rows.append(("list_sessions, cold", timed(lambda: list_sessions(mcp_home))))
        rows.append(("list_sessions, warm", timed(lambda: list_sessions(mcp_home))))
        ref = f"claude:{files[len(files) // 2].stem}"
        rows.append(("resolve one claude:<id>", timed(lambda: resolve(ref, roots))))
        for label, seconds in rows:
            print(f"{label:<40}{seconds:8.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
