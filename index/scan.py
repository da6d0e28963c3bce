"""Search of one session answered from memory while the persistent index catches up.

Indexing a session through Whoosh runs at about 1 MB/s of session text, so the first search of a
large session that is not indexed yet would wait seconds to minutes. The model usually searches
exactly then (something just left its window). :class:`MemoryIndex` analyzes the session's items
once, with the analysis the index stores (``index.store.analyze``), into term postings and exact
lengths, and ranks them with the same BM25 and the same per-session statistics as
:meth:`index.store.SearchIndex.search` (``SESSION_STATISTICS``). So the answer is the one the
index gives once it has caught up (tests/test_scan.py checks that), and every later search of the
session, until the index has it, costs a few dictionary look-ups per query term instead of a
pass over the whole text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from context_paging.index.analysis import WHOLE_BOOST, QueryToken, query_tokens
from context_paging.index.store import Hit, IndexDoc, analyze

K1, B = 1.2, 0.75


class MemoryIndex:
    """One session's visible items, analyzed once: postings ``{term: {item: count}}``."""

    def __init__(self, docs: Sequence[IndexDoc]) -> None:
        first: dict[str, IndexDoc] = {}
        for doc in docs:  # a history id that occurs twice is indexed once, as its first
            first.setdefault(doc.history_id, doc)
        self.docs = [d for d in first.values() if not d.hidden]
        self.postings: dict[str, dict[int, int]] = {}
        self.lengths: list[int] = []
        for number, doc in enumerate(self.docs):
            counts, length = doc.analysis or analyze(doc.text)
            self.lengths.append(length)
            for term, n in counts.items():
                self.postings.setdefault(term, {})[number] = n
        self.average = sum(self.lengths) / len(self.docs) if self.docs else 1.0

    def _matches(self, token: QueryToken, number: int) -> bool:
        if number in self.postings.get(token.whole, {}):
            return True
        return bool(token.pairs) and all(number in self.postings.get(p, {}) for p in token.pairs)

    def search(self, query: str, files: Sequence = (), tools: Sequence[str] = (),
               failed: bool | None = None, limit: int = 5, required: Sequence[str] = (),
               excluded: Sequence[str] = ()) -> list[Hit]:
        """The hits :meth:`SearchIndex.search` gives for this session."""
        if limit < 1:
            return []
        keep = [n for n, d in enumerate(self.docs) if _passes(d, files, tools, failed)]
        must = query_tokens(" ".join(required))
        never = query_tokens(" ".join(excluded))
        if must or never:
            keep = [n for n in keep if all(self._matches(t, n) for t in must)
                    and not any(self._matches(t, n) for t in never)]
        if query == "":
            ordered = sorted(keep, key=lambda n: self.docs[n].sequence)[:limit]
            return [_hit(self.docs[n], 0.0) for n in ordered]
        wanted = query_tokens(query)
        if not wanted:
            return []
        items = len(self.docs)
        idf = {}
        for token in wanted:
            for term in token.terms:
                df = len(self.postings.get(term, ()))
                idf[term] = math.log(1 + (items - df + 0.5) / (df + 0.5))
        scored = []
        for number in keep:
            score = self._score(number, wanted, idf)
            if score is not None:
                doc = self.docs[number]
                scored.append((-score, doc.session, doc.sequence, number))
        scored.sort(key=lambda row: row[:3])
        return [_hit(self.docs[n], -s) for s, _, _, n in scored[:limit]]

    def _score(self, number: int, wanted: list[QueryToken], idf: dict[str, float]
               ) -> float | None:
        norm = K1 * (1 - B + B * self.lengths[number] / (self.average or 1.0))
        score, matched = 0.0, False
        for token in wanted:
            whole = self.postings.get(token.whole, {}).get(number, 0)
            pairs_all = token.pairs and all(number in self.postings.get(p, {})
                                            for p in token.pairs)
            if not whole and not pairs_all:
                continue
            matched = True
            if whole:
                boost = WHOLE_BOOST if token.pairs else 1.0
                score += boost * idf[token.whole] * whole * (K1 + 1) / (whole + norm)
            for term in token.pairs if pairs_all else ():
                n = self.postings[term][number]
                score += idf[term] * n * (K1 + 1) / (n + norm)
        return score if matched else None


def _hit(doc: IndexDoc, score: float) -> Hit:
    return Hit(doc.session, doc.history_id, doc.sequence, score)


def scan_search(docs: Sequence[IndexDoc], query: str, files: Sequence = (),
                tools: Sequence[str] = (), failed: bool | None = None,
                limit: int = 5) -> list[Hit]:
    """One search of ``docs`` (all of a session's, hidden ones included, as they would be
    synced) without keeping the :class:`MemoryIndex`."""
    return MemoryIndex(docs).search(query, files, tools, failed, limit)


def _passes(doc: IndexDoc, files: Iterable, tools: Iterable[str], failed: bool | None) -> bool:
    """The filters of :func:`index.analysis.filter_query` (a files entry may be a tuple of
    alternative paths)."""
    return (all(any(f in doc.files for f in ((e,) if isinstance(e, str) else e))
                for e in files)
            and all(t in doc.tools for t in tools)
            and (failed is None or doc.failed == failed))
