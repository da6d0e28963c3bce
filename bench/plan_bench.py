"""Distillation planning on select_bench's workload, next to the JSON floor, in one run.

Prints, as ratios to the selection goals' floor (``json.loads(json.dumps(messages))`` of the 901
messages, timed in the same run):

* the cold call and the share of it spent in the distill step (``ContextService.distill``);
* the distill step of "one more turn" with the whole conversation, and with only the new
  turn after the last id (median of ``--turns`` each); on this checkout also side by side
  with a second service whose distiller keeps no scan of the conversation between calls
  (``Distiller.keep_scans = False``: every pass walks the whole conversation, as before
  paging/distill/scan.py), the two services taking turns;
* ``Distiller.plan`` for one grown request: with what earlier calls left in memory (each
  message's read, each large output's chunks) and read anew (no view keys, chunk cache
  emptied), side by side, the plan cache emptied before each (median and best of
  ``--repeat``);
* ``apply.changed`` for that request with every output distilled (one edit in force per
  output): fingerprints remembered by view key, and hashed anew, side by side.

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

    from context_paging.index.ledger import Ledger
    from context_paging.index.window import distill as window_distill
    from context_paging.index.window.pipeline import ContextService, ContextSettings
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

    spent: dict[int, list[float]] = {}
    distill = ContextService.distill

    def timed(self, call, full=False):
        start = time.process_time()
        try:
            return distill(self, call, full)
        finally:
            spent.setdefault(id(self), []).append(time.process_time() - start)

    ContextService.distill = timed  # type: ignore[method-assign]
    settings = ContextSettings(token_budget=128_000)
    svc = ContextService(Ledger(Path(tempfile.mkdtemp())), settings, text_counter())
    services = [svc]
    if hasattr(svc.distiller, "keep_scans"):  # this checkout: the same without kept scans
        walker = ContextService(Ledger(Path(tempfile.mkdtemp())), settings, text_counter())
        walker.distiller.keep_scans = False
        services.append(walker)
    start = time.process_time()
    last = [svc.select(**_call_args(messages))]
    cold = time.process_time() - start
    cold_distill = sum(spent.pop(id(svc)))
    last += [other.select(**_call_args(messages)) for other in services[1:]]
    spent.clear()
    # The services take turns, both see the same load; who goes first alternates, since the
    # first to see a new output fills the module's caches (its chunks) for the other.
    for n in range(1, args.turns + 1):
        for each in services if n % 2 else services[::-1]:
            each.select(**_call_args(grown_by(messages, n)))
    whole = {id(each): statistics.median(spent[id(each)]) for each in services}
    spent.clear()
    grown = grown_by(messages, args.turns)
    last = [each.select(**_call_args(grown)) for each in services]
    spent.clear()
    after = "last_message_id" in last[0]
    for n in range(args.turns + 1, 2 * args.turns + 1) if after else ():
        new = grown_by(messages, n)[-4:]  # the new turn and the active request
        for k, each in enumerate(services) if n % 2 else reversed(list(enumerate(services))):
            last[k] = each.select(**_call_args(new) | {"after_id": last[k]["last_message_id"]})
    tail = {id(each): statistics.median(spent[id(each)]) for each in services} if after else {}
    ContextService.distill = distill  # type: ignore[method-assign]

    def show(label: str, seconds: float) -> None:
        print(f"{label:<58} {seconds * 1000:8.2f} ms   (x{seconds / floor:.3f} floor)")

    show("json.loads(json.dumps(messages)) [floor]", floor)
    show("cold call", cold)
    show(f"  its distill step ({cold_distill / cold:.0%} of the call)", cold_distill)
    show(f"one more turn, whole conversation: distill (p50 of {args.turns})", whole[id(svc)])
    if tail:
        show(f"one more turn, after_id: distill (p50 of {args.turns})", tail[id(svc)])
    if len(services) > 1:
        walker = services[1]
        show("  the same, no kept scan: whole conversation", whole[id(walker)])
        show("  the same, no kept scan: after_id", tail[id(walker)])
        print(f"kept scan / no kept scan: whole conversation "
              f"x{whole[id(svc)] / whole[id(walker)]:.2f}, after_id "
              f"x{tail[id(svc)] / tail[id(walker)]:.2f}")
    if not hasattr(window_distill, "view_keys"):
        return  # an older checkout (run for a before figure): nothing is remembered there

    grown = grown_by(messages, 2 * args.turns + 1)
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
    if not hasattr(window_distill, "fingerprints"):
        return

    # A session whose outputs were all distilled: every edit in force checks its message's
    # fingerprint on every call (apply.changed), remembered by view key or hashed anew.
    from context_paging.paging.distill.model import Decision

    edits = [Decision(str(m["toolCallId"]), "output", "distill", "bench", "mid-run", "", "local",
                      original=plan_module.message_fingerprint(m), replacement="[distilled]")
             for _, m in entries if m.get("role") == "toolResult"]
    keys = window_distill.view_keys(request)

    def timed_changes(prints) -> float:
        start = time.process_time()
        changed(entries, edits, prints)
        return time.process_time() - start

    changed(entries, edits, window_distill.fingerprints(entries, keys))  # remembered once
    kept, hashed = [], []
    for _ in range(args.repeat):
        kept.append(timed_changes(window_distill.fingerprints(entries, keys)))
        hashed.append(timed_changes(None))
    show(f"changed(), {len(edits)} edits, remembered prints (p50)", statistics.median(kept))
    show(f"changed(), {len(edits)} edits, hashed anew (p50)", statistics.median(hashed))
    print(f"remembered / anew: x{statistics.median(kept) / statistics.median(hashed):.2f}")


if __name__ == "__main__":
    main()
