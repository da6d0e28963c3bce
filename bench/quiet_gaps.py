"""The longest silence of each long CLI command: seconds between lines on stdout or stderr.

    python bench/quiet_gaps.py

Runs, each in a fresh home over the recorded sessions laid out as the agents lay them out
(bench/recorded.py): ``index --all``, a first ``search``, ``replay`` of the largest recorded
session at a 24,000-token budget, and ``demo``; stderr is a pipe, so progress comes as plain
lines. Prints per command its wall time, its lines and the longest gap (the goal: under 2 s).
Without the recorded sessions only ``demo`` runs.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.recorded import agent_path, sessions_folder

LARGEST = "pi/pi-v1-real-two-compactions-bash-exec.jsonl"


def gaps(argv: list[str], env: dict[str, str]) -> tuple[float, int, float, float]:
    """(wall seconds, lines, first line's second, longest gap) of one run, from its start to
    its exit (the gap before the first line includes the interpreter's start and imports)."""
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    selector = selectors.DefaultSelector()
    for stream in (process.stdout, process.stderr):
        selector.register(stream, selectors.EVENT_READ)
    last, longest, lines, open_streams, first = started, 0.0, 0, 2, None
    while open_streams:
        for key, _ in selector.select():
            line = key.fileobj.readline()
            now = time.monotonic()
            if not line:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            lines += 1
            first = now - started if first is None else first
            longest, last = max(longest, now - last), now
    process.wait()
    end = time.monotonic()
    return end - started, lines, first or 0.0, max(longest, end - last)


def home_with_sessions(tmp: Path, folder: Path) -> Path:
    roots = {name: tmp / name for name in ("pi", "claude", "codex")}
    for path in sorted(folder.rglob("*.jsonl")):
        target = agent_path(roots, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    home = tmp / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{roots["pi"]}"\nclaude_code = "{roots["claude"]}"\n'
        f'codex = "{roots["codex"]}"\n')
    return home


def main() -> None:
    script = [sys.executable, "-m", "context_paging"]
    folder = sessions_folder()
    runs: list[tuple[str, list[str]]] = [("demo", ["demo"])]
    if folder.is_dir():
        runs = [("index --all", ["index", "--all"]),
                ("first search, one session", ["search", "ECONNREFUSED", "--session", "LARGEST"]),
                ("first search --scope all", ["search", "ECONNREFUSED", "--scope", "all"]),
                ("replay (largest, 24k)", ["replay", "--session", "LARGEST", "--budget",
                                           "24000", "--summary"]),
                *runs]
    with tempfile.TemporaryDirectory(prefix="quiet-gaps-") as tmp:
        start = gaps([sys.executable, "-c", "import context_paging.server.cli"],
                     dict(os.environ))[0]
        print(f"importing the CLI: {start:.1f} s (part of each first-line time)")
        print(f"{'command':<28} {'wall s':>7} {'lines':>6} {'first line s':>13} "
              f"{'longest gap s':>14}")
        for n, (name, argv) in enumerate(runs):
            base = Path(tmp) / str(n)  # a fresh home each: every first run is a first run
            base.mkdir()
            env = dict(os.environ, CONTEXT_PAGING_HOME=str(base / "home"))
            if folder.is_dir():
                env["CONTEXT_PAGING_HOME"] = str(home_with_sessions(base, folder))
                largest = agent_path({k: base / k for k in ("pi", "claude", "codex")},
                                     folder / LARGEST)
                argv = [str(largest) if a == "LARGEST" else a for a in argv]
            wall, lines, first, longest = gaps([*script, *argv], env)
            print(f"{name:<28} {wall:>7.1f} {lines:>6} {first:>13.1f} {longest:>14.1f}")


if __name__ == "__main__":
    main()
