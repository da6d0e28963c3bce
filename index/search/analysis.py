"""The Whoosh side of the search index: the tokenizer, the field types and schema that use it,
the filters, BM25 ranking and the merge policy (docs/search.md, "What you can type", "Ranking",
"Filters").

The tokenizer is upstream's exactly: lower-case, then match ``\\p{Script=Han}|[\\p{L}\\p{N}_./:-]+``
left to right, then strip leading and trailing runs of ``. / : -`` and drop empty tokens. No
stemming, no stop words, so paths and identifiers stay whole (``src/needle.ts``,
``inc-pager-047``). Like the JavaScript regex, a Han character starts a one-character token only
where a match *begins*; inside a run that began with another letter (``abc请``) it stays in the run.

Indexing is pure Python, so the analyzer is kept cheap:

* text that is ASCII after lower-casing (most tool output) takes a stdlib ``re`` pattern that also
  does the stripping (25 MB/s, against 17 MB/s for the ``regex`` path it equals on ASCII);
* :class:`SearchText` counts terms itself and hands Whoosh ``(term, freq, weight, value)``
  tuples: no per-token ``Token`` objects, no positions.

One commit of 4,000 real 2 KB items (three runs on a noisy 2-core VM): Whoosh ``TEXT`` with its
StandardAnalyzer 453-554 docs/s, ``SearchText`` 600-825 docs/s. The ASCII path tokenizes 1.4-1.6x
faster than the ``regex`` path, a few percent of the whole.

:class:`Exact` indexes whole values (one term per value, never tokenized), so file paths and
tool names with spaces, commas or any other character filter exactly. Terms are UTF-8 with
``surrogatepass``: JSON strings may hold lone surrogates, and must neither crash indexing nor
become unfindable.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import regex
from whoosh import columns, formats
from whoosh.collectors import TopCollector
from whoosh.fields import STORED, FieldType, Schema
from whoosh.query import And, Not, Or, Prefix, Query, Term
from whoosh.reading import IndexReader, SegmentReader
from whoosh.scoring import BM25F, BM25FScorer
from whoosh.searching import Searcher
from whoosh.system import pack_uint
from whoosh.util.numeric import byte_to_length, length_to_byte
from whoosh.writing import SegmentWriter

_TOKEN = regex.compile(r"\p{Script=Han}|[\p{L}\p{N}_./:-]+")
# ASCII only: the same maximal runs without their edge runs of . / : -, written so that nothing
# backtracks over a long run (``tokens=128.......`` padded log lines took O(run²) with the
# earlier ``[./:-]*([a-z0-9_](?:[a-z0-9_./:-]*[a-z0-9_])?)``: 17 s for upstream's 15 MiB bench).
_ASCII_TOKEN = re.compile(r"[a-z0-9_]+(?:[./:-]+[a-z0-9_]+)*")
_EDGES = "./:-"


# Escapes written as text (JSON, a shell's ``$'…'``, code printing a string) separate words: the
# letter of ``\n``, ``\t`` or ``\r`` before anything but a lower-case letter, and ``\uXXXX``,
# are blanked before tokenizing, so ``\nMARKER-0003`` is ``marker-0003`` (not ``nmarker-0003``)
# and ``a\t2`` is ``a``, ``2``. Before a lower-case letter the backslash alone separates, as any
# backslash does: ``\newcommand``, ``\textbf`` and ``\right`` keep their names (a LaTeX
# command, a Windows path). Read on the text as written, before lower-casing (``\nM`` is an
# escape, ``\nm`` a name); the blanks keep every offset, so shown lines mark the right place.
_ESCAPE = re.compile(r"\\(?:[ntr](?![a-z])|u[0-9A-Fa-f]{4})")


def unescaped(text: str) -> str:
    """``text`` with its written escapes blanked (same length): what the tokenizer reads."""
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: " " * len(m.group(0)), text)


def tokens(text: str) -> list[str]:
    """The tokens of ``text`` in order, duplicates kept."""
    return lowered_tokens(unescaped(text).lower())


def lowered_tokens(lowered: str) -> list[str]:
    """:func:`tokens` of a text already unescaped and lower-cased."""
    if lowered.isascii():
        return _ASCII_TOKEN.findall(lowered)
    return [t for t in (m.strip(_EDGES) for m in _TOKEN.findall(lowered)) if t]


# token_count: word characters become "a", separators are deleted, the rest become " ", in one
# C pass. Deleting the separators joins each token into one run of "a"s (a run of separators
# alone vanishes), so the tokens are the runs of "a": far faster than counting ``findall``.
_CLASSES = bytes(
    ord("a") if chr(c).isascii() and (chr(c).isalnum() or chr(c) == "_") and not chr(c).isupper()
    else ord(" ")
    for c in range(256)
)


def token_count(lowered: str) -> int:
    """``len(tokens(lowered))`` for lower-case ASCII text, without building the tokens."""
    runs = lowered.encode("ascii").translate(_CLASSES, b"./:-")
    return runs.count(b" a") + runs.startswith(b"a")


def query_terms(query: str) -> list[str]:
    """The distinct tokens of a query, first occurrence first."""
    return list(dict.fromkeys(tokens(query)))


# Compound words (docs/search.md, "What you can type"). A whole token such as
# ``src/components/modal.tsx``, ``psycopg2.errors.deadlockdetected``, ``https://paraxial.io/blog``
# or a uuid is indexed whole, and also as its parts (split at runs of ``. / : -``) and its *pairs*:
# two adjacent parts with the separator between them (``components/modal``, ``modal.tsx``,
# ``paraxial.io``). So
#
# * one part (``deadlockdetected``, ``e0918a8b1ffb``) matches its term;
# * a two-part query token (``paraxial.io``, ``modal.tsx``) is itself a pair: one term;
# * a longer one (``components/modal.tsx``) matches the whole term, or every one of its pairs.
#
# Pairs keep the separator, so upstream's rule holds: ``inc-pager-047`` does not find
# ``inc/pager/047``. An item holding the query whole also holds its pairs, and scores for both: it
# ranks first. ``_`` and camelCase stay inside a part: splitting them was measured
# (bench/search_eval.py; docs/performance-history.md, "Search recall and speed") and is off
# (SPLIT_UNDERSCORE).
SPLIT_UNDERSCORE = False
_SEPARATORS = re.compile(r"([./:_-]+)" if SPLIT_UNDERSCORE else r"([./:-]+)")


def compound_terms(token: str) -> tuple[list[str], list[str]]:
    """(parts, pairs) of a lower-case token; both empty when it is not compound. Pairs are
    listed only for three or more parts (two parts make one pair: the token itself)."""
    if token.isalnum():
        return [], []
    pieces = _SEPARATORS.split(token)
    if len(pieces) < 3 or not pieces[0] or not pieces[-1]:
        return [], []
    words = pieces[0::2]
    if len(words) == 2:
        return words, []
    pairs = [words[i] + pieces[2 * i + 1] + words[i + 1] for i in range(len(words) - 1)]
    return words, pairs


def term_counts(text: str | list[str]) -> Counter:
    """What an item is indexed under: its tokens, and the parts and pairs of compound ones.

    BM25's length of an item stays its number of tokens (``len(tokens(text))``, upstream's):
    parts and pairs are extra ways in, not extra words, so a path-heavy item is not pushed down.
    """
    counts = Counter(tokens(text) if isinstance(text, str) else text)
    for token, n in list(counts.items()):
        if not token.isalnum():
            words, pairs = compound_terms(token)
            for term in (*words, *pairs):
                counts[term] += n
    return counts


@dataclass(frozen=True, slots=True)
class QueryToken:
    """One distinct query token: it matches its whole term, or all of its ``pairs``."""

    whole: str
    pairs: tuple[str, ...] = ()

    @property
    def terms(self) -> tuple[str, ...]:
        return (self.whole, *self.pairs)


def query_tokens(query: str) -> list[QueryToken]:
    """The distinct tokens of a query with their pairs, first occurrence first."""
    return [QueryToken(t, tuple(dict.fromkeys(compound_terms(t)[1]))) for t in query_terms(query)]


# A query of three or more parts found whole weighs this much more than the same words found
# as pairs of a longer path: ``tui/test/test-themes.ts`` typed out should find the turn that
# printed exactly that before long outputs that mention ``packages/tui/test/test-themes.ts``
# (tests/test_search_quality.py; 1.0 left two such picks in 4th place).
WHOLE_BOOST = 2.0


def token_query(token: QueryToken, field: str = "text") -> Query:
    if not token.pairs:
        return Term(field, token.whole)
    whole = Term(field, token.whole, boost=WHOLE_BOOST)
    return Or([whole, And([Term(field, p) for p in token.pairs])])


def encode(value: str | bytes) -> bytes:
    """A term as Whoosh stores it (Whoosh also passes terms it already encoded)."""
    if isinstance(value, bytes):
        return value
    return value.encode("utf-8", "surrogatepass")


def decode(value: bytes) -> str:
    return value.decode("utf-8", "surrogatepass")


class SearchText(FieldType):
    """Indexed, scorable (term frequencies and lengths for BM25), never stored.

    The value is the text, or its ``Counter`` of tokens when the caller needs the exact length
    too (Whoosh keeps lengths as one byte, 11 tokens read back as 12; see :class:`Bm25`).
    """

    indexed = True
    scorable = True
    stored = False
    unique = False
    vector = None
    analyzer = None

    def __init__(self) -> None:
        self.format = formats.Frequency()

    def index(self, value: str | Counter, **kwargs: object) -> list[tuple]:
        counts = value if isinstance(value, Counter) else term_counts(value)
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


class Number(FieldType):
    """An integer kept as a column (for sorting and scoring), optionally stored; not indexed."""

    indexed = False
    scorable = False
    unique = False
    vector = None
    analyzer = None
    format = None

    def __init__(self, *, stored: bool = False) -> None:
        self.stored = stored
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
    *extra: Query | None,
) -> Query | None:
    """The search's restrictions as one query (None: none): these sessions, this project or
    below it, and the filters of docs/search.md, "Filters" (every file and tool among the item's,
    whole values; ``failed`` equal). A ``files`` entry may be a tuple of alternative paths
    (the recorded paths a suffix stands for). ``extra``: more restrictions (the query's
    required and excluded words)."""
    parts: list[Query] = []
    if sessions is not None:
        parts.append(Or([Term("session", s) for s in sessions]))
    if project:
        root = project_path(project)
        parts.append(Or([Term("project", root), Prefix("project", root.rstrip("/") + "/")]))
    for entry in dict.fromkeys(files):
        alternatives = (entry,) if isinstance(entry, str) else entry
        parts.append(Or([Term("files", f) for f in alternatives]))
    parts.extend(Term("tools", t) for t in dict.fromkeys(tools))
    if failed is not None:
        parts.append(Term("failed", "true" if failed else "false"))
    parts.extend(q for q in extra if q is not None)
    return _all(parts)


def required_query(words: Sequence[str]) -> Query | None:
    """Items holding every one of ``words`` (each as a query token: whole, or all its pairs)."""
    return _all([token_query(t) for t in query_tokens(" ".join(words))])


def excluded_query(words: Sequence[str]) -> Query | None:
    """Items holding none of ``words``."""
    found = [token_query(t) for t in query_tokens(" ".join(words))]
    return Not(found[0] if len(found) == 1 else Or(found)) if found else None


def _all(parts: list[Query]) -> Query | None:
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(parts)


@dataclass(frozen=True, slots=True)
class Corpus:
    """BM25's collection statistics: visible items, their average length, document frequencies
    of the query terms (encoded, as Whoosh hands them to the scorer)."""

    items: int
    average_length: float
    frequencies: Mapping[bytes, int]


def segment_totals(reader: IndexReader) -> tuple[int, int]:
    """(live visible items, their total exact length) of one segment."""
    if ("role", "item") not in reader:
        return 0, 0
    ids = list(reader.postings("role", "item").all_ids())  # deleted documents excluded
    lengths = reader.column_reader("length", translate=False)
    return len(ids), sum(lengths[i] for i in ids)


def segment_frequency(reader: IndexReader, term: str, among: frozenset[int] | None = None) -> int:
    """Live items of one segment that contain ``term`` (and are ``among`` these, if given)."""
    if ("text", term) not in reader:
        return 0
    ids = reader.postings("text", term).all_ids()
    if among is not None:
        return sum(1 for i in ids if i in among)
    return sum(1 for _ in ids)


def session_items(reader: IndexReader, session: str) -> tuple[frozenset[int], int]:
    """(live visible items of ``session`` in one segment, their total exact length)."""
    if ("role", "item") not in reader or ("session", session) not in reader:
        return frozenset(), 0
    visible = set(reader.postings("role", "item").all_ids())
    ids = frozenset(i for i in reader.postings("session", session).all_ids() if i in visible)
    lengths = reader.column_reader("length", translate=False)
    return ids, sum(lengths[i] for i in ids)


class Bm25(BM25F):
    """Okapi BM25 (k1 1.2, b 0.75) with upstream's idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``
    over a :class:`Corpus` and exact lengths.

    The statistics are the session's for a one-session search (upstream's) and every indexed
    item's (live, visible) otherwise (index.search.store.SESSION_STATISTICS). On the distinctive
    details that tests/test_search_quality.py picks from
    the fixtures as of 086db79 (222, any line mentioning an error included), the source turn
    was in the top 3 for 220 with these statistics, 217 with per-session ones, 219 with
    Whoosh's idf ``log(N / (df + 1)) + 1``; its current picks (181) all three find.
    """

    def __init__(self, corpus: Corpus) -> None:
        super().__init__(B=0.75, K1=1.2)
        self.corpus = corpus

    def scorer(self, searcher: Searcher, fieldname: str, text: bytes, qf: int = 1):
        if not searcher.schema[fieldname].scorable:
            return super().scorer(searcher, fieldname, text, qf)
        return _Bm25Scorer(searcher, fieldname, text, self, qf)


class _Bm25Scorer(BM25FScorer):
    """Scores with the exact ``length`` column. Whoosh's block-skipping bounds use its one-byte
    lengths, rounded up; they are taken at the bottom of their byte's range to stay bounds."""

    def __init__(self, searcher: Searcher, fieldname: str, text: bytes, model: Bm25, qf: int):
        corpus = model.corpus
        n, df = corpus.items, corpus.frequencies.get(encode(text), 0)
        self.idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        self.avgfl = corpus.average_length or 1.0
        self.B, self.K1, self.qf = model.B, model.K1, qf
        self.setup(searcher, fieldname, text)
        self.dfl = searcher.reader().column_reader("length", translate=False).__getitem__
        info = searcher.term_info(fieldname, text)
        self._maxquality = self._score(info.max_weight(), _shortest(info.min_length()))

    def block_quality(self, matcher) -> float:
        return self._score(matcher.block_max_weight(), _shortest(matcher.block_min_length()))


