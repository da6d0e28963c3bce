"""The Whoosh side of the search index: the tokenizer of specs/paging.md §3.1, the field types
and schema that use it, the BM25 scorer of §3.3, and the merge policy.

The tokenizer is upstream's exactly: lower-case, then match ``\\p{Script=Han}|[\\p{L}\\p{N}_./:-]+``
left to right, then strip leading and trailing runs of ``. / : -`` and drop empty tokens. No
stemming, no stop words, so paths and identifiers stay whole (``src/needle.ts``,
``inc-pager-047``). Like the JavaScript regex, a Han character starts a one-character token only
where a match *begins*; inside a run that began with another letter (``abc请``) it stays in the run.

Tokenizing is most of the CPU time of indexing (Whoosh is pure Python), so:

* text that is ASCII after lower-casing (most tool output) takes a stdlib ``re`` pattern that also
  does the stripping, about twice as fast as the general path and equal to it on ASCII;
* :class:`SearchText` counts terms itself and hands Whoosh ``(term, freq, weight, value)``
  tuples, skipping Whoosh's per-token ``Token`` objects.

Measured side by side (5,000 docs x 2 KB of real Pi session text, one commit): Whoosh's ``TEXT``
with its StandardAnalyzer 545 docs/s; the spec tokenizer as a Whoosh ``Tokenizer`` on a
frequency-only field 724 docs/s; ``SearchText`` 754 docs/s, 817 with the ASCII path. The
tokenizer alone: 17 MB/s with ``regex`` only, 26 MB/s with the ASCII path.

:class:`Exact` indexes whole values (one term per value, never tokenized), so file paths and
tool names with spaces, commas or any other character filter exactly. Terms are UTF-8 with
``surrogatepass``: JSON strings may hold lone surrogates, and must neither crash indexing nor
become unfindable.
"""

from __future__ import annotations

import heapq
import math
import re
import weakref
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence

import regex
from whoosh import columns, formats
from whoosh.collectors import TopCollector
from whoosh.fields import STORED, FieldType, Schema
from whoosh.query import And, Or, Prefix, Query, Term
from whoosh.reading import SegmentReader
from whoosh.scoring import BM25F, BM25FScorer
from whoosh.searching import Searcher
from whoosh.system import pack_uint
from whoosh.writing import SegmentWriter

_TOKEN = regex.compile(r"\p{Script=Han}|[\p{L}\p{N}_./:-]+")
# ASCII only: the same maximal runs, with the edge runs of . / : - left outside the group.
_ASCII_TOKEN = re.compile(r"[./:-]*([a-z0-9_](?:[a-z0-9_./:-]*[a-z0-9_])?)")
_EDGES = "./:-"


def tokens(text: str) -> list[str]:
    """The tokens of ``text`` in order, duplicates kept (specs/paging.md §3.1)."""
    lowered = text.lower()
    if lowered.isascii():
        return _ASCII_TOKEN.findall(lowered)
    return [t for t in (m.strip(_EDGES) for m in _TOKEN.findall(lowered)) if t]


def query_terms(query: str) -> list[str]:
    """The distinct tokens of a query, first occurrence first."""
    return list(dict.fromkeys(tokens(query)))


def encode(value: str | bytes) -> bytes:
    """A term as Whoosh stores it (Whoosh also passes terms it already encoded)."""
    if isinstance(value, bytes):
        return value
    return value.encode("utf-8", "surrogatepass")


def decode(value: bytes) -> str:
    return value.decode("utf-8", "surrogatepass")


class SearchText(FieldType):
    """Indexed, scorable (term frequencies and lengths for BM25), never stored."""

    indexed = True
    scorable = True
    stored = False
    unique = False
    vector = None
    analyzer = None

    def __init__(self) -> None:
        self.format = formats.Frequency()

    def index(self, value: str, **kwargs: object) -> list[tuple[bytes, int, float, bytes]]:
        counts = Counter(tokens(value))
        return [(encode(t), n, float(n), pack_uint(n)) for t, n in counts.items()]

    def process_text(self, qstring: str, mode: str = "", **kwargs: object) -> Iterable[str]:
        return query_terms(qstring)

    def to_bytes(self, value: str | bytes) -> bytes:
        return encode(value)

    def from_bytes(self, bs: bytes) -> str:
        return decode(bs)


