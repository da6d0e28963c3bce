"""Distillation planning on select_bench's workload, next to the JSON floor, in one run.

Prints, as ratios to issue 12's floor (``json.loads(json.dumps(messages))`` of the 901
messages, timed in the same run):

* the cold call and the share of it spent in the distill step (``ContextService.distill``);
* the distill step of "one more turn" with the whole conversation (median of ``--turns``);
* ``Distiller.plan`` for one grown request: with what earlier calls left in memory (each
  message's read, each large output's chunks) and read anew (no view keys, chunk cache
  emptied), side by side, the plan cache emptied before each (median and best of
  ``--repeat``).

Times are CPU time of this process (``time.process_time``): the machine is shared, and a
ratio of two CPU times moves less with the load than wall time does.

    python bench/plan_bench.py [--turns 9] [--repeat 30]

An older checkout prints the first four lines (for a before figure): ``git archive <commit> |
tar -x -C /tmp/base; PYTHONPATH=/tmp/base python bench/plan_bench.py`` run from this one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from select_bench import _call_args, grown_by, workload  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    from context_paging.index import window_distill
    from context_paging.index.ledger import Ledger
    from context_paging.index.window import ContextService, ContextSettings
    from context_paging.paging.distill import plan as plan_module
    from context_paging.paging.distill.apply import changed
    from context_paging.server.tokens import text_counter

    messages = workload()
    floors = []
    for _ in range(3):
        start = time.process_time()
        json.loads(json.dumps(messages))
        floors.append(time.process_time() - start)
    floor = min(floors)

    spent: list[float] = []
    distill = ContextService.distill

    def timed(self, call, full=False):
        start = time.process_time()
        try:
            return distill(self, call, full)
        finally:
            spent.append(time.process_time() - start)

    ContextService.distill = timed  # type: ignore[method-assign]
    svc = ContextService(Ledger(Path(tempfile.mkdtemp())), ContextSettings(token_budget=128_000),
                         text_counter())
    start = time.process_time()
    svc.select(**_call_args(messages))
    cold = time.process_time() - start
    cold_distill = sum(spent)
    spent.clear()
    for n in range(1, args.turns + 1):
        svc.select(**_call_args(grown_by(messages, n)))
    turn = statistics.median(spent)
    ContextService.distill = distill  # type: ignore[method-assign]

    def show(label: str, seconds: float) -> None:
        print(f"{label:<52} {seconds * 1000:8.2f} ms   (x{seconds / floor:.3f} floor)")

    show("json.loads(json.dumps(messages)) [floor]", floor)
    show("cold call", cold)
    show(f"  its distill step ({cold_distill / cold:.0%} of the call)", cold_distill)
    show(f"one more turn, whole conversation: distill (p50 of {args.turns})", turn)
    if not hasattr(window_distill, "view_keys"):
        return  # an older checkout (run for a before figure): nothing is remembered there

    grown = grown_by(messages, args.turns + 1)
    request = svc.read("bench", grown, "pi", (), None)
    ledger = svc.ledger.session("bench")
    entries, distiller = request.entries, svc.distiller
    changes = changed(entries, ledger.decisions)
    reach = window_distill.entry_reach(entries, svc.settings.token_budget)
    distiller.plan(ledger, entries, None, changes, reach, window_distill.view_keys(request))

    def remembered() -> float:
        distiller._plans.clear()
        start = time.process_time()
        distiller.plan(ledger, entries, None, changes, reach, window_distill.view_keys(request))
        return time.process_time() - start

    def anew() -> float:
        distiller._plans.clear()
        plan_module._chunks.cache_clear()
        start = time.process_time()
        distiller.plan(ledger, entries, None, changes, reach, None)
        return time.process_time() - start

    warm, fresh = [], []
    for _ in range(args.repeat):  # taking turns, so both see the same load
        warm.append(remembered())
        fresh.append(anew())

    show(f"Distiller.plan, remembered reads (p50 of {args.repeat})", statistics.median(warm))
    show(f"Distiller.plan, read anew (p50 of {args.repeat})", statistics.median(fresh))
    print(f"remembered / anew: x{statistics.median(warm) / statistics.median(fresh):.2f} "
          f"(best of each: {min(warm) * 1000:.2f} / {min(fresh) * 1000:.2f} ms)")


if __name__ == "__main__":
    main()
