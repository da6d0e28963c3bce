"""The first search of a session, answered in memory while the persistent index catches up.

Indexing a session through Whoosh runs at about 1 MB/s of session text, so the first search of a
large session that is not indexed yet would wait seconds to minutes. The model usually searches
exactly then (something just left its window). :func:`scan_search` ranks the session's items
directly, with the same analyzer, the same BM25 and the same per-session statistics as
:meth:`index.store.SearchIndex.search` (``SESSION_STATISTICS``), so the answer is the one the
index gives once it has caught up (tests/test_scan.py checks that).

It does not tokenize everything. For each query term it counts, in each item's lower-cased text,
the occurrences the index would count: a term of one or two words (``needle``, ``paraxial.io``)
is found wherever it stands between non-word characters, which is exactly where it is a token, a
part or a pair (index.analysis); a longer compound only as a whole token. Non-ASCII text is
first made ASCII with the same token boundaries (:func:`_stand_in_bytes`); only a search for a
non-ASCII term analyzes the items that may hold it in full.
BM25 also needs every item's length in tokens, which :func:`index.analysis.token_count` gives
without building them;
those are kept per item and text, so a repeated search while the index is still catching up
does not count again.
"""

from __future__ import annotations

import codecs
import math
import re
from collections.abc import Iterable, MutableMapping, Sequence

import regex
from context_paging.index.analysis import (
    WHOLE_BOOST,
    compound_terms,
    query_tokens,
    term_counts,
    tokens,
)
from context_paging.index.history import HistoryItem, search_text
from context_paging.index.store import Hit, IndexDoc

K1, B = 1.2, 0.75


def _counter(term: str):
    """A function counting ``term``'s occurrences (as the index counts them) in the ASCII
    stand-in of a text (:func:`_stand_in_bytes`)."""
    needle = term.encode("ascii")
    if len(compound_terms(term)[0]) > 2:  # three or more words: only ever a whole token
        return lambda lowered: _whole_count(lowered, needle)
    return lambda lowered: _bounded_count(lowered, needle)


_SEPARATOR = frozenset(b"./:-")


def _whole_count(lowered: bytes, term: bytes) -> int:
    """Occurrences of ``term`` as a whole token: the run of token characters around it is the
    term with at most separators at its edges (which the tokenizer strips)."""
    count, start, size = 0, lowered.find(term), len(term)
    while start >= 0:
        before, after = start - 1, start + size
        while before >= 0 and lowered[before] in _SEPARATOR:
            before -= 1
        while after < len(lowered) and lowered[after] in _SEPARATOR:
            after += 1
        if (before < 0 or lowered[before] not in _WORD) and \
                (after == len(lowered) or lowered[after] not in _WORD):
            count += 1
        start = lowered.find(term, start + size)
    return count


_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_\x80")  # \x80: see _stand_in_bytes


def _bounded_count(lowered: bytes, term: bytes) -> int:
    """Occurrences of ``term`` between non-word characters, overlapping ones included (the
    pairs of ``a.a.a`` are ``a.a`` twice). ``bytes.find`` is a fast literal search; a regex
    with a look-behind is not."""
    count, start, size = 0, lowered.find(term), len(term)
    while start >= 0:
        end = start + size
        if (start == 0 or lowered[start - 1] not in _WORD) and \
                (end == len(lowered) or lowered[end] not in _WORD):
            count += 1
        start = lowered.find(term, start + 1)
    return count


