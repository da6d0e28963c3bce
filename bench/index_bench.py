"""Index throughput, incremental update and search latency, next to grep, in one run.

On a corpus of real shape (``--corpus recorded``, the default: the recorded Pi, Claude Code and
Codex sessions multiplied to ``--mb``, bench/multiplied.py) or a generated one (``--corpus
generated``: bench/corpus.py, denser in distinct terms than real sessions: four times the
postings per MB and six times the distinct terms):

* index every session from scratch: MB/s of session file (wall clock, and per CPU second of
  this process and its worker processes, which a busy machine does not distort) and items/s;
* append one turn to one session and bring the index up to date again;
* search latency p50/p95 over the same queries for the session scope and for ``all``, next to
  ``grep -rF`` (or ``rg -F`` when installed) over the same files for the same terms.

    python bench/index_bench.py [--mb 1000] [--corpus recorded|generated] [--queries 30]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from context_paging.index.discovery import iter_session_files
from context_paging.index.service import History

from bench.corpus import generate
from bench.multiplied import build
from bench.recorded import require, sessions_folder


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.median(ordered), p95


def queries(files: list[Path], count: int, rng: random.Random) -> list[tuple[str, Path]]:
    """Error codes (generated corpus) or camel-case names (recorded) that occur in the corpus,
    with a file that holds each."""
    found: list[tuple[str, Path]] = []
    for path in rng.sample(files, min(len(files), count)):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if "code E" in line:
                    start = line.index("code E") + 5
                    found.append((line[start : start + 7], path))
                    break
                match = _ERROR_WORD.search(line)
                if match:
                    found.append((match.group(), path))
                    break
    return found[:count]


_ERROR_WORD = re.compile(r"\b(?:[A-Z][a-z]+){2,}(?:Error|Exception)?\b")  # camel-case names


def _cpu() -> float:
    """CPU seconds of this process and of its finished worker processes."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def grep_command(root: Path, term: str) -> list[str]:
    if shutil.which("rg"):
        return ["rg", "-F", "-l", term, str(root)]
    return ["grep", "-rFl", term, str(root)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1000)
    parser.add_argument("--corpus", choices=("recorded", "generated"), default="recorded")
    parser.add_argument("--fixtures", type=Path, default=sessions_folder())
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="index-bench-") as tmp:
        root = Path(tmp) / "sessions"
        roots = {"pi": root / "pi", "claude": root / "claude", "codex": root / "codex"}
        if args.corpus == "generated":
            files = generate(root, args.mb)
        else:  # 1 MB sessions on average, as many as make --mb
            files = build(require(args.fixtures), roots, max(1, args.mb), 1_000_000)
        size = sum(f.stat().st_size for f in files)
        history = History(roots, Path(tmp) / "home")
        start, main_cpu, cpu = time.perf_counter(), time.process_time(), _cpu()
        history.index_all()
        seconds, cpu = time.perf_counter() - start, _cpu() - cpu
        main_cpu = time.process_time() - main_cpu
        # The writer is one process and the readers share the cores: what two idle cores allow.
        bound = max(main_cpu, cpu / 2)
        items = sum(len(history.navigator(f.ref).raw) for f in iter_session_files(roots))
        mb = size / 1e6
        print(f"corpus ({args.corpus}): {len(files)} files, {mb:,.0f} MB, {items:,} history items")
        print(f"index from scratch: {seconds:,.1f} s = {mb / seconds:.2f} MB/s, "
              f"{items / seconds:,.0f} items/s; CPU {cpu:,.1f} s ({main_cpu:,.1f} s writing in "
              f"this process) = {mb / bound:.2f} MB/s on two idle cores")
        index_bytes = sum(p.stat().st_size for p in (Path(tmp) / "home").rglob("*")
                          if p.is_file() and "index" in p.parts)
        print(f"index size: {index_bytes / 1e6:,.0f} MB "
              f"({index_bytes / items:,.0f} bytes per item)")

        target = next(iter_session_files(roots))
        last = target.path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        with open(target.path, "ab") as out:  # one more line, as an agent appends one
            out.write(last + b"\n")
        start = time.perf_counter()
        history.ensure_indexed(target.ref)
        print(f"incremental update after one appended turn: "
              f"{(time.perf_counter() - start) * 1000:,.0f} ms "
              f"(parses only the appended bytes of the {target.path.stat().st_size / 1e6:.1f}"
              " MB file, writes only the new items)")

        terms = queries(files, args.queries, rng)
        refs = {str(f.path): f.ref for f in iter_session_files(roots)}
        for scope in ("session", "all"):
            latencies = []
            for term, owner in terms:
                ref = refs[str(owner)]
                start = time.perf_counter()
                history.search(term, session=ref, scope=scope, limit=5)
                latencies.append((time.perf_counter() - start) * 1000)
            p50, p95 = percentiles(latencies)
            print(f"search_history scope={scope:<8} p50 {p50:8.1f} ms   p95 {p95:8.1f} ms")
        latencies = []
        for term, _ in terms:
            start = time.perf_counter()
            subprocess.run(grep_command(root, term), capture_output=True, check=False)
            latencies.append((time.perf_counter() - start) * 1000)
        p50, p95 = percentiles(latencies)
        print(f"{grep_command(root, 'X')[0]} over all files  p50 {p50:8.1f} ms   p95 {p95:8.1f} ms")
        history.close()


if __name__ == "__main__":
    main()
