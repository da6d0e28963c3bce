"""The symlink-swap race of tests/test_hardening.py, repeated many times.

A thread swaps a session file for a symlink to a file outside the roots and back while the
four recovery tools read it by path. Each run is one fresh server and home; the script counts
the error codes of every reply, replies that hold the outside text, and errors outside the
allowed set (UNKNOWN_SESSION, UNKNOWN_HISTORY_ID, UNKNOWN_TOOL_CALL_ID), printing the first
traceback of each such error. A rare flake of the test (a STORAGE_ERROR) shows here at a
measurable rate, so a fix can be compared with the code before it side by side:

    python bench/swap_race.py --runs 60 --pause 0
    python bench/swap_race.py --runs 60 --pause 0 --checkout /tmp/base   # e.g. `git archive`

``--pause`` is how long each state lasts (the test's 0.0005 s; 0 swaps as fast as it can,
which makes the races of resolving a path far more frequent).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import traceback
from collections import Counter
from pathlib import Path

ALLOWED = ("UNKNOWN_SESSION", "UNKNOWN_HISTORY_ID", "UNKNOWN_TOOL_CALL_ID")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=60, help="rounds of four calls per run")
    parser.add_argument("--pause", type=float, default=0.0005)
    parser.add_argument("--checkout", help="import the project from this source tree instead")
    args = parser.parse_args()
    sys.path.insert(0, args.checkout or str(Path(__file__).resolve().parent.parent))
    import anyio
    import context_paging.server.mcp.binding as binding

    traces: list[str] = []
    translate = binding.failure

    def failure(exc, home=None):  # keeps the traceback of every disallowed error
        failed = translate(exc, home)
        if failed is not None and failed.code not in ALLOWED:
            traces.append("".join(traceback.format_exception(exc)))
        return failed

    binding.failure = failure
    codes: Counter[str] = Counter()
    leaked = bad_runs = calls = 0
    for n in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            replies, swaps = anyio.run(one_run, Path(tmp), args.rounds, args.pause)
        calls += len(replies)
        run_codes = Counter(text.split(":", 1)[0] if error else "ok" for error, text in replies)
        codes.update(run_codes)
        leaked += sum("outsideword" in text for _, text in replies)
        bad = sum(v for k, v in run_codes.items() if k not in (*ALLOWED, "ok"))
        bad_runs += bad > 0
        if bad:
            print(f"run {n}: {bad} disallowed replies ({swaps} swaps)", file=sys.stderr)
            print(re.sub(r"^", "    ", traces[0], flags=re.M), file=sys.stderr)
        traces.clear()
    disallowed = sum(v for k, v in codes.items() if k not in (*ALLOWED, "ok"))
    print(f"runs {args.runs}, calls {calls}, pause {args.pause:g} s")
    print(f"disallowed replies {disallowed} (in {bad_runs} runs), outside text leaked {leaked}")
    for code, count in codes.most_common():
        print(f"  {count:6d} {code}")


async def one_run(tmp: Path, rounds: int, pause: float) -> tuple[list[tuple[bool, str]], int]:
    from context_paging.server.config import load_settings
    from context_paging.server.mcp.tools import create_server
    from mcp import Client

    from tests.test_hardening import agent_roots, claude_lines
    from tests.test_protocol import call

    roots, home = agent_roots(tmp)
    session = roots["claude"] / "-work-c" / "race.jsonl"
    session.parent.mkdir()
    session.write_text(claude_lines("race", "insideword"))
    keep = tmp / "keep.jsonl"
    os.link(session, keep)
    outside = tmp / "outside.jsonl"
    outside.write_text(claude_lines("race", "outsideword"))
    stop = threading.Event()
    swaps = 0

    def swap() -> None:
        nonlocal swaps
        link, hard = str(session) + ".lnk", str(session) + ".hard"
        while not stop.is_set():
            os.symlink(outside, link)
            os.replace(link, session)
            stop.wait(pause)
            os.link(keep, hard)
            os.replace(hard, session)
            stop.wait(pause)
            swaps += 1

    requests = [("recall", {"tool_call_id": "toolu_1", "session": str(session)}),
                ("search_history", {"query": "answer", "session": str(session), "load": True}),
                ("browse_history", {"direction": "forward", "count": 10, "session": str(session)}),
                ("load_history", {"history_ids": ["insideword0001"], "session": str(session)})]
    server = create_server(load_settings(home=home))
    replies: list[tuple[bool, str]] = []
    thread = threading.Thread(target=swap, daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # as the test: the swapping thread runs between our steps
    try:
        async with Client(server) as client:
            thread.start()
            for _ in range(rounds):
                for tool, arguments in requests:
                    error, text, _ = await call(client, tool, arguments)
                    replies.append((error, text))
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
        server.history.close()
    return replies, swaps


if __name__ == "__main__":
    main()
