"""One more turn with the whole conversation, in process: select_bench's workload, a warmed
service, then 20 calls each with a 52 KB turn inserted before the trailing request (as
select_bench grows it). Prints the p50 of the calls, the p50 of the JSON floor of the same
conversation timed right after each call, and their ratio.

Compare two checkouts by taking turns: ``python bench/turn_ab.py`` here, then
``PYTHONPATH=/tmp/base python /tmp/base/bench/turn_ab.py`` with another commit's tree there
(``git archive <commit> | tar -x -C /tmp/base``; an older tree lacks this file: copy it).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import select_bench as sb  # noqa: E402
from context_paging.index.ledger import Ledger  # noqa: E402
from context_paging.index.window.pipeline import ContextService, ContextSettings  # noqa: E402
from context_paging.server.tokens import text_counter  # noqa: E402


def main(calls: int = 20) -> None:
    messages = sb.workload()
    svc = ContextService(Ledger(Path(tempfile.mkdtemp())), ContextSettings(token_budget=128_000),
                         text_counter())
    svc.select(**sb._call_args(messages))
    svc.idle()
    times, floor = [], []
    current = messages
    for n in range(calls):
        current = current[:-1] + sb.turn(300 + n, 52_428) + [current[-1]]
        start = time.perf_counter()
        svc.select(**sb._call_args(current))
        times.append(time.perf_counter() - start)
        svc.idle()  # the spare time between calls, as the server gives it
        start = time.perf_counter()
        json.loads(json.dumps(current))
        floor.append(time.perf_counter() - start)
    call, base = statistics.median(times), statistics.median(floor)
    print(f"one more turn, whole conversation (p50 of {calls}) {call * 1000:.1f} ms; "
          f"floor p50 {base * 1000:.1f} ms; x{call / base:.3f} floor")


if __name__ == "__main__":
    main()