class Exact(FieldType):
    """Whole values as terms: a string is one term, a list or tuple one term per member.

    Empty strings are not indexed (an unknown project, say, matches no project filter).
    """

    indexed = True
    scorable = False
    vector = None
    analyzer = None

    def __init__(self, *, stored: bool = False, unique: bool = False, sortable: bool = False):
        self.format = formats.Existence()
        self.stored = stored
        self.unique = unique
        self.set_sortable(sortable)

    def index(self, value: str | Iterable[str], **kwargs: object):
        values = (value,) if isinstance(value, str) else value
        return [(encode(v), 1, 1.0, b"") for v in dict.fromkeys(values) if v]

    def process_text(self, qstring: str, mode: str = "", **kwargs: object) -> Iterable[str]:
        return (qstring,)

    def to_bytes(self, value: str | bytes | Sequence[str]) -> bytes:
        if isinstance(value, list | tuple):
            value = value[0]
        return encode(value)

    def from_bytes(self, bs: bytes) -> str:
        return decode(bs)

    def to_column_value(self, value: str) -> bytes:
        return encode(value)

    def from_column_value(self, value: bytes) -> str:
        return decode(value)


class StoredNumber(FieldType):
    """An integer kept as a stored value and as a sort column, not indexed."""

    indexed = False
    stored = True
    scorable = False
    unique = False
    vector = None
    analyzer = None
    format = None

    def __init__(self) -> None:
        self.column_type = columns.NumericColumn("q")

    def to_column_value(self, value: int) -> int:
        return value

    def from_column_value(self, value: int) -> int:
        return value


def project_path(path: str) -> str:
    """A project path without trailing slashes ("/" stays "/")."""
    return path.rstrip("/") or path[:1]


def filter_query(
    sessions: Collection[str] | None,
    project: str | None,
    files: Sequence[str],
    tools: Sequence[str],
    failed: bool | None,
) -> Query | None:
    """The search filters of specs/paging.md §3.4 as one query (None: no filter).

    Every file and tool must be among the item's (whole values); ``project`` matches that
    directory and everything below it.
    """
    parts: list[Query] = []
    if sessions is not None:
        parts.append(Or([Term("session", s) for s in sessions]))
    if project:
        root = project_path(project)
        parts.append(Or([Term("project", root), Prefix("project", root.rstrip("/") + "/")]))
    parts.extend(Term("files", f) for f in dict.fromkeys(files))
    parts.extend(Term("tools", t) for t in dict.fromkeys(tools))
    if failed is not None:
        parts.append(Term("failed", "true" if failed else "false"))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(parts)


class Bm25(BM25F):
    """Okapi BM25 (k1 1.2, b 0.75) with upstream's idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``.

    ``N`` and the average length count the documents whose ``role`` is ``item`` (visible
    items): session documents and hidden turns index no text and must not dilute the average.
    Whoosh's own BM25F uses ``log(N / (df + 1)) + 1`` over every document.
    """

    def __init__(self) -> None:
        super().__init__(B=0.75, K1=1.2)

    def scorer(self, searcher: Searcher, fieldname: str, text: str, qf: int = 1):
        if not searcher.schema[fieldname].scorable:
            return super().scorer(searcher, fieldname, text, qf)
        return _Bm25Scorer(searcher, fieldname, text, self.B, self.K1, qf)



