"""The persistent search index: the history items of every session in one Whoosh index.

Documents (one Whoosh index named ``cp1`` in the directory the caller gives):

* one per history item, keyed ``i\\0<session>\\0<history_id>``. Stored: session, history id and
  sequence, what a :class:`Hit` needs (the text is indexed, not stored: the session files hold
  it). Indexed: the search text (:mod:`index.search.analysis`), and tools, files, failed and
  project as exact terms. A recovery-tool turn is a *hidden* document: none of its text or metadata
  is indexed, so no query can return it.
* one per session, keyed ``s\\0<session>``, storing the caller's ``file_state`` (path, size,
  mtime, head hash …) and the ``{history_id: fingerprint}`` of every item. It is rewritten in
  the same commit as the items, so it always describes what is stored, and a sync reads one
  document instead of one per item.

Sync is incremental per session: a file is known by a cheap identity (size, mtime, inode,
first-line hash; docs/architecture.md), a pure :func:`plan_sync` compares the stored
fingerprints with the given documents, and the plan is applied in one writer transaction (a
:class:`~index.search.writer.TermWriter`: Whoosh's segments, written faster).
Nothing to do means no writer at all.

Concurrency and crashes (docs/reliability.md, "The rules"). Whoosh commits by writing new segment
files and then renaming a new table of contents into place, so readers never block and a process
killed mid-commit leaves the previous generation intact; the next open or commit removes the
leftovers.
The writer lock is an OS file lock (released when its holder dies), waited on for at most
``lock_timeout`` seconds, then :class:`IndexBusy`. The plan is recomputed under the lock, so two
processes syncing at once lose nothing. An index that cannot be opened or fails the sanity check
is moved aside to ``<dir>.broken-<timestamp>`` and replaced by an empty one: the data is derived,
and the caller re-syncs because the file states went with it.

Ranking (index.search.analysis.Bm25, RankCollector): BM25 with upstream's idf and exact lengths (in
tokens), ties by session then sequence, filters applied while matching. A search of one session
takes that session's statistics, as upstream did (SESSION_STATISTICS; bench/search_eval.py
measured it level with index-wide statistics on the fixtures, and it is what index.search.scan
computes for a session that is not indexed yet); wider searches take every live visible item's.
Required and excluded words (index.search.query) restrict the matching without changing a score; a
quoted phrase is checked afterwards, on the text of the best candidates (index.search.reply). """

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import random
import re
import shutil
import threading
import time
import warnings
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import whoosh.util
from context_paging.index.history import HistoryItem, search_text
from context_paging.index.search.analysis import (
    SCHEMA,
    Bm25,
    Corpus,
    RankCollector,
    decode,
    encode,
    excluded_query,
    filter_query,
    merge_tiers,
    project_path,
    query_tokens,
    required_query,
    segment_frequency,
    segment_totals,
    session_items,
    term_counts,
    token_query,
    tokens,
)
from context_paging.index.search.writer import TermWriter
from whoosh.filedb.filestore import FileStorage
from whoosh.index import TOC, EmptyIndexError, FileIndex, LockError, clean_files
from whoosh.query import And, Or, Query, Require, Term
from whoosh.reading import EmptyReader, MultiReader, SegmentReader
from whoosh.searching import Searcher
from whoosh.util.filelock import try_for
from whoosh.writing import SegmentWriter

log = logging.getLogger("context_paging")
# Whoosh names its segment and temporary files with the global ``random`` module. Indexing runs
# in a background thread too (index.service), where that would move the host's global random
# state under it (a seeded host would see another sequence): Whoosh gets a generator of its own.
whoosh.util.random = random.Random()

