"""The garbage collector of the long-running commands (``serve``, ``proxy``, ``run``), settled
once their start-up is done.

Those processes import the MCP SDK, pydantic, the index and the tokenizer: about 90,000 tracked
objects that live as long as the process. CPython's cyclic collector
walks every tracked object in a full collection, and a ``select_context`` call on a long
conversation allocates enough containers (the parsed request, its views, the ledger's records,
distillation's chunks) to start one: in ``serve``, full collections took 40–55 ms of a 15 MiB
first call whose own work is about 110 ms (docs/performance-history.md, "2026-12-05: the
collector, and helper threads that cost more than they saved").

:func:`settle` runs once, when the start-up's imports and loading are done: it moves every
object alive into the permanent generation (``gc.freeze``): those are never walked again, and
are still freed by reference counting as usual. It does not collect first: at that point a
collection found 20 unreachable objects in ``serve`` and took 43 ms, which a first call waiting
for the History would wait for too. It also raises the young generation's threshold, so a
call's thousands of short-lived containers are looked at a few times instead of some thirty.
Frozen, start-up no longer counts as old objects, so full collections could come more often;
they did not: a process holding 8 or 16 conversations of 15 MiB ran none inside the calls of
their later turns, where with CPython's defaults the collector took up to 76–106 ms of one such
call (``bench/heap_bench.py``; docs/performance.md).
Nothing here changes what any call answers; the library itself never touches the collector (a
host's process is the host's).
"""

from __future__ import annotations

import gc

# Net container allocations between two young collections (CPython's default is 700). A call
# on the benchmark conversation allocates about 23,000: two young collections instead of 33.
YOUNG = 10_000


def settle() -> None:
    """Freeze what is alive and widen the young generation (see the module)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
