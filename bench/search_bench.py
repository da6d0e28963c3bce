"""The first and the repeated search of one large session, next to ``json.loads`` of its file.

    python bench/search_bench.py [--repeat 9] [--cold 5] [--fixtures DIR]

Two sessions of the same size, written as Pi session files:

* ``upstream``: upstream's benchmark workload (docs/selection.md, "The benchmark workload";
  bench/select_bench.py): 300 turns, 15 MiB of tool output, 8 log lines repeated; query ``needle``;
* ``fixtures``: 300 turns whose outputs are the real tool outputs of every recorded fixture,
  taken in turn until the same 15 MiB are reached; queries mined from one output in the middle
  (a compound token and its basename).

For each, in one run: the floor, ``json.loads`` of every line of the file (best of 3); the first
search of the session from a fresh process state and an empty home (parse, answer in memory,
index in the background); repeated searches while the index catches up (p50); the time the
background indexing took; repeated searches once it is done (p50). Each as a ratio to the floor.
Then ``--cold`` more first searches, each from a fresh home with its own floor measured just
before it: the median and range of those ratios (the figure to trust on a loaded machine).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.search_eval import FIXTURES
from bench.select_bench import TOTAL, TURNS, workload


def write_pi(path: Path, messages: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"type": "session", "version": 3, "id": path.stem.split("_")[-1],
                         "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/bench"})]
    parent = None
    for n, message in enumerate(messages):
        lines.append(json.dumps({"type": "message", "id": f"e{n:05d}", "parentId": parent,
                                 "timestamp": "2026-01-01T00:00:00.000Z", "message": message}))
        parent = f"e{n:05d}"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def fixture_outputs(fixtures: Path) -> list[str]:
    """Every tool output of every fixture, in file order (read with the project's readers)."""
    from context_paging.index.history import content_text
    from context_paging.index.sessions import SessionFile

    outputs = []
    for path in sorted(fixtures.rglob("*.jsonl")):
        for item in SessionFile(str(path)).projection.items:
            outputs.extend(t for t in (content_text(r.content) for r in item.tool_results) if t)
    return outputs


def fixture_workload(outputs: list[str]) -> tuple[list[dict], list[str]]:
    """300 turns of real outputs (concatenated in turn to 15 MiB / 300 each) and the queries."""
    per = TOTAL // TURNS
    stream = itertools.cycle(outputs)
    messages: list[dict] = []
    middle = ""
    for n in range(TURNS):
        text = ""
        while len(text) < per:
            text += next(stream) + "\n"
        text = text[:per]
        if n == TURNS // 2:
            middle = text
        messages += [
            {"role": "user", "content": f"Benchmark request {n}", "timestamp": n * 3},
            {"role": "assistant", "stopReason": "toolUse", "timestamp": n * 3 + 1, "content": [
                {"type": "toolCall", "id": f"call-{n}", "name": "read",
                 "arguments": {"path": f"src/{n}.ts"}}]},
            {"role": "toolResult", "toolCallId": f"call-{n}", "toolName": "read",
             "isError": False, "timestamp": n * 3 + 2, "content": [{"type": "text", "text": text}]},
        ]
    paths = re.findall(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+\.[a-z]{2,4}\b", middle)
    queries = [paths[len(paths) // 2], paths[len(paths) // 2].rsplit("/", 1)[-1]] if paths \
        else ["error"]
    return messages + [{"role": "user", "content": "Summarize."}], queries


def floor(path: Path) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                json.loads(line)
        best = min(best, time.perf_counter() - start)
    return best


def cold_ratios(path: Path, query: str, runs: int) -> list[float]:
    """``runs`` more cold first searches, each from a fresh home and right after its own floor
    (on a shared machine the load changes between seconds: a ratio of two moments apart says
    little). The background indexing each one starts is stopped: only the answer is timed."""
    from context_paging.index.service import History

    ratios = []
    for _ in range(runs):
        base = floor(path)
        home = Path(tempfile.mkdtemp(prefix="search-bench-home-"))
        history = History({"pi": path.parent.parent}, home)
        start = time.perf_counter()
        history.search(query, session="pi:" + path.stem.split("_")[-1], limit=5)
        ratios.append((time.perf_counter() - start) / base)
        for worker in list(history._syncing.values()):
            if hasattr(worker, "terminate"):  # a child process this bench started
                worker.terminate()
            worker.join()
        history._syncing.clear()
        history.close()
        shutil.rmtree(home, ignore_errors=True)
    return ratios


def measure(label: str, path: Path, queries: list[str], repeat: int, cold: int) -> None:
    from context_paging.index.service import History

    base = floor(path)
    home = Path(tempfile.mkdtemp(prefix="search-bench-home-"))
    history = History({"pi": path.parent.parent}, home)
    ref = "pi:" + path.stem.split("_")[-1]
    start = time.perf_counter()
    first = history.search(queries[0], session=ref, limit=5)
    first_s = time.perf_counter() - start
    during = []
    for n in range(repeat):
        start = time.perf_counter()
        history.search(queries[n % len(queries)], session=ref, limit=5)
        during.append(time.perf_counter() - start)
    start = time.perf_counter()
    history.wait_for_index()
    catch_up = time.perf_counter() - start + sum(during) + first_s  # from the first search on
    after = []
    for n in range(repeat):
        start = time.perf_counter()
        again = history.search(queries[n % len(queries)], session=ref, limit=5)
        after.append(time.perf_counter() - start)
    same = [r["history_id"] for r in history.search(queries[0], session=ref).references] == \
        [r["history_id"] for r in first.references]
    history.close()
    shutil.rmtree(home, ignore_errors=True)
    mb = path.stat().st_size / (1 << 20)
    print(f"{label}: {mb:.1f} MiB file, queries {queries}, {len(again.references)} hits")
    rows = [("json.loads floor", base), ("first search (cold)", first_s),
            ("repeated, index catching up (p50)", statistics.median(during)),
            ("background indexing done after", catch_up),
            ("repeated, indexed (p50)", statistics.median(after))]
    for name, seconds in rows:
        print(f"  {name:<36}{seconds * 1000:10.1f} ms  {seconds / base:6.2f}x floor")
    print(f"  first answer equals the indexed answer: {same}")
    if cold:
        ratios = sorted(cold_ratios(path, queries[0], cold))
        print(f"  first search (cold), {cold} more runs, each next to its own floor: median "
              f"{statistics.median(ratios):.2f}x, range {ratios[0]:.2f}-{ratios[-1]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--cold", type=int, default=5, help="more cold first searches")
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="search-bench-"))
    try:
        upstream = tmp / "a" / "pi" / "--bench--" / "2026-01-01T00-00-00-000Z_upstream.jsonl"
        write_pi(upstream, workload())
        measure("upstream workload", upstream, ["needle"], args.repeat, args.cold)
        if args.fixtures.exists():
            messages, queries = fixture_workload(fixture_outputs(args.fixtures))
            real = tmp / "b" / "pi" / "--bench--" / "2026-01-01T00-00-00-000Z_fixtures.jsonl"
            write_pi(real, messages)
            measure("fixture outputs", real, queries, args.repeat, args.cold)
        else:
            print(f"no fixtures at {args.fixtures}: the second workload is skipped",
                  file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
