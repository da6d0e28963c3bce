"""Counting a large output in two halves on two threads against counting it on the call's own
thread, side by side in one run (server/tokens.py).

* ``split``: a 52 KB tool output of select_bench's workload counted whole, then in two halves
  on two threads (``text_counter``'s split), in pairs, p50 of each and their ratio; then the
  same with the counter as configured (the load decides whether it splits);
* ``calls``: ``after_id`` library calls of select_bench's workload, two services taking turns
  call by call, one with the split forced on, one with it forced off; p50 of each and their
  ratio.

The split normally runs only when the last minute's load leaves a core free; this bench forces
it, to show what it would do on this machine now. It prints the load average it ran at.

    python bench/count_threads.py [--pairs 200] [--calls 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()

    import select_bench as sb
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService, ContextSettings
    from context_paging.server import tokens

    forced = {"on": True}
    configured = tokens.spare_core
    tokens.spare_core = lambda: forced["on"]
    count = tokens.text_counter()
    encoding = tokens.cl100k()
    if count is None or encoding is None:
        sys.exit("the shipped cl100k_base is missing")
    texts = [sb.turn(n, 52_428)[2]["content"][0]["text"] for n in range(20)]

    def pairs() -> tuple[float, float]:
        whole, split = [], []
        for k in range(args.pairs):
            text = texts[k % len(texts)]
            start = time.perf_counter()
            expected = len(encoding.encode_ordinary(text))
            middle = time.perf_counter()
            got = count(text)
            end = time.perf_counter()
            assert got == expected
            whole.append(middle - start)
            split.append(end - middle)
        return statistics.median(whole) * 1000, statistics.median(split) * 1000

    a, b = pairs()
    print(f"52 KB count, p50 of {args.pairs}: whole {a:.2f} ms, two threads {b:.2f} ms "
          f"(x{b / a:.2f})  load {os.getloadavg()[0]:.1f}")
    tokens.spare_core = configured
    a, b = pairs()
    print(f"the same, as configured (splits now: {configured()}): whole {a:.2f} ms, counter "
          f"{b:.2f} ms (x{b / a:.2f})")
    tokens.spare_core = lambda: forced["on"]

    messages = sb.workload()
    services = {}
    for on in (True, False):
        forced["on"] = on
        svc = ContextService(Ledger(Path(tempfile.mkdtemp())),
                             ContextSettings(token_budget=128_000), count)
        reply = svc.select(**sb._call_args(messages))
        svc.idle()
        services[on] = [svc, reply, []]
    for n in range(2, 2 + args.calls):
        new = sb.turn(300 + n - 1, 52_428) + [messages[-1]]
        for on in ((True, False) if n % 2 else (False, True)):
            forced["on"] = on
            svc, reply, spent = services[on]
            call = sb._call_args(new) | {"after_id": reply["last_message_id"]}
            start = time.perf_counter()
            services[on][1] = svc.select(**call)
            spent.append(time.perf_counter() - start)
            svc.idle()
    on_ms = statistics.median(services[True][2]) * 1000
    off_ms = statistics.median(services[False][2]) * 1000
    print(f"after_id calls, p50 of {args.calls}: split on {on_ms:.2f} ms, off {off_ms:.2f} ms "
          f"(x{on_ms / off_ms:.2f})  load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