def scan_search(
    docs: Sequence[IndexDoc],
    query: str,
    files: Sequence[str] = (),
    tools: Sequence[str] = (),
    failed: bool | None = None,
    limit: int = 5,
    cache: MutableMapping[tuple[str, int], tuple[int, bytes]] | None = None,
) -> list[Hit]:
    """The hits :meth:`SearchIndex.search` gives for one session's ``docs`` (all of them,
    hidden ones included, as they would be synced).

    ``cache`` keeps each item's length and ASCII stand-in between searches of the same
    session (a repeated search while the index catches up then only looks for its terms)."""
    if limit < 1:
        return []
    wanted_docs = {}
    for doc in docs:  # a history id that occurs twice is indexed once, as its first occurrence
        wanted_docs.setdefault(doc.history_id, doc)
    visible = [d for d in wanted_docs.values() if not d.hidden]
    keep = [d for d in visible if _passes(d, files, tools, failed)]
    if query == "":
        ordered = sorted(keep, key=lambda d: d.sequence)[:limit]
        return [Hit(d.session, d.history_id, d.sequence, 0.0) for d in ordered]
    wanted = query_tokens(query)
    if not wanted:
        return []
    terms = list(dict.fromkeys(t for token in wanted for t in token.terms))
    counters = {t: _counter(t) for t in terms if t.isascii()}
    needles = {t: t.encode("ascii") for t in terms if t.isascii()}
    cache = {} if cache is None else cache
    tf: dict[str, dict[str, int]] = {t: {} for t in terms}
    lengths_by_id: dict[str, int] = {}
    total = 0
    ascii_terms = all(term.isascii() for term in terms)
    for doc in visible:
        key = (doc.history_id, hash(doc.text))  # documents here may carry no fingerprint
        known = cache.get(key)
        if known is None:
            text = _stand_in_bytes(doc.text)
            length = _count(text)
            cache[key] = known = (length, text)
        length, text = known
        lengths_by_id[doc.history_id] = length
        total += length
        full = None
        if not ascii_terms:  # a non-ASCII term: analyze it all, if it can hold the term at all
            lowered = doc.text.lower()
            if not any(term in lowered for term in terms):
                continue
            full = term_counts(doc.text)
        for term in terms:
            if full is not None:
                n = full.get(term, 0)
            elif needles[term] in text:  # a cheap pre-check: most items hold no query term
                n = counters[term](text)
            else:
                n = 0
            if n:
                tf[term][doc.history_id] = n
    if len(cache) > len(visible):  # items whose text changed (a growing turn): drop the old
        current = {(d.history_id, hash(d.text)) for d in visible}
        for stale in [k for k in cache if k not in current]:
            del cache[stale]
    items = len(visible)
    average = total / items if items else 1.0
    idf = {t: math.log(1 + (items - len(tf[t]) + 0.5) / (len(tf[t]) + 0.5)) for t in terms}
    scored = []
    for doc in keep:
        length = lengths_by_id[doc.history_id]
        norm = K1 * (1 - B + B * length / (average or 1.0))
        score = 0.0
        matched = False
        for token in wanted:
            whole = tf[token.whole].get(doc.history_id, 0)
            pairs_all = token.pairs and all(tf[p].get(doc.history_id) for p in token.pairs)
            if not whole and not pairs_all:
                continue
            matched = True
            if whole:
                boost = WHOLE_BOOST if token.pairs else 1.0
                score += boost * idf[token.whole] * whole * (K1 + 1) / (whole + norm)
            for term in token.pairs if pairs_all else ():
                n = tf[term][doc.history_id]
                score += idf[term] * n * (K1 + 1) / (n + norm)
        if matched:
            scored.append((-score, doc.session, doc.sequence, doc))
    scored.sort(key=lambda row: row[:3])
    return [Hit(d.session, d.history_id, d.sequence, -s) for s, _, _, d in scored[:limit]]


# Every item's text is made ASCII bytes with the same token boundaries: lower-cased, each
# non-ASCII letter or digit (what the tokenizer's ``[\p{L}\p{N}]`` matches) as the byte 0x80,
# anything else non-ASCII as a space. 0x80 is a word character here but can be in no query term
# (terms searched this way are ASCII), so a term is found in the stand-in exactly where it is a
# token, part or pair of the original, and _count gives the original's length. A Han character
# where a match begins (after a character that is not a token character, or after another such
# Han character) is a token of its own: it becomes `` \x80 ``. The encoder hands each run of
# non-ASCII characters to _stand_in at once; runs repeat (box drawing, ellipses, words of a
# language), so they are cached with the one fact of context they need. Lower-casing the bytes
# after encoding is far cheaper than ``str.lower`` of non-ASCII text (a run is lower-cased on its
# own: only the final sigma depends on context, and it is a letter either way).
_LETTER = regex.compile(r"[\p{L}\p{N}]")
_HAN = regex.compile(r"\p{Script=Han}")
_TOKEN_ASCII = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:-")
_STAND_INS: dict[tuple[str, bool], bytes] = {}
_STAND_INS_MAX = 1 << 16


