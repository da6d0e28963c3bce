"""The first call of a restarted server: a fresh process whose ledger already holds the
conversation (``serve`` or the proxy restarted in the middle of a long session), next to the
JSON floor timed in the same process after the call.

On select_bench's workload (901 messages, 15 MiB), one process stores the conversation, then
``--restarts`` fresh processes each call ``select_context`` once on the same request (they read
the ledger, find every message stored and append nothing). ``--against DIR`` runs a second
checkout the same way, alternating with this one, for a before/after in one run.

    python bench/restart_bench.py [--restarts 3] [--rounds 2] [--estimator chars4]
                                  [--no-distill] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, {bench!r})
import select_bench as bench
from context_paging.index.ledger import Ledger
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging.distill import DistillConfig
from context_paging.server.tokens import text_counter
settings = ContextSettings(token_budget=128_000, estimator={estimator!r},
                           distill=DistillConfig(enabled={distill!r}))
service = ContextService(Ledger(Path({home!r})), settings, text_counter())
messages = bench.workload()
start = time.perf_counter()
service.select(**bench._call_args(messages))
call = time.perf_counter() - start
start = time.perf_counter()
json.loads(json.dumps(messages))
floor = time.perf_counter() - start
print(json.dumps([call, floor]))
"""


def one(checkout: Path, home: str, estimator: str, distill: bool) -> tuple[float, float]:
    code = CHILD.format(bench=str(ROOT / "bench"), estimator=estimator, distill=distill,
                        home=home)
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env, cwd=tempfile.gettempdir())
    call, floor = json.loads(done.stdout.splitlines()[-1])
    return call, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--estimator", default="tiktoken", choices=["tiktoken", "chars4"])
    parser.add_argument("--no-distill", action="store_true")
    parser.add_argument("--against", type=Path, help="another checkout, run alternately")
    args = parser.parse_args()
    checkouts = {"this": ROOT}
    if args.against:
        checkouts["against"] = args.against.resolve()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
    for _ in range(args.rounds):
        for name, checkout in checkouts.items():
            with tempfile.TemporaryDirectory() as home:
                one(checkout, home, args.estimator, not args.no_distill)  # stores it
                for _ in range(args.restarts):
                    results[name].append(one(checkout, home, args.estimator,
                                             not args.no_distill))
    print(f"first call after a restart, 15 MiB conversation already in the ledger "
          f"(estimator {args.estimator}, distillation {'off' if args.no_distill else 'on'}; "
          f"{args.rounds} x {args.restarts} processes each)")
    for name, runs in results.items():
        calls = [c for c, _ in runs]
        ratios = [c / f for c, f in runs]
        print(f"  {name:8} call p50 {statistics.median(calls) * 1e3:6.1f} ms "
              f"({min(calls) * 1e3:.1f}-{max(calls) * 1e3:.1f}), "
              f"÷ floor p50 {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
