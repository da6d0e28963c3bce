"""``context-paging statusline`` as Claude Code runs it: a fresh process, the session's JSON on
stdin, one line out; against ``python -c pass`` measured in the same run.

The home holds ``--conversations`` tallies (default 200, as a proxy used for weeks leaves), the
session's own among them with a side call beside it. Printed: the median and p95 wall time of
each over ``--runs`` runs, alternated, and the ratio of the medians.

    python bench/statusline_bench.py [--runs 40] [--conversations 200]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from context_paging.index.home.proxied import ProxyLog  # noqa: E402
from context_paging.server.endpoints import safe_name  # noqa: E402

SESSION = "5b1e7c2a-0d1f-4c55-9d7e-0a1b2c3d4e5f"


def fill(home: Path, conversations: int) -> None:
    log = ProxyLog(home)
    for n in range(conversations):
        log.record(f"cc-other{n:04d}-x", "anthropic", {"mode": "paged"}, sent=b"x" * 4000,
                   full=b"x" * 9000, previous=None)
    name = safe_name(SESSION)
    log.record(f"cc-{name}-side", "anthropic", {"mode": "within_budget"}, sent=b"x" * 400,
               full=b"x" * 400, previous=None)
    log.record(f"cc-{name}-main", "anthropic", {"mode": "paged", "budget_tokens": 16000,
                                               "frontier": {"kind": "prefix"}},
               sent=b"x" * 60000, full=b"x" * 400000, previous=None)
    log.record_usage(f"cc-{name}-main", "anthropic", {"input_tokens": 10,
                                                      "cache_read_tokens": 14000,
                                                      "cache_write_tokens": 900}, 1)


def timed(argv: list[str], stdin: bytes) -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, check=True)
    return time.perf_counter() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--conversations", type=int, default=200)
    args = parser.parse_args()
    script = shutil.which("context-paging") or str(Path(sys.executable).parent /
                                                    "context-paging")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        fill(home, args.conversations)
        stdin = json.dumps({"session_id": SESSION, "transcript_path": "/tmp/t.jsonl",
                            "cwd": tmp, "model": {"id": "claude-fake"}}).encode()
        commands = {"python -c pass": [sys.executable, "-c", "pass"],
                    "statusline": [script, "--home", tmp, "statusline"]}
        times: dict[str, list[float]] = {name: [] for name in commands}
        line = b""
        for _ in range(args.runs):
            for name, argv in commands.items():
                seconds, out = timed(argv, stdin)
                times[name].append(seconds * 1000)
                if name == "statusline":
                    line = out
    print(f"statusline printed: {line.decode().strip()}")
    for name, values in times.items():
        values.sort()
        print(f"  {name:<15} median {values[len(values) // 2]:6.1f} ms   "
              f"p95 {values[int(0.95 * (len(values) - 1))]:6.1f} ms")
    base, ours = (sorted(v)[len(v) // 2] for v in times.values())
    print(f"  ratio statusline / python -c pass: {ours / base:.2f}x")


if __name__ == "__main__":
    main()