INDEX_NAME = "cp1"  # Whoosh's index name: change it with the schema
LOCK_POLL = 0.05  # seconds between attempts on the writer lock
COMPOUND = True  # one file per segment: fewer open files (compound=False measured no faster)
# sync_many commits after this many written items, or after this many seconds of holding the
# writer lock. The segment's postings are held in memory until its commit (index.search.writer), so
# this also bounds the writer's memory.
BATCH_DOCS = 5_000
# BM25 statistics of a one-session search: that session's items (upstream's choice, and what
# the in-memory first search of index.search.scan computes), or every indexed item (False). Measured
# with bench/search_eval.py; see docs/performance-history.md, "Search recall and speed".
SESSION_STATISTICS = True
BATCH_SECONDS = 10.0
_TOC_TEMP = re.compile(rf"^_{INDEX_NAME}_\d+\.toc\.")


class IndexBusy(RuntimeError):
    """Another process held the index's writer lock for longer than ``lock_timeout``."""

    code = "INDEX_BUSY"


@dataclass(frozen=True, slots=True)
class IndexDoc:
    """One history item as the index sees it. The fingerprint is derived when not given."""

    session: str
    history_id: str
    sequence: int
    kind: str  # "user" | "model_turn"
    timestamp: str
    text: str
    tools: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    failed: bool = False
    project: str = ""  # the session's working directory, "" if unknown
    hidden: bool = False  # a recovery-tool turn: stored, never found
    fingerprint: str = ""
    # (term counts, length) when analyzed ahead, e.g. by a worker process of index_all
    analysis: tuple[Counter, int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", fingerprint(self))


def analyze(text: str) -> tuple[Counter, int]:
    """(what the item is indexed under, its BM25 length: its number of tokens)."""
    words = tokens(text)
    return term_counts(words), len(words)


def analyzed(doc: IndexDoc) -> IndexDoc:
    """``doc`` with its analysis done and its text dropped (the index does not store text):
    what a worker process sends back, small and ready to write."""
    if doc.hidden:
        return replace(doc, text="")
    return replace(doc, text="", analysis=analyze(doc.text))


def fingerprint(doc: IndexDoc) -> str:
    """A digest of everything the index keeps of ``doc``: a change means a rewrite."""
    value = [doc.sequence, doc.kind, doc.timestamp, doc.project, doc.failed, doc.hidden,
             doc.tools, doc.files, doc.text]
    data = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def doc_for(session: str, project: str, item: HistoryItem, fingerprint: str = "") -> IndexDoc:
    """The document of one item. ``fingerprint="-"`` skips the digest (a JSON dump of the
    whole text): for a document that is only scanned in memory, never synced."""
    return IndexDoc(
        session=session,
        history_id=item.history_id,
        sequence=item.sequence,
        kind=item.kind,
        timestamp=item.timestamp,
        text=search_text(item),
        tools=item.tools,
        files=item.files,
        failed=item.failed,
        project=project or "",
        hidden=item.is_recovery_turn,
        fingerprint=fingerprint,
    )


@dataclass(frozen=True, slots=True)
class Hit:
    session: str
    history_id: str
    sequence: int
    score: float


@dataclass(frozen=True, slots=True)
class SyncResult:
    added: int
    updated: int
    removed: int


@dataclass(frozen=True, slots=True)
class SyncPlan:
    add: tuple[IndexDoc, ...]
    update: tuple[IndexDoc, ...]
    remove: tuple[str, ...]  # history ids

    @property
    def empty(self) -> bool:
        return not (self.add or self.update or self.remove)

    def fingerprints(self, stored: Mapping[str, str]) -> dict[str, str]:
        """The ``{history_id: fingerprint}`` that holds once the plan is applied."""
        removed = set(self.remove)
        after = {h: fp for h, fp in stored.items() if h not in removed}
        after.update((d.history_id, d.fingerprint) for d in (*self.add, *self.update))
        return after


def plan_sync(stored: Mapping[str, str], docs: Sequence[IndexDoc]) -> SyncPlan:
    """What turns the stored ``{history_id: fingerprint}`` of a session into ``docs``.

    Items missing from ``docs`` are removed (the session was rewritten or rolled back). A
    history id that occurs twice in ``docs`` is indexed once, as its first occurrence (the
    navigator resolves ids the same way).
    """
    wanted: dict[str, IndexDoc] = {}
    for doc in docs:
        wanted.setdefault(doc.history_id, doc)
    return SyncPlan(
        add=tuple(d for h, d in wanted.items() if h not in stored),
        update=tuple(d for h, d in wanted.items() if h in stored and stored[h] != d.fingerprint),
        remove=tuple(h for h in stored if h not in wanted),
    )


def _item_key(session: str, history_id: str) -> str:
    return f"i\0{session}\0{history_id}"


def _session_key(session: str) -> str:
    return f"s\0{session}"


def _fields(doc: IndexDoc) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "key": _item_key(doc.session, doc.history_id),
        "role": "hidden" if doc.hidden else "item",
        "session": doc.session,
        "history_id": doc.history_id,
        "sequence": doc.sequence,
    }
    if not doc.hidden:
        counts, length = doc.analysis or analyze(doc.text)
        fields.update(
            text=counts,
            length=length,
            tools=list(doc.tools),
            files=list(doc.files),
            failed="true" if doc.failed else "false",
            project=project_path(doc.project),
        )
    return fields