class RankCollector(TopCollector):
    """The best ``limit`` hits by score, ties by session then sequence (specs/paging.md §3.3).

    Whoosh's TopCollector breaks ties by document number and skips blocks that can at best tie
    the last place. Here the skip threshold sits just below the last place's score, so its
    ties stay in play, and they are ordered by the session and sequence columns (read only for
    hits that reach the top).
    """

    def prepare(self, top_searcher, q, context):
        super().prepare(top_searcher, q, context)
        reader = top_searcher.reader()
        if reader.doc_count_all():  # an empty index has no columns (and no hits)
            self._sessions = reader.column_reader("session", translate=True)
            self._sequences = reader.column_reader("sequence", translate=True)

    def _collect(self, global_docnum: int, score: float) -> float:
        items = self.items
        self.total += 1
        if len(items) == self.limit and score < items[0][0]:
            return 0
        place = _Later((self._sessions[global_docnum], self._sequences[global_docnum]))
        entry = (score, place, global_docnum)
        if len(items) < self.limit:
            heapq.heappush(items, entry)
        elif entry > items[0]:
            heapq.heapreplace(items, entry)
        else:
            return 0
        if len(items) == self.limit:
            self.minscore = math.nextafter(items[0][0], -math.inf)
        return 0 - score

    def results(self):
        ranked = sorted(self.items, reverse=True)
        return self._results([(score, docnum) for score, _, docnum in ranked])


class _Later:
    """(session, sequence) ordered backwards: the heap's least entry is the one to drop."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key

    def __lt__(self, other: _Later) -> bool:
        return other.key < self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Later) and self.key == other.key

    __hash__ = None  # type: ignore[assignment]


# (N, average length) per top-level searcher: a scorer is made per segment and term.
_COLLECTION: weakref.WeakKeyDictionary[Searcher, tuple[int, float]] = weakref.WeakKeyDictionary()


class _Bm25Scorer(BM25FScorer):
    def __init__(self, searcher, fieldname, text, B, K1, qf=1):
        parent = searcher.get_parent()
        if parent not in _COLLECTION:
            n = parent.doc_frequency("role", "item") or 1
            _COLLECTION[parent] = (n, parent.field_length(fieldname) / n or 1.0)
        n, self.avgfl = _COLLECTION[parent]
        df = parent.doc_frequency(fieldname, text)
        self.idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        self.B, self.K1, self.qf = B, K1, qf
        self.setup(searcher, fieldname, text)


SCHEMA = Schema(
    key=Exact(unique=True),
    role=Exact(),  # item | hidden | session
    session=Exact(stored=True, sortable=True),
    history_id=STORED(),
    sequence=StoredNumber(),
    file_state=STORED(),
    fingerprints=STORED(),
    project=Exact(),
    tools=Exact(),
    files=Exact(),
    failed=Exact(),
    text=SearchText(),
)


MERGE_FACTOR = 8  # segments of one size tier that are merged together


def merge_tiers(writer: SegmentWriter, segments: list) -> list:
    """Whoosh merge policy: merge the segments of a full size tier, and mostly-deleted ones.

    Tier t holds segments of ``MERGE_FACTOR**t`` up to ``MERGE_FACTOR**(t+1) - 1`` live items;
    a tier with ``MERGE_FACTOR`` segments is merged into the segment being written (Lucene's
    log merge). An item is rewritten about log_F(N) times and at most F-1 segments wait per
    tier. Whoosh's default (MERGE_SMALL) merges every small segment at once, which made a build
    of one commit per session 3x slower than a single commit.
    """
    tiers: dict[int, list] = defaultdict(list)
    merge = []
    for segment in segments:
        live = segment.doc_count()
        if live * 2 < segment.doc_count_all():
            merge.append(segment)
            continue
        tier = 0
        while live >= MERGE_FACTOR:
            live //= MERGE_FACTOR
            tier += 1
        tiers[tier].append(segment)
    keep = []
    for members in tiers.values():
        (merge if len(members) >= MERGE_FACTOR else keep).extend(members)
    for segment in merge:
        reader = SegmentReader(writer.storage, writer.schema, segment)
        writer.add_reader(reader)
        reader.close()
    return keep
