"""The read step of select_context (``ContextService.read``: expanding an ``after_id`` request,
fingerprints, views, ids, the request value) on select_bench's workload: a warmed service, then
15 calls that each add a 52 KB turn, sent as ``after_id`` requests (``after``) or as the whole
conversation (``grow``). Prints the p50 of the read step inside those calls and of the whole
calls, next to the JSON floor of the same conversation timed in the same run.

Compare two checkouts by taking turns: ``python bench/read_bench.py`` here, then
``PYTHONPATH=/tmp/base python bench/read_bench.py`` from another commit's tree
(``git archive <commit> | tar -x -C /tmp/base``; an older tree lacks this file: copy it).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import select_bench as sb  # noqa: E402
from context_paging.index.ledger import Ledger  # noqa: E402
from context_paging.index.window.pipeline import ContextService, ContextSettings  # noqa: E402
from context_paging.server.tokens import text_counter  # noqa: E402


def run(mode: str, calls: int = 15) -> None:
    messages = sb.workload()
    svc = ContextService(Ledger(Path(tempfile.mkdtemp())),
                         ContextSettings(token_budget=128_000), text_counter())
    read = svc.read
    spent: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return read(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    svc.read = timed  # type: ignore[method-assign]
    last = svc.select(**sb._call_args(messages))
    svc.idle()
    spent.clear()
    totals, floor = [], []
    current = messages
    for n in range(calls):
        turn = sb.turn(300 + n, 52_428)
        current = current[:-1] + turn + [current[-1]]
        args = sb._call_args(current)
        if mode == "after":
            args = sb._call_args(turn + [messages[-1]]) | {"after_id": last["last_message_id"]}
        start = time.perf_counter()
        last = svc.select(**args)
        totals.append(time.perf_counter() - start)
        svc.idle()
        start = time.perf_counter()
        json.loads(json.dumps(current))
        floor.append(time.perf_counter() - start)
    step, call, base = (statistics.median(x) * 1000 for x in (spent, totals, floor))
    print(f"{mode:5}  read step p50 {step:6.2f} ms (x{step / base:.4f} floor)   "
          f"call p50 {call:6.2f} ms (x{call / base:.3f} floor)   floor p50 {base:6.1f} ms")


if __name__ == "__main__":
    for name in sys.argv[1:] or ["after", "grow"]:
        run(name)