class SearchIndex:
    def __init__(self, directory: Path, *, lock_timeout: float = 30.0) -> None:
        self.directory = Path(directory)
        self.lock_timeout = lock_timeout
        self.writers_opened = 0  # writer transactions begun by this object
        self._read_lock = threading.RLock()  # the searcher below and its files
        self._write_lock = threading.Lock()  # one writer per process (the file lock is per fd)
        self._searcher: Searcher | None = None
        self._generation = -1
        self._leaves: dict[tuple[str, int], SegmentReader] = {}
        self._totals: dict[tuple[str, int], tuple[int, int]] = {}  # per segment, see _corpus
        self._frequencies: dict[tuple, int] = {}  # (segment, term) or (segment, session, term)
        self._session_totals: dict[tuple[tuple[str, int], str], tuple[frozenset[int], int]] = {}
        self._ix = self._open()

    # --- queries --------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        sessions: Collection[str] | None = None,
        project: str | None = None,
        files: Sequence[str] = (),
        tools: Sequence[str] = (),
        failed: bool | None = None,
        limit: int = 5,
        required: Sequence[str] = (),
        excluded: Sequence[str] = (),
    ) -> list[Hit]:
        """BM25 hits, best first, ties by session then sequence
        (docs/search.md, "Ranking", "Filters").

        ``""`` matches every item (score 0, oldest first); a query without tokens matches
        nothing. Filters apply before ``limit``. ``project`` keeps the items of sessions that
        ran in that directory or below it; ``None`` or ``""`` keeps all. ``files`` entries are
        paths or tuples of alternative paths. ``required`` tokens must all be in a hit,
        ``excluded`` ones none (index.search.query); neither changes a hit's score.
        """
        if limit < 1 or (sessions is not None and not sessions):
            return []
        restrict = filter_query(sessions, project, files, tools, failed,
                                required_query(required), excluded_query(excluded))
        if query == "":
            visible = Term("role", "item")
            q = visible if restrict is None else And([visible, restrict])
            with self._reading() as searcher:
                found = searcher.search(
                    q, limit=limit, sortedby=["session", "sequence"], scored=False
                )
                return [_hit(searcher, hit.docnum, 0.0) for hit in found]
        wanted = query_tokens(query)
        if not wanted:
            return []
        terms = list(dict.fromkeys(t for token in wanted for t in token.terms))
        q: Query = Or([token_query(token) for token in wanted])
        if restrict is not None:  # intersected while matching, scored by the terms alone
            q = Require(q, restrict)
        # Whoosh's block skipping trips an assertion in Require's matcher, and its matcher
        # replacement drops hits under Require: both only for unfiltered queries.
        unfiltered = restrict is None
        collector = RankCollector(limit, usequality=unfiltered, replace=10 if unfiltered else 0)
        with self._reading() as searcher:
            per_session = SESSION_STATISTICS and sessions is not None and len(sessions) == 1
            corpus = self._session_corpus(next(iter(sessions)), terms) if per_session else \
                self._corpus(terms)
            weighting = Bm25(corpus)
            searcher.search_with_collector(q, collector, searcher.context(weighting=weighting))
            return [_hit(searcher, hit.docnum, hit.score) for hit in collector.results()]

    def _corpus(self, terms: list[str]) -> Corpus:
        """BM25 statistics over every visible item, summed per segment and kept per segment
        (a segment costs a pass over its items once: ~1.5 ms per 1,000)."""
        items = total = 0
        frequencies = dict.fromkeys((encode(t) for t in terms), 0)
        for key, reader in self._leaves.items():
            if key not in self._totals:
                self._totals[key] = segment_totals(reader)
            items, total = items + self._totals[key][0], total + self._totals[key][1]
            for term in terms:
                if (key, term) not in self._frequencies:
                    self._frequencies[key, term] = segment_frequency(reader, term)
                frequencies[encode(term)] += self._frequencies[key, term]
        return Corpus(items, total / items if items else 0.0, frequencies)

    def _session_corpus(self, session: str, terms: list[str]) -> Corpus:
        """BM25 statistics over one session's visible items (upstream's), kept per segment."""
        items = total = 0
        frequencies = dict.fromkeys((encode(t) for t in terms), 0)
        for key, reader in self._leaves.items():
            if (key, session) not in self._session_totals:
                self._session_totals[key, session] = session_items(reader, session)
            ids, length = self._session_totals[key, session]
            items, total = items + len(ids), total + length
            for term in terms:
                if (key, session, term) not in self._frequencies:
                    self._frequencies[key, session, term] = segment_frequency(reader, term, ids)
                frequencies[encode(term)] += self._frequencies[key, session, term]
        return Corpus(items, total / items if items else 0.0, frequencies)

    def scope_size(self, project: str | None = None) -> tuple[int, int]:
        """(sessions, visible items) a search of every session (or of ``project``) covers."""
        with self._reading() as searcher:
            if not project:
                sessions = sum(1 for _ in searcher.docs_for_query(Term("role", "session")))
                return sessions, self._corpus([]).items
            restrict = filter_query(None, project, (), (), None)
            found = list(searcher.docs_for_query(And([Term("role", "item"), restrict])))
            if not found:
                return 0, 0
            column = searcher.reader().column_reader("session", translate=True)
            return len({column[d] for d in found}), len(found)

    def file_paths(self) -> set[str]:
        """Every file path some indexed item touched (what a ``files`` suffix is matched
        against)."""
        with self._reading() as searcher:
            return {decode(t) for t in searcher.reader().lexicon("files")}

    def file_state(self, session: str) -> dict | None:
        """The ``file_state`` the last sync of ``session`` stored, or None."""
        with self._reading() as searcher:
            return _read_session(searcher, session)[0].get("file_state")

    def indexed_sessions(self) -> dict[str, dict]:
        """Every synced session with its stored ``file_state``."""
        with self._reading() as searcher:
            found = {}
            for docnum in searcher.docs_for_query(Term("role", "session")):
                fields = searcher.stored_fields(docnum)
                found[fields["session"]] = fields["file_state"]
            return found

    def documents(self, session: str) -> dict[str, str]:
        """``{history_id: fingerprint}`` of the items stored for ``session`` (hidden included)."""
        with self._reading() as searcher:
            return dict(_read_session(searcher, session)[0].get("fingerprints", {}))

    @property
    def generation(self) -> int:
        """The committed generation: one more per commit."""
        return self._ix.latest_generation()

    # --- sync -----------------------------------------------------------------------------

    def sync(self, session: str, docs: Sequence[IndexDoc], file_state: dict) -> SyncResult:
        """Make the stored items of ``session`` equal ``docs`` and remember ``file_state``."""
        return self.sync_many([(session, docs, file_state)])[session]

    def sync_many(
        self, batches: Iterable[tuple[str, Sequence[IndexDoc], dict]]
    ) -> dict[str, SyncResult]:
        """:meth:`sync` for many sessions, sharing commits (for indexing everything at once).

        A commit is made after ``BATCH_DOCS`` written items or ``BATCH_SECONDS`` (so another
        process waits on the lock no longer than that), and at the end. Sessions whose items
        and file state are unchanged open no writer. ``batches`` may be a generator.
        """
        results: dict[str, SyncResult] = {}
        with self._write_lock:
            writer: SegmentWriter | None = None
            written, started = 0, 0.0
            try:
                for session, docs, file_state in batches:
                    _check_session(session, docs)
                    if writer is not None and session in results:
                        self._commit(writer, written)  # a session's second batch reads its first
                        writer = None
                    if writer is None:
                        with self._reading() as searcher:
                            stored, _ = _read_session(searcher, session)
                        if _changes(stored, docs, file_state) is None:
                            results[session] = SyncResult(0, 0, 0)
                            continue
                        writer, written, started = self._new_writer(), 0, time.monotonic()
                    results[session], count = self._apply(writer, session, docs, file_state)
                    written += count
                    if written >= BATCH_DOCS or time.monotonic() - started >= BATCH_SECONDS:
                        self._commit(writer, written)
                        writer = None
                if writer is not None:
                    self._commit(writer, written)
            finally:
                if writer is not None and not writer.is_closed:
                    writer.cancel()
        return results

    def forget(self, session: str) -> int:
        """Delete every document of ``session`` and rewrite the index without them (deleted
        documents would otherwise stay in their segment files until a merge): the number of
        documents removed."""
        with self._write_lock:
            writer = self._new_writer()
            try:
                removed = writer.delete_by_term("session", session)
                if removed:
                    writer.commit(optimize=True)
                else:
                    writer.cancel()
            except BaseException:
                if not writer.is_closed:
                    writer.cancel()
                raise
        return removed

    def close(self) -> None:
        with self._read_lock:
            for reader in self._leaves.values():
                reader.close()
            self._leaves, self._searcher, self._generation = {}, None, -1

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing --------------------------------------------------------------------------

    def _new_writer(self) -> SegmentWriter:
        try:
            writer = TermWriter(
                self._ix, timeout=self.lock_timeout, delay=LOCK_POLL, compound=COMPOUND,
            )
        except LockError:
            raise self._busy() from None
        self.writers_opened += 1
        _remove_toc_temps(self._ix.storage)
        return writer

    def _apply(
        self, writer: SegmentWriter, session: str, docs: Sequence[IndexDoc], file_state: dict
    ) -> tuple[SyncResult, int]:
        """Stage one session's changes in ``writer``; (result, documents written)."""
        with self._reading() as searcher:
            # Under the writer lock the latest commit is the writer's base, so document
            # numbers agree; the plan is made again because another process may have synced.
            if self._generation != writer.generation - 1:
                searcher = writer.searcher()
            stored, docnum = _read_session(searcher, session)
            plan = _changes(stored, docs, file_state)
            if plan is None:
                return SyncResult(0, 0, 0), 0
            for history_id in (*plan.remove, *(d.history_id for d in plan.update)):
                writer.delete_by_term("key", _item_key(session, history_id), searcher=searcher)
            if docnum is not None:
                writer.delete_document(docnum)
        for doc in (*plan.add, *plan.update):
            writer.add_document(**_fields(doc))
        writer.add_document(
            key=_session_key(session),
            role="session",
            session=session,
            file_state=file_state,
            fingerprints=plan.fingerprints(stored.get("fingerprints", {})),
        )
        result = SyncResult(len(plan.add), len(plan.update), len(plan.remove))
        return result, len(plan.add) + len(plan.update) + 1

    def _commit(self, writer: SegmentWriter, written: int) -> None:
        if written:
            writer.commit(mergetype=merge_tiers)
        else:  # every session turned out unchanged once the lock was held
            writer.cancel()

    def _busy(self) -> IndexBusy:
        return IndexBusy(
            f"the search index {self.directory} is being written by another process; "
            f"gave up after {self.lock_timeout:g} s"
        )

    # --- reading --------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[Searcher]:
        """A searcher of the latest commit; it never waits for a writer.

        Segment readers are kept open across commits while their segment and its deletions
        are unchanged (Whoosh's ``Searcher.refresh`` keys reuse by segment id only, so it
        would miss new deletions, and it fails on an empty index in whoosh-reloaded 2.7.5).
        """
        with self._read_lock:
            for attempt in range(5):
                generation = TOC._latest_generation(self._ix.storage, INDEX_NAME)
                if generation < 0:  # the directory was deleted: derived data, start again
                    self._ix = self._open()
                    continue
                if self._searcher is not None and generation == self._generation:
                    break
                try:
                    self._searcher = self._open_searcher(generation)
                    self._generation = generation
                    break
                except (FileNotFoundError, EmptyIndexError):
                    # A commit replaced this generation while we opened it: look again.
                    if attempt == 4:
                        raise
            yield self._searcher

    def _open_searcher(self, generation: int) -> Searcher:
        toc = TOC.read(self._ix.storage, INDEX_NAME, generation, schema=SCHEMA)
        leaves: dict[tuple[str, int], SegmentReader] = {}
        try:
            for segment in toc.segments:
                key = (segment.segment_id(), segment.deleted_count())
                leaves[key] = self._leaves.get(key) or SegmentReader(
                    self._ix.storage, SCHEMA, segment, generation=generation
                )
        except BaseException:
            for key, reader in leaves.items():
                if key not in self._leaves:
                    reader.close()
            raise
        for key, reader in self._leaves.items():
            if key not in leaves:
                reader.close()
        self._leaves = leaves
        self._totals = {k: v for k, v in self._totals.items() if k in leaves}
        self._frequencies = {k: v for k, v in self._frequencies.items() if k[0] in leaves}
        self._session_totals = {k: v for k, v in self._session_totals.items() if k[0] in leaves}
        readers = list(leaves.values())
        reader = MultiReader(readers, generation) if readers else EmptyReader(SCHEMA)
        return Searcher(reader, closereader=False)

    # --- opening, creating, recovering ---------------------------------------------------

    @contextmanager
    def _locked(self, storage: FileStorage) -> Iterator[None]:
        """The writer lock, outside a writer (creating or moving the index)."""
        lock = storage.lock(f"{INDEX_NAME}_WRITELOCK")
        if not try_for(lock.acquire, timeout=self.lock_timeout, delay=LOCK_POLL):
            raise self._busy()
        try:
            yield
        finally:
            lock.release()

    def _open(self) -> FileIndex:
        storage = FileStorage(str(self.directory)).create()
        if TOC._latest_generation(storage, INDEX_NAME) < 0:
            with self._locked(storage):  # two processes may start on one empty directory
                if TOC._latest_generation(storage, INDEX_NAME) < 0:
                    return FileIndex.create(storage, SCHEMA, INDEX_NAME)
        try:
            ix = _checked(storage)
        except DamagedIndex as exc:
            return self._quarantine(storage, str(exc))
        _tidy(ix)
        return ix

    def _quarantine(self, storage: FileStorage, reason: str) -> FileIndex:
        with self._locked(storage):
            try:  # another process may have replaced it while we waited for the lock
                return _checked(storage)
            except DamagedIndex:
                pass
            stamp = time.strftime("%Y%m%dT%H%M%S")
            aside = self.directory.with_name(f"{self.directory.name}.broken-{stamp}")
            for n in range(1, 1000):
                if not aside.exists():
                    break
                aside = self.directory.with_name(f"{self.directory.name}.broken-{stamp}-{n}")
            os.rename(self.directory, aside)
        log.warning(
            "search index %s could not be read (%s); moved it to %s and started an empty "
            "index: sessions will be indexed again",
            self.directory, reason, aside,
        )
        return self._open()


