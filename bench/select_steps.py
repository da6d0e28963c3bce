"""Per-step time of select_context's pipeline on select_bench's workload, median of N calls.

Each step of ``ContextService`` (read, record, begin, distill, estimate, calibrate, select,
render, remember) is timed in place (wall time), over ``--turns`` calls that each add one turn:
``after`` sends only the new turn after the previous reply's ``last_message_id``, ``grow`` the
whole conversation again. Between calls the service gets its spare time (``idle()``), as
``serve`` gives it. Run it in two checkouts taking turns (``PYTHONPATH=<checkout>``) to compare.
``--cpu``: the CPU time of the call's own thread instead (steadier on a loaded machine; it
leaves out work on helper threads, which this machine's load keeps switched off).

    python bench/select_steps.py [after|grow] [--turns 25] [--cpu]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS = ["read", "record", "begin", "distill", "estimate", "calibrate", "select_window",
         "render", "remember", "_select"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("after", "grow"), nargs="?", default="after")
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    clock = time.thread_time if args.cpu else time.perf_counter

    import select_bench as sb
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService, ContextSettings
    from context_paging.server.tokens import text_counter

    times: dict[str, list[float]] = {}

    def timed(name: str):
        method = getattr(ContextService, name)

        @functools.wraps(method)
        def run(*a, **k):
            start = clock()
            try:
                return method(*a, **k)
            finally:
                times.setdefault(name, []).append(clock() - start)
        return run

    for name in STEPS:
        setattr(ContextService, name, timed(name))
    messages = sb.workload()
    with tempfile.TemporaryDirectory() as home:
        svc = ContextService(Ledger(Path(home)), ContextSettings(token_budget=128_000),
                             text_counter())
        last = svc.select(**sb._call_args(messages))
        svc.idle()
        times.clear()
        current = messages
        for n in range(2, 2 + args.turns):
            if args.mode == "grow":
                current = sb.grown_by(current, 1)
                call = sb._call_args(current)
            else:
                call = sb._call_args(sb.turn(300 + n - 1, 52_428) + [messages[-1]])
                call["after_id"] = last["last_message_id"]
            last = svc.select(**call)
            svc.idle()
    label = {"select_window": "select", "_select": "the whole call"}
    for name in STEPS:
        values = times.get(name, [])
        if values:
            print(f"{label.get(name, name):16s} {statistics.median(values) * 1000:7.2f} ms "
                  f"(p50 of {len(values)}; the first {values[0] * 1000:.2f} ms)")


if __name__ == "__main__":
    main()
