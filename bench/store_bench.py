"""index/search/store.py next to the alternatives it was chosen over, measured in one run.

Documents are 2 KB windows of the real Pi fixtures' search text (plus a unique id and path each),
so vocabulary and token mix are those of real tool output. Prints docs/s and MB/s per variant.

    python bench/store_bench.py [--docs 5000] [--big 0]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import context_paging.index.search.analysis as an
from context_paging.index.history import search_text
from context_paging.index.search import store
from context_paging.index.search.store import IndexDoc, SearchIndex
from context_paging.index.sessions import load
from whoosh import analysis as wa
from whoosh import formats
from whoosh.collectors import TopCollector, UnlimitedCollector
from whoosh.fields import TEXT, FieldType, Schema
from whoosh.query import Or, Term
from whoosh.writing import MERGE_SMALL, NO_MERGE

try:
    from bench.recorded import require, sessions_folder
except ModuleNotFoundError:  # run as a file (python bench/x.py): bench/ itself is on the path
    from recorded import require, sessions_folder

FIXTURES = sessions_folder() / "pi"


def corpus() -> str:
    texts = []
    for path in sorted(require(FIXTURES).glob("*.jsonl")):
        texts += [search_text(i) for i in load(str(path)).projection.items]
    return "\n".join(texts)


CORPUS = corpus()


def make_docs(n: int, session: str = "bench:s", start: int = 0) -> list[IndexDoc]:
    docs = []
    for i in range(start, start + n):
        off = (i * 1777) % (len(CORPUS) - 2048)
        path = f"src/mod{i % 997}/file{i}.py"
        text = CORPUS[off:off + 1990] + f" id-{i:06x} {path}"
        docs.append(IndexDoc(session, f"h{i}", i, "model_turn", "2025-01-01T00:00:00Z", text,
                             ("bash", "read"), (path,), i % 7 == 0, "/work/p"))
    return docs


def megabytes(docs: list[IndexDoc]) -> float:
    return sum(len(d.text.encode()) for d in docs) / 1e6


class Patch:
    """Set module attributes for the duration of a ``with`` block."""

    def __init__(self, module, **values):
        self.module, self.values, self.saved = module, values, {}

    def __enter__(self):
        for k, v in self.values.items():
            self.saved[k] = getattr(self.module, k)
            setattr(self.module, k, v)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            setattr(self.module, k, v)


def fresh_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="store-bench-")) / "index"


REPEAT = 3


def commit_once(docs: list[IndexDoc]) -> tuple[float, float, float]:
    """(wall s, cpu s, MB on disk) of one sync of ``docs`` into a new index."""
    directory = fresh_dir()
    try:
        with SearchIndex(directory) as ix:
            t0, c0 = time.perf_counter(), time.process_time()
            ix.sync("bench:s", docs, {})
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        size = sum(f.stat().st_size for f in directory.iterdir() if f.is_file()) / 1e6
        return wall, cpu, size
    finally:
        shutil.rmtree(directory.parent, ignore_errors=True)


def compare_commits(variants: list[tuple[str, Callable]], docs: list[IndexDoc]) -> None:
    """Each variant REPEAT times, interleaved (the VM is noisy); best wall and cpu time."""
    runs: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in variants}
    for _ in range(REPEAT):
        for label, patch in variants:
            with patch():
                runs[label].append(commit_once(docs))
    mb = megabytes(docs)
    for label, _ in variants:
        wall = min(r[0] for r in runs[label])
        cpu = min(r[1] for r in runs[label])
        size = runs[label][0][2]
        print(f"  {label:46s} {wall:6.1f} s {len(docs)/wall:6.0f} docs/s {mb/wall:5.2f} MB/s"
              f"  (cpu {cpu:5.1f} s)  disk {size:4.1f} MB", flush=True)


class SpecTokenizer(wa.Tokenizer):
    """The spec tokenizer the usual Whoosh way: one Token object per token."""

    def __call__(self, value, positions=False, chars=False, keeporiginal=False,
                 removestops=True, start_pos=0, start_char=0, tokenize=True, mode="", **kw):
        t = wa.Token(positions, chars, removestops=removestops, mode=mode, **kw)
        for i, text in enumerate(an.tokens(value)):
            t.text, t.boost, t.stopped = text, 1.0, False
            if positions:
                t.pos = start_pos + i
            yield t


def with_text(field) -> Schema:
    fields = dict(an.SCHEMA.items())
    fields["text"] = field
    return Schema(**fields)


ORIGINAL_FIELDS = store._fields


def text_as_string(doc):
    """Whoosh analyzers take the text itself, not the token counts store._fields passes."""
    fields = ORIGINAL_FIELDS(doc)
    if "text" in fields:
        fields["text"] = doc.text
    return fields


def regex_only(text: str) -> list[str]:
    return [t for t in (m.strip("./:-") for m in an._TOKEN.findall(text.lower())) if t]


def tiers(factor: int) -> Callable:
    def policy(writer, segments):
        with Patch(an, MERGE_FACTOR=factor):
            return an.merge_tiers(writer, segments)
    return policy


def live_syncs(label: str, base: int, steps: int, policy, reuse: bool = True) -> None:
    directory = fresh_dir()
    try:
        with Patch(store, merge_tiers=policy), SearchIndex(directory) as ix:
            ix.sync("bench:s", make_docs(base), {})
            live: list[IndexDoc] = []
            t0 = time.perf_counter()
            for i in range(steps):
                live += make_docs(1, "bench:live", base + i)
                ix.sync("bench:live", live, {"n": i})
                if not reuse:
                    ix.close()  # drop every segment reader: the next search opens all again
                ix.search("error file", sessions=["bench:live"])
            dt = (time.perf_counter() - t0) / steps
            segments = len(ix._ix._segments())
            t1 = time.perf_counter()
            for _ in range(10):
                ix.search("error file")
            q = (time.perf_counter() - t1) / 10
        print(f"  {label:46s} {dt*1000:6.1f} ms per sync+search, {segments:2d} segments,"
              f" then 'error file' over all {q*1000:5.1f} ms", flush=True)
    finally:
        shutil.rmtree(directory.parent, ignore_errors=True)


def build_per_session(label: str, sessions: int, per: int, policy) -> None:
    directory = fresh_dir()
    batches = [(f"bench:{s}", make_docs(per, f"bench:{s}", s * per), {}) for s in range(sessions)]
    try:
        with Patch(store, merge_tiers=policy), SearchIndex(directory) as ix:
            t0 = time.perf_counter()
            if policy is None:
                ix.sync_many(batches)
            else:
                for session, docs, state in batches:
                    ix.sync(session, docs, state)
            dt = time.perf_counter() - t0
            segments = len(ix._ix._segments())
        n = sessions * per
        print(f"  {label:46s} {dt:6.1f} s {n/dt:6.0f} docs/s, {segments:2d} segments", flush=True)
    finally:
        shutil.rmtree(directory.parent, ignore_errors=True)


def full_scoring(ix: SearchIndex, query: str, limit: int = 5):
    terms = an.query_terms(query)
    q = Or([Term("text", t) for t in terms])
    with ix._reading() as searcher:
        weighting = an.Bm25(ix._corpus(terms))
        collector = UnlimitedCollector()
        searcher.search_with_collector(q, collector, searcher.context(weighting=weighting))
        ranked = [(h.score, h.docnum) for h in collector.results()]
        if len(ranked) > limit:
            floor = ranked[limit - 1][0]
            ranked = [x for x in ranked if x[0] >= floor]
        hits = [store._hit(searcher, d, s) for s, d in ranked]
    hits.sort(key=lambda h: (-h.score, h.session, h.sequence))
    return hits[:limit]


def probe(ix: SearchIndex, query: str, limit: int = 5):
    """Whoosh's top-k with one extra place; everything is scored when a tie crosses the cut."""
    terms = an.query_terms(query)
    q = Or([Term("text", t) for t in terms])
    with ix._reading() as searcher:
        weighting = an.Bm25(ix._corpus(terms))
        collector = TopCollector(limit + 1)
        searcher.search_with_collector(q, collector, searcher.context(weighting=weighting))
        ranked = [(h.score, h.docnum) for h in collector.results()]
        if len(ranked) > limit and ranked[limit][0] == ranked[limit - 1][0]:
            return full_scoring(ix, query, limit)
        hits = [store._hit(searcher, d, s) for s, d in ranked[:limit]]
    hits.sort(key=lambda h: (-h.score, h.session, h.sequence))
    return hits