def _changes(
    stored: Mapping[str, Any], docs: Sequence[IndexDoc], file_state: dict
) -> SyncPlan | None:
    """The plan for a session, or None when neither its items nor its file state changed."""
    plan = plan_sync(stored.get("fingerprints", {}), docs)
    if stored and plan.empty and stored.get("file_state") == file_state:
        return None
    return plan


def _check_session(session: str, docs: Sequence[IndexDoc]) -> None:
    for doc in docs:
        if doc.session != session:
            raise ValueError(f"{doc.history_id!r} belongs to {doc.session!r}, not {session!r}")


def _read_session(searcher: Searcher, session: str) -> tuple[dict[str, Any], int | None]:
    """The stored fields of a session's document (``{}`` if never synced) and its number."""
    for docnum in searcher.docs_for_query(Term("key", _session_key(session))):
        return searcher.stored_fields(docnum), docnum
    return {}, None


class DamagedIndex(Exception):
    """The index files cannot be read (the caller moves them aside)."""


def _checked(storage: FileStorage, attempts: int = 3) -> FileIndex:
    """Open the index and read a little of every segment, or raise :class:`DamagedIndex`.

    A missing file can be another process's commit removing segments just as they were
    opened, so that is retried before it counts as damage.
    """
    for attempt in range(attempts):
        problem = ""
        with warnings.catch_warnings():
            # Whoosh leaves files open when it fails to parse them; they are closed (and would
            # warn) once the exception is dropped, or by the collection below.
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                return _sanity_check(FileIndex(storage, SCHEMA, INDEX_NAME))
            except FileNotFoundError as exc:
                if attempt == attempts - 1:
                    problem = f"{type(exc).__name__}: {exc}"
            except Exception as exc:
                problem = f"{type(exc).__name__}: {exc}"
            gc.collect()
        if problem:
            raise DamagedIndex(problem)
    raise AssertionError("unreachable")


