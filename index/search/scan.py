"""Search of one session answered from memory while the persistent index catches up.

Indexing a session through Whoosh runs at about 1 MB/s of session text, so the first search of a
large session that is not indexed yet would wait seconds to minutes. The model usually searches
exactly then (something just left its window). :class:`MemoryIndex` analyzes the session's items
once, with the tokenizer the index uses, into term postings and exact lengths, and ranks them
with the same BM25 and the same per-session statistics as
:meth:`index.search.store.SearchIndex.search` (``SESSION_STATISTICS``). So the answer is the one the
index gives once it has caught up (tests/test_scan.py checks that), and every later search of
the session, until the index has it, costs a few dictionary look-ups per query term instead of
a pass over the whole text.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence

from context_paging.index.search.analysis import (
    WHOLE_BOOST,
    QueryToken,
    bm25_term,
    compound_terms,
    lowered_tokens,
    query_tokens,
    ranked,
    unescaped,
)
from context_paging.index.search.store import Hit, IndexDoc

K1, B = 1.2, 0.75


class MemoryIndex:
    """One session's visible items, tokenized once.

    Postings are kept for whole tokens; a compound token's parts and pairs (which the index
    stores as terms of their own) are found when a query first needs them, by looking the term
    up in the session's compound tokens joined into one string, and kept from then on. That
    halves the build (expanding every compound token of every item took longer than tokenizing)
    and gives each term exactly the count ``index.search.analysis.term_counts`` gives it.
    """

    def __init__(self, docs: Sequence[IndexDoc]) -> None:
        first: dict[str, IndexDoc] = {}
        for doc in docs:  # a history id that occurs twice is indexed once, as its first
            first.setdefault(doc.history_id, doc)
        self.docs = [d for d in first.values() if not d.hidden]
        self.whole: dict[str, dict[int, int]] = {}
        self.lengths: list[int] = []
        for number, doc in enumerate(self.docs):
            words = _tokens(doc.text)
            self.lengths.append(len(words))
            for term, n in Counter(words).items():
                self.whole.setdefault(term, {})[number] = n
        self.average = sum(self.lengths) / len(self.docs) if self.docs else 1.0
        # Every token that is not one word may be compound: postings() asks compound_terms
        # only of those a query term occurs in (asking all of them here took longer than
        # tokenizing the session).
        self._compounds = [t for t in self.whole if not t.isalnum()]
        self._joined = "\n".join(self._compounds)
        self._starts = list(itertools.accumulate((len(t) + 1 for t in self._compounds),
                                                 initial=0))
        self._terms: dict[str, dict[int, int]] = {}

    def postings(self, term: str) -> dict[int, int]:
        """``{item: count}`` of ``term`` as the index counts it (whole, part or pair)."""
        found = self._terms.get(term)
        if found is None:
            found = dict(self.whole.get(term, {}))
            for compound in self._holding(term):
                parts, pairs = compound_terms(compound)
                times = (*parts, *pairs).count(term)
                for number, n in self.whole[compound].items() if times else ():
                    found[number] = found.get(number, 0) + times * n
            self._terms[term] = found
        return found

    def _holding(self, term: str) -> set[str]:
        """The compound tokens ``term`` occurs in (as text: the caller counts its parts)."""
        held, joined, at = set(), self._joined, self._joined.find(term)
        while at >= 0:
            index = bisect.bisect_right(self._starts, at) - 1
            held.add(self._compounds[index])
            at = joined.find(term, self._starts[index + 1] if index + 1 < len(self._starts)
                             else len(joined))
        return held

    def _matches(self, token: QueryToken, number: int) -> bool:
        if number in self.postings(token.whole):
            return True
        return bool(token.pairs) and all(number in self.postings(p) for p in token.pairs)

    def search(self, query: str, files: Sequence = (), tools: Sequence[str] = (),
               failed: bool | None = None, limit: int = 5, required: Sequence[str] = (),
               excluded: Sequence[str] = ()) -> list[Hit]:
        """The hits :meth:`SearchIndex.search` gives for this session."""
        if limit < 1:
            return []
        wanted = query_tokens(query)
        if query != "" and not wanted:
            return []
        # Only items holding a query term can score: the rest are never looked at.
        candidates: Iterable[int] = range(len(self.docs)) if query == "" else sorted(
            {n for token in wanted for n in self.postings(token.whole)}
            | {n for token in wanted if token.pairs
               for n in set.intersection(*(set(self.postings(p)) for p in token.pairs))})
        must = query_tokens(" ".join(required))
        never = query_tokens(" ".join(excluded))
        keep = [n for n in candidates if _passes(self.docs[n], files, tools, failed)
                and all(self._matches(t, n) for t in must)
                and not any(self._matches(t, n) for t in never)]
        if query == "":
            ordered = sorted(keep, key=lambda n: self.docs[n].sequence)[:limit]
            return [_hit(self.docs[n], 0.0) for n in ordered]
        items = len(self.docs)
        idf = {}
        for token in wanted:
            for term in token.terms:
                df = len(self.postings(term))
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
        length, average = self.lengths[number], self.average or 1.0
        score, matched = 0.0, False
        for token in wanted:
            whole = self.postings(token.whole).get(number, 0)
            pairs_all = token.pairs and all(number in self.postings(p) for p in token.pairs)
            if not whole and not pairs_all:
                continue
            matched = True
            if whole:
                boost = WHOLE_BOOST if token.pairs else 1.0
                score += bm25_term(idf[token.whole], whole, length, average, K1, B) * boost
            for term in token.pairs if pairs_all else ():
                n = self.postings(term)[number]
                score += bm25_term(idf[term], n, length, average, K1, B)
        return ranked(score) if matched else None


# ASCII text is tokenized by translating every character that cannot be in a token to a space
# and splitting: the runs are the tokenizer's matches before their edge separators are stripped
# (index.search.analysis.tokens), in under half the time of its regular expression.
_EDGES = "./:-"
_APART = {c: 32 for c in range(128)
           if chr(c) not in "abcdefghijklmnopqrstuvwxyz0123456789_" + _EDGES}


def _tokens(text: str) -> list[str]:
    """The tokens of ``text`` (``index.search.analysis.tokens``), not in their order: the ASCII
    lines first, by translation, then the others by the tokenizer. No token spans a line, and the
    index keeps counts, not order, so the memory index needs no more."""
    lowered = unescaped(text).lower()
    if lowered.isascii():
        return _ascii_tokens(lowered)
    lines = lowered.split("\n")
    plain = [line for line in lines if line.isascii()]
    if not plain:
        return lowered_tokens(lowered)
    other = "\n".join(line for line in lines if not line.isascii())
    return _ascii_tokens("\n".join(plain)) + lowered_tokens(other)


def _ascii_tokens(lowered: str) -> list[str]:
    out = []
    for word in lowered.translate(_APART).split():
        if word[0] in _EDGES or word[-1] in _EDGES:
            word = word.strip(_EDGES)
            if not word:
                continue
        out.append(word)
    return out


def _hit(doc: IndexDoc, score: float) -> Hit:
    return Hit(doc.session, doc.history_id, doc.sequence, score)


def scan_search(docs: Sequence[IndexDoc], query: str, files: Sequence = (),
                tools: Sequence[str] = (), failed: bool | None = None,
                limit: int = 5) -> list[Hit]:
    """One search of ``docs`` (all of a session's, hidden ones included, as they would be
    synced) without keeping the :class:`MemoryIndex`."""
    return MemoryIndex(docs).search(query, files, tools, failed, limit)


def _passes(doc: IndexDoc, files: Iterable, tools: Iterable[str], failed: bool | None) -> bool:
    """The filters of :func:`index.search.analysis.filter_query` (a files entry may be a tuple of
    alternative paths)."""
    return (all(any(f in doc.files for f in ((e,) if isinstance(e, str) else e))
                for e in files)
            and all(t in doc.tools for t in tools)
            and (failed is None or doc.failed == failed))