def session_reads(n: int) -> None:
    """Reading a session's fingerprints: one session document vs one stored document per item."""
    directory = fresh_dir()
    try:
        with SearchIndex(directory) as ix:
            ix.sync("bench:s", make_docs(n), {})
            with ix._reading() as searcher:
                t0 = time.perf_counter()
                store._read_session(searcher, "bench:s")
                one = time.perf_counter() - t0
                t0 = time.perf_counter()
                for docnum in searcher.docs_for_query(Term("session", "bench:s")):
                    searcher.stored_fields(docnum)  # what the first design read per sync
                per_item = time.perf_counter() - t0
        print(f"  fingerprints of a {n}-item session: session document {one*1000:5.1f} ms,"
              f" stored fields of every item {per_item*1000:5.1f} ms")
    finally:
        shutil.rmtree(directory.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--big", type=int, default=0, help="also index this many, final setup")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, big = args.docs, args.big
    global REPEAT
    REPEAT = args.repeat
    docs = make_docs(n)
    mb = megabytes(docs)
    print(f"{n} docs, {mb:.1f} MB of real session text")

    print("tokenizer alone")
    for label, fn in (("regex module only", regex_only), ("ASCII path (re) + regex (chosen)",
                                                           an.tokens)):
        t0 = time.perf_counter()
        for d in docs:
            fn(d.text)
        dt = time.perf_counter() - t0
        print(f"  {label:46s} {dt:6.2f} s {mb/dt:6.1f} MB/s")

    print(f"one sync of all docs (add + commit), best of {REPEAT} interleaved runs")
    frequencies = FieldType(formats.Frequency(), SpecTokenizer(), scorable=True)
    compare_commits([
        ("Whoosh TEXT + StandardAnalyzer",
         lambda: Patch(store, SCHEMA=with_text(TEXT(analyzer=wa.StandardAnalyzer())),
                       _fields=text_as_string)),
        ("TEXT (positions) + spec Tokenizer",
         lambda: Patch(store, SCHEMA=with_text(TEXT(analyzer=SpecTokenizer())),
                       _fields=text_as_string)),
        ("frequencies only + spec Tokenizer (Tokens)",
         lambda: Patch(store, SCHEMA=with_text(frequencies), _fields=text_as_string)),
        ("SearchText.index, regex module only",
         lambda: Patch(store, tokens=regex_only)),
        ("SearchText.index + ASCII path (chosen)", lambda: Patch(store)),
    ], docs)
    compare_commits([
        ("compound=True (chosen)", lambda: Patch(store)),
        ("compound=False (chosen: True)", lambda: Patch(store, COMPOUND=False)),
    ], docs)

    print("queries, limit 5")
    directory = fresh_dir()
    with SearchIndex(directory) as ix:
        ix.sync("bench:s", docs, {})
        for query in ("error file", "id-000123", "the"):
            assert ix.search(query) == full_scoring(ix, query) == probe(ix, query), query
            for label, fn in (("RankCollector (chosen)", ix.search),
                              ("top-k + tie probe, else all", lambda q: probe(ix, q)),
                              ("score every match", lambda q: full_scoring(ix, q))):
                expected = fn(query)
                t0 = time.perf_counter()
                for _ in range(10):
                    assert fn(query) == expected
                dt = (time.perf_counter() - t0) / 10
                print(f"  {query!r:12s} {label:32s} {dt*1000:6.1f} ms")
    shutil.rmtree(directory.parent, ignore_errors=True)
    session_reads(n)

    print(f"a live session: 60 one-item syncs, each followed by a search ({n} docs indexed)")
    live_syncs("merge_tiers F=8 (chosen)", n, 60, tiers(8))
    live_syncs("merge_tiers F=8, fresh readers per commit", n, 60, tiers(8), reuse=False)
    live_syncs("merge_tiers F=4", n, 60, tiers(4))
    live_syncs("Whoosh MERGE_SMALL (default)", n, 60, MERGE_SMALL)
    live_syncs("NO_MERGE", n, 60, NO_MERGE)

    per = n // 40
    print(f"first index of 40 sessions x {per} items")
    build_per_session("sync_many (chosen for bulk)", 40, per, None)
    build_per_session("sync per session, merge_tiers F=8", 40, per, tiers(8))
    build_per_session("sync per session, MERGE_SMALL", 40, per, MERGE_SMALL)
    build_per_session("sync per session, NO_MERGE", 40, per, NO_MERGE)

    if big:
        per = big // 40
        print(f"first index of 40 sessions x {per} items with sync_many ({big} docs)")
        for batch in (5_000, big):
            with Patch(store, BATCH_DOCS=batch):
                build_per_session(f"commit every {batch} docs", 40, per, None)

if __name__ == "__main__":
    main()