def _sanity_check(ix: FileIndex) -> FileIndex:
    with ix.searcher() as searcher:
        for leaf, _ in searcher.reader().leaf_readers():
            count = leaf.doc_count_all()
            if count:
                leaf.stored_fields(0)
                leaf.stored_fields(count - 1)
        for docnum in searcher.docs_for_query(Term("role", "session")):
            fields = searcher.stored_fields(docnum)
            if not isinstance(fields.get("fingerprints"), dict):
                raise ValueError(f"session document {docnum} is damaged: {fields!r:.200}")
    return ix


def _hit(searcher: Searcher, docnum: int, score: float) -> Hit:
    fields = searcher.stored_fields(docnum)
    return Hit(fields["session"], fields["history_id"], fields["sequence"], score)


def _tidy(ix: FileIndex) -> None:
    """Delete what killed writers left (partial segments, run files), unless one is writing."""
    lock = ix.lock("WRITELOCK")
    if not lock.acquire():
        return
    try:
        toc = ix._read_toc()
        clean_files(ix.storage, INDEX_NAME, toc.generation, toc.segments)
        _remove_toc_temps(ix.storage)
        shutil.rmtree(Path(ix.storage.folder) / f"{INDEX_NAME}.tmp", ignore_errors=True)
    finally:
        lock.release()


def _remove_toc_temps(storage: FileStorage) -> None:
    """Delete the half-written tables of contents of killed writers (lock holder only)."""
    for name in storage.list():
        if _TOC_TEMP.match(name):
            try:
                storage.delete_file(name)
            except OSError:
                pass