def _stand_in(error: UnicodeEncodeError) -> tuple[bytes, int]:
    text, start = error.object, error.start
    run = text[start:error.end]
    in_token = start > 0 and text[start - 1] in _TOKEN_ASCII  # a match began before the run
    replacement = _STAND_INS.get((run, in_token))
    if replacement is None:
        pieces = []
        for c in run.lower():  # lower-casing may give ASCII (the Kelvin sign gives "k")
            if c.isascii():
                pieces.append(c.encode("ascii"))
                in_token = c in _TOKEN_ASCII
            elif _HAN.match(c) and (not in_token or not _LETTER.match(c)):
                pieces.append(b" \x80 ")  # a match begins here: the Han alternative wins
                in_token = False
            elif _LETTER.match(c):
                pieces.append(b"\x80")
                in_token = True
            else:
                pieces.append(b" ")
                in_token = False
        replacement = b"".join(pieces)
        if len(_STAND_INS) < _STAND_INS_MAX:
            _STAND_INS[(run, start > 0 and text[start - 1] in _TOKEN_ASCII)] = replacement
    return replacement, error.end


codecs.register_error("context_paging.scan_stand_in", _stand_in)


def _stand_in_bytes(text: str) -> bytes:
    """``text`` lower-cased as ASCII bytes with the same tokens (see above)."""
    return text.encode("ascii", "context_paging.scan_stand_in").lower()


# _count: word bytes become "a", separators are deleted, the rest become " ", in one C pass
# (index.analysis.token_count's method, with 0x80 a word byte): the tokens are the runs of "a".
_CLASSES = bytes(
    ord("a") if c == 0x80 or chr(c) in "abcdefghijklmnopqrstuvwxyz0123456789_" else ord(" ")
    for c in range(256)
)


def _count(stand_in: bytes) -> int:
    """The number of tokens of the text whose stand-in this is."""
    runs = stand_in.translate(_CLASSES, b"./:-")
    return runs.count(b" a") + runs.startswith(b"a")


# Phrases. BM25 sees a query's tokens one by one, so a pasted error line (``isError:
# event.isError,``) can lose to items that hold its words more often, apart. A one-session
# search therefore takes the best PHRASE_POOL hits and puts first, in their order, those that
# hold the query's tokens next to each other in the query's order (bench/search_eval.py's
# error lines: 18 of 20 in the top 3 without this). Only those few items are tokenized.
PHRASE_POOL = 20


def phrase_pool(query: str, limit: int) -> int:
    """How many hits to rank before :func:`phrase_first` cuts them to ``limit``."""
    return max(limit, PHRASE_POOL) if len(tokens(query)) > 1 else limit


def phrase_first(hits: Sequence[Hit], query: str, items: Iterable[HistoryItem],
                 limit: int) -> list[Hit]:
    """``hits`` with those holding ``query`` as a phrase first (each group in its order), cut
    to ``limit``. A query of one token leaves them as they are."""
    words = tokens(query)
    if len(words) < 2 or len(hits) < 2:
        return list(hits[:limit])
    wanted = {hit.history_id for hit in hits}
    by_id = {item.history_id: item for item in items if item.history_id in wanted}

    # A cheap necessary condition first (a regular expression's literal search): in ASCII
    # text, adjacent tokens have only non-word characters between them. Tokenizing is for the
    # items that pass (20 items of 50 KB take ~50 ms to tokenize).
    between = re.compile("[^a-z0-9_]+".join(re.escape(w) for w in words))

    def holds(hit: Hit) -> bool:
        item = by_id.get(hit.history_id)
        if item is None:
            return False
        text = search_text(item)
        lowered = text.lower()
        if lowered.isascii() and not between.search(lowered):
            return False
        found, size = tokens(text), len(words)
        return any(found[i:i + size] == words for i, t in enumerate(found) if t == words[0])

    first = [hit for hit in hits if holds(hit)]
    rest = [hit for hit in hits if hit not in first]
    return (first + rest)[:limit]


def _passes(doc: IndexDoc, files: Iterable[str], tools: Iterable[str], failed: bool | None) -> bool:
    return (all(f in doc.files for f in files) and all(t in doc.tools for t in tools)
            and (failed is None or doc.failed == failed))
