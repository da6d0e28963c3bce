"""The collector in a process holding many long conversations, settled as ``serve`` and the
proxy settle it (``server.heap.settle``) and left at CPython's defaults, side by side.

Each figure comes from a fresh interpreter (settling cannot be undone in one), the two kinds
alternating for ``--rounds`` rounds. A process imports the MCP SDK as the servers do, builds
``--sessions`` conversations of select_bench's workload (901 messages, 15 MiB each, different
text in each), settles or not, and then calls ``select_context`` on each conversation in turn:
first the whole conversation, then ``--turns`` more times, each with one new 52 KB turn. It
prints, per kind, the median and the largest call, the collector's time inside calls (from
``gc.callbacks``), how many full collections ran, and the objects a full collection would walk
at the end (``gc.get_objects()``: tracked and not frozen).

    python bench/heap_bench.py [--sessions 8] [--turns 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import gc, json, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {root!r})
import mcp  # what the servers import before they settle
from bench import select_bench as bench
from context_paging.index.ledger import Ledger
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.server import heap
from context_paging.server.tokens import text_counter

settle, sessions, turns = {settle!r}, {sessions!r}, {turns!r}
home = Path(tempfile.mkdtemp())
service = ContextService(Ledger(home), ContextSettings(token_budget=128_000), text_counter())
topics = list(bench.TOPICS)
conversations = []
for k in range(sessions):
    bench.TOPICS[:] = [f"{{t}}{{k}}" for t in topics]  # different text in each conversation
    conversations.append(bench.workload())
if settle:
    heap.settle()
spent, started, full = [0.0], [0.0], [0]

def watch(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - started[0]
        full[0] += info["generation"] == 2

gc.callbacks.append(watch)
calls, collector, fulls = [], [], []
for t in range(turns + 1):
    for k in range(sessions):
        if t:
            conversations[k] = conversations[k] + bench.turn(1000 + t * sessions + k, 52_000)
        spent[0], full[0] = 0.0, 0
        start = time.perf_counter()
        service.select(**bench._call_args(conversations[k]) | {{"session": f"ledger:s{{k}}"}})
        calls.append(time.perf_counter() - start)
        collector.append(spent[0])
        fulls.append(full[0])
        service.idle()
gc.callbacks.remove(watch)
print(json.dumps({{"calls": calls, "collector": collector, "full": fulls,
                  "tracked": len(gc.get_objects())}}))
shutil.rmtree(home)
"""


def run(settle: bool, sessions: int, turns: int) -> dict:
    code = CHILD.format(root=str(ROOT), settle=settle, sessions=sessions, turns=turns)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"settled": [], "defaults": []}
    for _ in range(args.rounds):
        for name in results:
            results[name].append(run(name == "settled", args.sessions, args.turns))
    first = args.sessions
    print(f"{args.sessions} conversations of 15 MiB, {args.turns} more turns each; "
          f"processes of each kind: {args.rounds}; times in ms")
    print(f"{'':9} {'first p50':>9} {'later p50':>9} {'later max':>9} {'gc p50':>7} "
          f"{'gc max':>7} {'full':>5} {'walked':>8}")
    for name, runs in results.items():
        firsts = [c for r in runs for c in r["calls"][:first]]
        later = [c for r in runs for c in r["calls"][first:]]
        spent = [c for r in runs for c in r["collector"][first:]]
        print(f"{name:9} {statistics.median(firsts) * 1e3:9.1f} "
              f"{statistics.median(later) * 1e3:9.1f} {max(later) * 1e3:9.1f} "
              f"{statistics.median(spent) * 1e3:7.2f} {max(spent) * 1e3:7.1f} "
              f"{sum(sum(r['full'][first:]) for r in runs):5} "
              f"{max(r['tracked'] for r in runs):8}")


if __name__ == "__main__":
    main()
