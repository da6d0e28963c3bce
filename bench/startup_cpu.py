"""CPU time of a fresh process's start-up work, for one or more checkouts side by side.

Each probe runs in a fresh interpreter with ``PYTHONPATH=<checkout>``; the figure is the
process's user + system CPU time (``wait4``), which the other work on a shared machine moves
far less than the wall clock. The checkouts alternate within each round (the order flipped
every round); printed are the best and the median of ``--rounds`` per checkout, and each
checkout's ratio to the first one.

* ``import service``: ``import context_paging.index.service`` (the History's module);
* ``proxy's first select_context``: what ``context-paging proxy`` does before its first answer
  but the HTTP server: settings, the proxy's app over a new History (index, window and
  tokenizer), then one small ``select_context``.

    python bench/startup_cpu.py [--checkout PATH ...] [--rounds 10]

Without ``--checkout`` the one checkout measured is this one; ``--checkout <older copy>
--checkout .`` gives before → after in one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FIRST_SELECT = """
import argparse, os
from context_paging.server.config import load_settings
from context_paging.server.proxy.commands import make_app
settings = load_settings(home=os.environ["CONTEXT_PAGING_HOME"])
_, history = make_app(settings, argparse.Namespace(upstream_anthropic="http://127.0.0.1:9",
                                                   upstream_openai="http://127.0.0.1:9"))
reply = history.select_context("first", [{"role": "user", "content": "hello"}],
                               fmt="anthropic")
assert reply["mode"] == "within_budget", reply["mode"]
history.close()
"""
PROBES = {"import service": "import context_paging.index.service",
          "proxy's first select_context": FIRST_SELECT}


def cpu_seconds(code: str, checkout: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(checkout), HOME=tmp,
                   CONTEXT_PAGING_HOME=str(Path(tmp) / "home"))
        # cwd is the empty directory: ``-c`` puts it first on sys.path, not a checkout
        process = subprocess.Popen([sys.executable, "-c", code], cwd=tmp, env=env,
                                   stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"the probe failed in {checkout} (status {status})")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", default=[])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkout] or [ROOT]
    times = {(p, c): [] for p in PROBES for c in checkouts}
    for round_ in range(args.rounds):
        order = checkouts if round_ % 2 == 0 else checkouts[::-1]
        for name, code in PROBES.items():
            for checkout in order:
                times[name, checkout].append(cpu_seconds(code, checkout))
    print(f"{args.rounds} alternating rounds, CPU time (user + system); {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    for name in PROBES:
        first = times[name, checkouts[0]]
        for checkout in checkouts:
            samples = times[name, checkout]
            print(f"{name:<30} {str(checkout):<32} best {min(samples) * 1000:6.0f} ms "
                  f"(x{min(samples) / min(first):.2f})  median "
                  f"{statistics.median(samples) * 1000:6.0f} ms "
                  f"(x{statistics.median(samples) / statistics.median(first):.2f})")


if __name__ == "__main__":
    main()
