"""Search recall on queries mined mechanically from the real fixtures' tool outputs.

    python bench/search_eval.py [--fixtures DIR] [--per-kind N] [--stats session|index]

Every fixture is laid out where its agent writes sessions, and from every tool output of every
model turn the bench takes what a model might later type to find that turn:

* ``whole``     a compound token as it stands (``src/components/Modal.tsx``, ``a.b.c``);
* ``basename``  the last segment of a path (``Modal.tsx``);
* ``tail``      the last two segments of a path of three or more (``components/Modal.tsx``);
* ``dotted``    the last part of a dotted name (``psycopg2.errors.DeadlockDetected`` →
                ``DeadlockDetected``), when it looks like a name (six or more characters);
* ``host``      the host of a URL (``https://paraxial.io/blog`` → ``paraxial.io``);
* ``uuid``      the first and the last segment of a uuid;
* ``error``     a whole error line (``...Error:``, ``Traceback``, ``No such file`` ...).

The query's truth is the one turn whose search text holds the query (case-insensitively, not
inside a longer word, edge punctuation aside); queries that occur in two or more items are
dropped, so a miss is a miss. Mining uses its own regular expressions, not the project's
tokenizer, so the same query set measures any tokenizer. It reads sessions only through
``History`` (``navigator().raw``, ``search``), which the base commit also has: run the same
file against the base to get the "before" column
(``PYTHONPATH=<base export> python bench/search_eval.py``).

Per fixture and kind at most ``--per-kind`` queries are kept (evenly spaced, so the set is
fixed). Prints recall@1 and recall@3 per kind and per format (pi, claude, codex).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

try:
    from bench.recorded import agent_path, sessions_folder
except ModuleNotFoundError:  # run as a file (python bench/x.py): bench/ itself is on the path
    from recorded import agent_path, sessions_folder

FIXTURES = sessions_folder()

_COMPOUND = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./:@-]*[A-Za-z0-9_]")
_URL_HOST = re.compile(r"https?://([A-Za-z0-9.-]+\.[A-Za-z]{2,})")
_UUID = re.compile(r"\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-([0-9a-f]{12})\b", re.I)
_ERRORISH = re.compile(r"\b\w*(Error|Exception)\b:|\bERROR\b|\bFAILED\b|Traceback|"
                       r"No such file|command not found|Permission denied")
KINDS = ("whole", "basename", "tail", "dotted", "host", "uuid", "error")


def lay_out(tmp: Path, fixtures: Path) -> dict[str, Path]:
    roots = {"pi": tmp / "pi", "claude": tmp / "claude", "codex": tmp / "codex"}
    for path in sorted(fixtures.rglob("*.jsonl")):
        target = agent_path(roots, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return roots


def mine(output: str) -> dict[str, list[str]]:
    """Candidate queries of every kind from one tool output (duplicates kept out later)."""
    found: dict[str, list[str]] = defaultdict(list)
    for match in _COMPOUND.finditer(output):
        token = match.group(0)
        if len(token) > 150 or not re.search(r"[A-Za-z]", token):
            continue
        if "/" in token:
            parts = [p for p in token.split("/") if p]
            if len(parts) >= 2:
                found["whole"].append(token)
                if len(parts[-1]) >= 4 and re.search(r"[A-Za-z]", parts[-1]):
                    found["basename"].append(parts[-1])
                if len(parts) >= 3:
                    found["tail"].append("/".join(parts[-2:]))
        elif "." in token and "://" not in token:
            parts = [p for p in token.split(".") if p]
            if len(parts) >= 2:
                found["whole"].append(token)
                last = parts[-1]
                if len(last) >= 6 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", last):
                    found["dotted"].append(last)
    for match in _URL_HOST.finditer(output):
        found["host"].append(match.group(1))
    for match in _UUID.finditer(output):
        found["uuid"].extend([match.group(1), match.group(2)])
    for line in output.splitlines():
        line = line.strip()
        if _ERRORISH.search(line) and 20 <= len(line) <= 150:
            found["error"].append(line)
    return found


def _bounded(query: str) -> re.Pattern:
    return re.compile(r"(?<![A-Za-z0-9_])" + re.escape(query.lower()) + r"(?![A-Za-z0-9_])")


def queries_for(items, per_kind: int) -> list[tuple[str, str, str]]:
    """(kind, query, owning history id) for one session, each query in exactly one item."""
    from context_paging.index.history import content_text, search_text

    texts = [(item.history_id, search_text(item).lower()) for item in items
             if not item.is_recovery_turn]
    picked: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
    for item in items:
        if item.kind != "model_turn" or item.is_recovery_turn:
            continue
        output = "\n".join(content_text(r.content) for r in item.tool_results)
        for kind, values in mine(output).items():
            for value in values:
                if value.lower() in (q.lower() for q in picked[kind]):
                    continue
                picked[kind][value] = item.history_id
    result = []
    for kind in KINDS:
        unique = []
        for query, owner in picked[kind].items():
            # the truth is what the query says: an error line's trailing comma or brace is not
            # part of it (another turn holding the same line is an equally good answer)
            pattern = _bounded(re.sub(r"^\W+|\W+$", "", query) or query)
            holders = [h for h, text in texts if pattern.search(text)]
            if holders == [owner]:
                unique.append((kind, query, owner))
        if len(unique) > per_kind:  # evenly spaced, so the set does not depend on anything else
            step = len(unique) / per_kind
            unique = [unique[int(i * step)] for i in range(per_kind)]
        result.extend(unique)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--per-kind", type=int, default=25)
    parser.add_argument("--show-misses", action="store_true")
    parser.add_argument("--stats", choices=("session", "index"),
                        help="BM25 statistics of a session search (default: the code's)")
    args = parser.parse_args()
    if args.stats:
        import context_paging.index.search.store as store

        store.SESSION_STATISTICS = args.stats == "session"
    from context_paging.index.discovery import iter_session_files
    from context_paging.index.service import History

    import context_paging

    tmp = Path(tempfile.mkdtemp(prefix="search-eval-"))
    try:
        roots = lay_out(tmp, args.fixtures)
        history = History(roots, tmp / "home")
        counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        misses = []
        started = time.perf_counter()
        for found in iter_session_files(roots):
            items = history.navigator(found.ref).raw
            history.ensure_indexed(found.ref)  # measure the index (the in-memory first search
            # of a session ranks the same: tests/test_scan.py)
            for kind, query, owner in queries_for(items, args.per_kind):
                hits = history.search(query[:200], session=found.ref, limit=3).references
                ids = [hit["history_id"] for hit in hits]
                for key in ((kind, found.source), (kind, "all"), ("all", found.source),
                            ("all", "all")):
                    row = counts[key]
                    row[0] += 1
                    row[1] += ids[:1] == [owner]
                    row[2] += owner in ids
                if owner not in ids:
                    misses.append((found.path.name, kind, query))
        elapsed = time.perf_counter() - started
        history.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{'kind':<10}{'format':<8}{'queries':>8}{'recall@1':>10}{'recall@3':>10}")
    for kind in (*KINDS, "all"):
        for fmt in ("pi", "claude", "codex", "all"):
            n, at1, at3 = counts.get((kind, fmt), (0, 0, 0))
            if n:
                print(f"{kind:<10}{fmt:<8}{n:>8}{100 * at1 / n:>9.1f}%{100 * at3 / n:>9.1f}%")
    print(f"({elapsed:.1f} s including indexing; {len(misses)} misses; code from "
          f"{Path(context_paging.__file__).parent.parent})", file=sys.stderr)
    if args.show_misses:
        for name, kind, query in misses:
            print(f"MISS {kind:<9} {name}: {query!r}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("CONTEXT_PAGING_HOME", tempfile.mkdtemp(prefix="search-eval-home-"))
    main()
