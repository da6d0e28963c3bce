"""Index throughput, incremental update and search latency, next to grep, in one run.

On a generated corpus (``bench/corpus.py``: Pi, Claude Code and Codex files, 500 MB by default):

* index every session from scratch: MB/s of session file and history items/s;
* append one turn to one session and bring the index up to date again;
* search latency p50/p95 over the same queries for the session scope and for ``all``, next to
  ``grep -rF`` (or ``rg -F`` when installed) over the same files for the same terms.

    python bench/index_bench.py [--mb 500] [--queries 30]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from context_paging.index.discovery import iter_session_files
from context_paging.index.service import History

from bench.corpus import generate


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.median(ordered), p95


def queries(files: list[Path], count: int, rng: random.Random) -> list[str]:
    """Error codes and identifiers that occur in the corpus."""
    found: list[str] = []
    for path in rng.sample(files, min(len(files), count)):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if "ERROR" in line:
                    start = line.index("code E") + 5
                    found.append(line[start : start + 7])
                    break
    return found[:count]


def grep_command(root: Path, term: str) -> list[str]:
    if shutil.which("rg"):
        return ["rg", "-F", "-l", term, str(root)]
    return ["grep", "-rFl", term, str(root)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="index-bench-") as tmp:
        root = Path(tmp) / "sessions"
        files = generate(root, args.mb)
        size = sum(f.stat().st_size for f in files)
        roots = {"pi": root / "pi", "claude": root / "claude", "codex": root / "codex"}
        history = History(roots, Path(tmp) / "home")
        start = time.perf_counter()
        history.index_all()
        seconds = time.perf_counter() - start
        items = sum(len(history.navigator(f.ref).raw) for f in iter_session_files(roots))
        mb = size / (1 << 20)
        print(f"corpus: {len(files)} files, {mb:,.0f} MB, {items:,} history items")
        print(f"index from scratch: {seconds:,.1f} s = {mb / seconds:.2f} MB/s, "
              f"{items / seconds:,.0f} items/s")

        target = next(f for f in iter_session_files(roots) if f.source == "pi")
        last_id = json.loads(target.path.read_text(encoding="utf-8").splitlines()[-1])["id"]
        with open(target.path, "a", encoding="utf-8") as out:
            for n, message in enumerate((
                {"role": "user", "content": "one more request about ZZTOPMARKER"},
                {"role": "assistant", "stopReason": "stop",
                 "content": [{"type": "text", "text": "answered"}]},
            )):
                out.write(json.dumps({"type": "message", "id": f"ffff{n:04x}",
                                      "parentId": last_id if n == 0 else "ffff0000",
                                      "timestamp": "2026-11-02T00:00:00.000Z",
                                      "message": message}) + "\n")
        start = time.perf_counter()
        history.ensure_indexed(target.ref)
        print(f"incremental update after one appended turn: "
              f"{(time.perf_counter() - start) * 1000:,.0f} ms "
              f"(parses only the appended bytes of the {target.path.stat().st_size / (1 << 20):.1f}"
              " MB file, writes only the new items)")

        terms = queries(files, args.queries, rng)
        refs = {str(f.path): f.ref for f in iter_session_files(roots)}
        for scope in ("session", "all"):
            latencies = []
            for term in terms:
                owner = next(p for p in files if term in p.read_text(encoding="utf-8"))
                ref = refs[str(owner)]
                start = time.perf_counter()
                history.search(term, session=ref, scope=scope, limit=5)
                latencies.append((time.perf_counter() - start) * 1000)
            p50, p95 = percentiles(latencies)
            print(f"search_history scope={scope:<8} p50 {p50:8.1f} ms   p95 {p95:8.1f} ms")
        latencies = []
        for term in terms:
            start = time.perf_counter()
            subprocess.run(grep_command(root, term), capture_output=True, check=False)
            latencies.append((time.perf_counter() - start) * 1000)
        p50, p95 = percentiles(latencies)
        print(f"{grep_command(root, 'X')[0]} over all files  p50 {p50:8.1f} ms   p95 {p95:8.1f} ms")
        history.close()


if __name__ == "__main__":
    main()