def _shortest(length: int) -> int:
    """The least exact length that Whoosh stores as ``length``'s byte."""
    code = length_to_byte(length)
    return byte_to_length(code - 1) + 1 if code else 0


# Scores are compared rounded to this many decimals, here and in index.search.scan. Two items
# can score the same real number (BM25 of 3 hits in 13 tokens equals 2 hits in 8 when the
# average length is 6), and the index and the in-memory search add the same terms in other
# orders: unrounded, one ulp decided such a tie, and the two rankers broke it differently.
SCORE_DIGITS = 9


def ranked(score: float) -> float:
    """A score as hits are ordered and reported by."""
    return round(score, SCORE_DIGITS)


def bm25_term(idf: float, tf: float, length: float, average: float, k1: float, b: float
              ) -> float:
    """One term's BM25 score, in Whoosh's order of operations (``whoosh.scoring.bm25``)."""
    return idf * ((tf * (k1 + 1)) / (tf + k1 * ((1 - b) + b * length / average)))


class RankCollector(TopCollector):
    """The best ``limit`` hits by score, ties by session then sequence
    (docs/search.md, "Ranking").

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
        score = ranked(score)
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
        if len(items) == self.limit:  # anything that may round to the last place stays in play
            self.minscore = items[0][0] - 10.0 ** -SCORE_DIGITS
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


# What the queries (index.search.store, index.search.reply) read, and why:
# * text: term frequencies for BM25 and the required/excluded words. No positions: a phrase is
#   checked on the candidates' own text (index.search.query), so the index need not store them.
# * length: each item's exact token count, BM25's length normalization.
# * session (sortable): restricts a search to one session, orders ties, and counts the sessions
#   a project search covers (scope_size); role: which documents are visible items.
# * files: whole recorded paths; its lexicon is what a ``files`` suffix or name is matched
#   against (SearchIndex.file_paths), so paths must stay whole terms.
# * project, tools, failed: the filters.
SCHEMA = Schema(
    key=Exact(unique=True),
    role=Exact(),  # item | hidden | session
    session=Exact(stored=True, sortable=True),
    history_id=STORED(),
    sequence=Number(stored=True),
    length=Number(),  # exact token count of the text
    file_state=STORED(),
    fingerprints=STORED(),
    project=Exact(),
    tools=Exact(),
    files=Exact(),
    failed=Exact(),
    text=SearchText(),
)


MERGE_FACTOR = 8  # segments of one size tier that are merged together
# No merge rewrites more live items than this: a merge runs inside a sync, holding the writer
# lock (about 1.3 s per 1,000 items), and other processes wait at most their lock timeout.
MERGE_MAX_DOCS = 10_000


def merge_tiers(writer: SegmentWriter, segments: list) -> list:
    """Whoosh merge policy: merge the segments of a full size tier, and mostly-deleted ones.

    Tier t holds segments of ``MERGE_FACTOR**t`` up to ``MERGE_FACTOR**(t+1) - 1`` live items;
    ``MERGE_FACTOR`` segments of one tier are merged into the segment being written (Lucene's
    log merge), so an item is rewritten about log_F(N) times and at most F-1 segments wait per
    tier. Segments past ``MERGE_MAX_DOCS`` stay as they are. Whoosh's default (MERGE_SMALL)
    merges every small segment at once: 40 one-session commits ran 10-40% slower with it, and a
    live session's one-item syncs 25-60% slower (NO_MERGE: 61 segments after 60 syncs, and
    searches over everything 2.5x slower).
    """
    tiers: dict[int, list] = defaultdict(list)
    merge = []
    for segment in segments:
        live = segment.doc_count()
        if live * 2 < segment.doc_count_all() and live <= MERGE_MAX_DOCS:
            merge.append(segment)
            continue
        tier = 0
        while live >= MERGE_FACTOR:
            live //= MERGE_FACTOR
            tier += 1
        tiers[tier].append(segment)
    for members in tiers.values():
        members.sort(key=lambda segment: segment.doc_count())
        group = members[:MERGE_FACTOR]
        if len(group) == MERGE_FACTOR and sum(s.doc_count() for s in group) <= MERGE_MAX_DOCS:
            merge.extend(group)
    for segment in merge:
        reader = SegmentReader(writer.storage, writer.schema, segment)
        writer.add_reader(reader)
        reader.close()
    return [segment for segment in segments if segment not in merge]
