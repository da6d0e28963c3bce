"""The recovery operations over all sessions: what the MCP tools and the CLI call.

:class:`History` composes the session catalog (files → items), the persistent search index and
one :class:`~index.navigator.Navigator` per session. Every operation refreshes the session it
touches first (only appended bytes are parsed), so search sees what was written a moment ago.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from context_paging.index.discovery import (
    SessionFileRef,
    SessionRefError,
    iter_session_files,
    resolve,
)
from context_paging.index.history import HistoryItem, block_text
from context_paging.index.home.proxied import (
    FRESH_SECONDS,
    conversation_stats,
    figures,
    last_proxied,
)
from context_paging.index.jsonl import file_identity, open_inside
from context_paging.index.ledger import Ledger, LedgerError, check_session_id
from context_paging.index.navigator import Navigator, NavigatorError, cap_items, compact_references
from context_paging.index.sessions import SessionFile, UnknownFormat
from context_paging.index.window.gate import Gate
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging.distill import DistillConfig, Plan
from context_paging.paging.models import model_window

if TYPE_CHECKING:
    # Searching, indexing and recall load on their first use: select_context (the proxy's
    # every request, serve's warm-up) needs none of them, and the search modules bring Whoosh.
    # The catalog of session files and the stats report likewise (pydantic models).
    from context_paging.index.catalog import Catalog, SessionSummary
    from context_paging.index.recall import Recalled
    from context_paging.index.search.reply import Progress, SearchReply
    from context_paging.index.search.scan import MemoryIndex
    from context_paging.index.search.store import IndexDoc, SearchIndex, SyncResult
    from context_paging.index.stats import Stats

log = logging.getLogger("context_paging")



class NoSessionGiven(SessionRefError):
    """No session was named and none is implied; ``cwd`` is where one was looked for (the CLI
    words this for the terminal, the tools for the model)."""

    def __init__(self, cwd: str) -> None:
        super().__init__(
            f"no session given, select_context has not been called, no session ran in {cwd} "
            "and the proxy forwarded no conversation in the last 6 hours; pass session (for "
            "example 'claude:<id>' from list_sessions)"
        )
        self.cwd = cwd


class History:
    def __init__(
        self,
        roots: Mapping[str, Path | None],
        home: Path,
        context_settings: ContextSettings | None = None,
        count_text: Callable[[], Callable[[str], int] | None] | None = None,
    ) -> None:
        self._roots = dict(roots)
        self._catalog: Catalog | None = None
        self.home = home
        self._store: SearchIndex | None = None
        self._navigators: OrderedDict[str, tuple[object, Navigator]] = OrderedDict()
        self.current_session: str | None = None
        self._resolved: dict[str, SessionFileRef] = {}
        self.ledger = Ledger(home)
        self._context_settings = context_settings or ContextSettings()
        self._count_text = count_text
        self._context: ContextService | None = None
        self._making = threading.Lock()
        self._cataloging = threading.Lock()
        self.gate = Gate()
        self._syncing: dict[str, threading.Thread] = {}
        self._scanned: dict[str, tuple[object, MemoryIndex]] = {}  # the last session in memory

    @property
    def catalog(self) -> Catalog:
        """The session files under the roots (opened, and their summaries), made on first use."""
        if self._catalog is None:
            from context_paging.index.catalog import Catalog

            with self._cataloging:
                if self._catalog is None:
                    self._catalog = Catalog(self._roots, cache=self.home / "catalog.json")
        return self._catalog

    @property
    def context(self) -> ContextService:
        """The select_context service; the tokenizer is loaded on first use."""
        if self._context is None:
            with self._making:
                if self._context is None:
                    counter = self._count_text() if self._count_text else None
                    self._context = ContextService(self.ledger, self._context_settings, counter)
        return self._context

    def select_context(self, session: str, messages: Sequence[Any], **kwargs: Any) -> dict:
        """``ContextService.select``; calls may come from several threads at once (the
        proxy's): each session's run one at a time, different sessions' side by side
        (index/window/gate.py)."""
        context = self.context  # made once, before any call can race to make it
        with self.gate.session(str(session).removeprefix("ledger:")):
            reply = context.select(session, messages, **kwargs)
        self.current_session = f"ledger:{check_session_id(session)}"
        return reply

    def idle(self, seconds: float | None = None, stop: Callable[[], bool] | None = None) -> bool:
        """Spare time after a select_context reply (``ContextService.idle``): True while work
        is left. It runs only while no select_context call runs or waits."""
        if not self.gate.acquire():
            return True
        try:
            return self.context.idle(seconds, stop)
        finally:
            self.gate.release()

    def distill_plan(self, session: str, messages: Sequence[Any], fmt: str = "auto",
                     ephemeral: Sequence[int] = (), model: str | None = None,
                     after_id: str | None = None) -> Plan | None:
        """What ``select_context`` would judge for this request (nothing is stored)."""
        return self.context.plan(session, messages, fmt, ephemeral, model, after_id)

    @property
    def distill_config(self) -> DistillConfig:
        return self._context_settings.distill

    @property
    def store(self) -> SearchIndex:
        if self._store is None:
            from context_paging.index.search.store import SearchIndex

            self._store = SearchIndex(self.home / "index")
        return self._store

    def close(self) -> None:
        self.wait_for_index()  # nothing started is left half done (the CLI exits next)
        if self._store is not None:
            self._store.close()
            self._store = None

    # --- sessions -------------------------------------------------------------------------

    def _open(self, ref: str) -> tuple[str, str, Sequence[HistoryItem], dict[str, Any]]:
        """(canonical ref, cwd, raw items, file state) of a session reference."""
        if ref.startswith("ledger:"):
            return self.ledger.open(ref)  # a malformed id is a LedgerError: INVALID_SESSION
        with _unreadable_session(ref, self.home):
            found = self._resolved.get(ref)
            if found is None or not _still_inside(found, self.catalog.roots):
                # Resolving walks every file under the roots; a search resolves the session and
                # each hit's session, so canonical references are remembered per process.
                found = resolve(ref, self.catalog.roots)
                self._resolved[found.ref] = found
            return self._open_file(found)

    def _open_file(self, found: SessionFileRef) -> tuple[str, str, Sequence[HistoryItem], dict]:
        try:
            session = self.catalog.open(found)
            items = session.projection.items
        except UnknownFormat as exc:
            raise SessionRefError(str(exc)) from None
        return found.ref, session.info.cwd or "", items, _file_state(session)

    def navigator(self, ref: str | None) -> Navigator:
        canonical, _, items, _ = self._open(self.resolve_default(ref))
        cached = self._navigators.pop(canonical, None)
        if cached is None or cached[0] is not items:
            cached = (items, Navigator(canonical, items))
        self._navigators[canonical] = cached
        while len(self._navigators) > self.catalog.keep_open:
            self._navigators.popitem(last=False)
        return cached[1]

    def resolve_default(self, ref: str | None) -> str:
        """The given reference, else the default session (:meth:`default_session`)."""
        return self.default_session(ref)[0]

    def default_session(self, ref: str | None) -> tuple[str, str]:
        """(session, how it was chosen): DEFAULT_SESSION_RULE, the one rule of the CLI and
        the tools. A person's directory comes before the proxy, another program: the proxy's
        conversation is the last resort, and replies that use it say so."""
        if ref:
            return ref, "given"
        if self.current_session:
            return self.current_session, "select_context"
        cwd = os.getcwd()
        here = self._newest_in(cwd)
        if here:
            return here, "directory"
        proxied = last_proxied(self.home, FRESH_SECONDS)  # the proxy is another process
        if proxied:
            return proxied, "proxy"
        raise NoSessionGiven(cwd)

    def _newest_in(self, cwd: str) -> str | None:
        dated = []
        for found in iter_session_files(self.catalog.roots):
            try:  # a file deleted since the listing is no candidate (not a STORAGE_ERROR)
                dated.append((found.path.stat().st_mtime_ns, found))
            except OSError:
                continue
        for _, found in sorted(dated, key=lambda pair: pair[0], reverse=True):
            if not might_have_run_in(found, cwd, self.catalog.roots.get(found.source)):
                continue
            try:
                if self.catalog.open(found).info.cwd == cwd:
                    return found.ref
            except (OSError, UnknownFormat):
                continue
        return None

    def stats(self, ref: str | None, enabled: bool = True) -> Stats:
        ref = self.resolve_default(ref)
        if ref.startswith("ledger:"):
            self.ledger.open(ref)  # a clear error for an unknown ledger session
            stats = self.context.stats(ref, enabled)
            tally = conversation_stats(self.home, ref)
            return stats.model_copy(update={"proxy": figures(tally)}) if tally else stats
        with _unreadable_session(ref, self.home):
            found, session = self.catalog.session(ref)
        return file_stats(found.ref, session, enabled, self._context_settings.token_budget)

    def list_sessions(
        self, source: str | None = None, project: str | None = None, limit: int = 20
    ) -> list[SessionSummary]:
        return self.catalog.summaries(source, project)[:limit]

    # --- indexing -------------------------------------------------------------------------

    def ensure_indexed(self, ref: str | SessionFileRef) -> SyncResult | None:
        from context_paging.index.search.store import doc_for

        opened = self._open_file(ref) if isinstance(ref, SessionFileRef) else self._open(ref)
        canonical, cwd, items, state = opened
        if self.store.file_state(canonical) == state:
            return None
        return self.store.sync(canonical, [doc_for(canonical, cwd, i) for i in items], state)

    def _catch_up(self, canonical: str, cwd: str, items: Sequence[HistoryItem],
                  state: dict[str, Any]) -> None:
        """Index one session in the background (one at a time per session).

        A large session is indexed by a child process: in a thread, Whoosh's pure-Python
        writing would hold the GIL against the searches it is meant to leave fast.
        """
        running = self._syncing.get(canonical)
        if running is not None and running.is_alive():
            return
        if sum(len(d.text) for d in self._scanned[canonical][1].docs) >= CHILD_FROM_CHARS:
            import multiprocessing

            method = "fork" if threading.active_count() == 1 else "spawn"
            worker: Any = multiprocessing.get_context(method).Process(
                target=_index_in_child, args=(self.catalog.roots, self.home, canonical),
                name=f"index {canonical}", daemon=False)
        else:
            worker = threading.Thread(target=self._sync_quietly,
                                      args=(canonical, cwd, items, state),
                                      name=f"index {canonical}", daemon=True)
        self._syncing[canonical] = worker
        release = _hold_interrupts()  # a child process finishes its write whatever Ctrl-C says
        try:
            worker.start()
        finally:
            release()

    def _sync_quietly(self, canonical: str, cwd: str, items: Sequence[HistoryItem],
                      state: dict[str, Any]) -> None:
        from context_paging.index.search.store import doc_for

        try:
            self.store.sync(canonical, [doc_for(canonical, cwd, i) for i in items], state)
        except Exception:  # the index is derived data: the next search retries
            log.warning("background indexing of %s failed", canonical, exc_info=True)

    def wait_for_index(self) -> None:
        """Wait until the background indexing this process started is done."""
        for worker in list(self._syncing.values()):
            worker.join()
        self._syncing.clear()
        self._scanned.clear()

    def index_all(self, progress: Progress | None = None) -> int:
        """Bring every session under the roots (and the ledger) into the index.

        Files whose size, mtime, inode and first line match what the index stored are skipped
        without being opened, so an up-to-date index costs one stat per file. The rest are read
        and analyzed by one worker process per core (:func:`prepare_file`) while this process
        writes them through ``sync_many``, which shares commits across sessions.
        """
        from context_paging.index.search.store import doc_for

        stored = self.store.indexed_sessions()
        files: list[SessionFileRef] = []
        for found in iter_session_files(self.catalog.roots):
            try:
                if stored.get(found.ref) == _identity(found):
                    continue
            except OSError as exc:
                log.warning("not indexed: %s: %s", found.ref, exc)
                continue
            files.append(found)
        ledgers = self.ledger.sessions()
        total = len(files) + len(ledgers)

        def prepared():
            yield from prepare_files(files, self.catalog.roots)
            for ref in ledgers:
                try:
                    canonical, cwd, items, state = self._open(ref)
                except (SessionRefError, LedgerError, OSError) as exc:
                    yield ref, str(exc)
                    continue
                yield ref, (canonical, [doc_for(canonical, cwd, i) for i in items], state)

        def batches():
            for done, (ref, value) in enumerate(prepared()):
                name = getattr(ref, "ref", ref)
                if progress:
                    progress(done, total, f"indexing {name}")
                if isinstance(value, str):
                    log.warning("not indexed: %s: %s", name, value)
                    continue
                canonical, docs, state = value
                if stored.get(canonical) != state:
                    yield canonical, docs, state
            if progress:  # the commit that follows reports nothing itself
                progress(total, None, "writing the index")

        results = self.store.sync_many(batches())
        if progress:
            progress(total, total, "index up to date")
        return sum(1 for r in results.values() if r.added or r.updated or r.removed)

    # --- the recovery operations ----------------------------------------------------------

    def search(
        self,
        query: str,
        session: str | None = None,
        scope: str = "session",
        files: Sequence[str] = (),
        tools: Sequence[str] = (),
        failed: bool | None = None,
        limit: int = 5,
        load: bool = False,
        progress: Progress | None = None,
        directory: str | None = None,
        offset: int = 0,
    ) -> SearchReply:
        """One page of hits with the lines each matched and what was searched
        (:func:`index.search.reply.search`)."""
        from context_paging.index.search import reply as searching

        return searching.search(self, query, session, scope, files, tools, failed, limit, load,
                                progress, directory, offset)

    def memory_index(self, canonical: str, cwd: str, items: Sequence[HistoryItem]
                     ) -> MemoryIndex:
        """The session's in-memory index, built once per parse of the session (one session's
        worth of memory is kept)."""
        cached = self._scanned.get(canonical)
        if cached is None or cached[0] is not items:
            from context_paging.index.search.scan import MemoryIndex
            from context_paging.index.search.store import doc_for

            memory = MemoryIndex([doc_for(canonical, cwd, i, "-") for i in items])
            cached = (items, memory)
            self._scanned = {canonical: cached}
        return cached[1]

    def catch_up(self, canonical: str, cwd: str, items: Sequence[HistoryItem],
                 state: dict[str, Any]) -> None:
        """Index one session in the background (see ``_catch_up``)."""
        self._catch_up(canonical, cwd, items, state)

    def project_of(self, session: str | None) -> str:
        return self._project_of(session)

    def opened(self, ref: str) -> tuple[str, str, Sequence[HistoryItem], dict[str, Any]]:
        """(canonical ref, cwd, raw items, file state) of a session reference."""
        return self._open(ref)

    def _project_of(self, session: str | None) -> str:
        """The working directory of the given (or current) session, else the process's."""
        ref = session or self.current_session
        if not ref:
            return os.getcwd()
        canonical, cwd, _, _ = self._open(ref)
        if not cwd:
            raise NavigatorError(
                "NO_PROJECT", f"{canonical} has no working directory; use scope 'all'"
            )
        return cwd

    def browse(self, session: str | None, **kwargs: Any) -> tuple[list[dict[str, Any]], str | None]:
        return compact_references(self.navigator(session).browse(**kwargs))

    def load(self, session: str | None, history_ids: Sequence[str]) -> list[dict[str, Any]]:
        return self.navigator(session).load(history_ids)

    def load_capped(self, session: str | None, history_ids: Sequence[str]
                    ) -> tuple[list[dict[str, Any]], str | None]:
        """load_history's reply: the items capped (``navigator.cap_items``), and the note
        when outputs were cut."""
        return cap_items(self.load(session, history_ids))

    def read_output(self, session: str | None, **kwargs: Any) -> dict[str, Any]:
        return self.navigator(session).read_output(**kwargs)

    def recall(
        self,
        session: str | None,
        tool_call_id: str | None = None,
        history_id: str | None = None,
        pattern: str | None = None,
        offset: int | None = None,
        limit: int | None = None,
    ) -> Recalled:
        from context_paging.index.recall import find_original, recall_text

        items = self.navigator(session).raw
        text, images = find_original(items, tool_call_id=tool_call_id, history_id=history_id)
        return recall_text(text, images, pattern=pattern, offset=offset, limit=limit)


@contextmanager
def _unreadable_session(ref: str, home: Path) -> Iterator[None]:
    """A session file that cannot be read is the session's problem, not the home's: an OS error
    on a path outside the home (a name too long, a link swapped in, a permission) becomes a
    SessionRefError naming the file and the reason, so the server does not answer with a
    storage error that blames the home."""
    try:
        yield
    except OSError as exc:
        if _in_home(str(exc.filename or ref), home):
            raise
        reason = exc.strerror or str(exc)
        raise SessionRefError(f"cannot read session {ref!r}: {reason}") from None


def _in_home(where: str, home: Path) -> bool:
    """Whether a failing path lies under the home, links resolved where they can be.

    Resolving can fail on the very race the caller is reporting: CPython's non-strict
    ``realpath`` lstat()s a name and then readlink()s it, so a link swapped for a file in
    between raises EINVAL (ENOENT if removed). That error must not escape the handler as a
    storage error, so an unresolvable path is placed by its spelling instead.
    """
    homes = {os.path.abspath(home)}
    with suppress(OSError):
        homes.add(os.path.realpath(home))
    try:
        path = os.path.realpath(where)
    except OSError:
        path = os.path.abspath(where)
    return any(path.startswith(h.rstrip(os.sep) + os.sep) for h in homes)


CHILD_FROM_CHARS = 2_000_000  # a session this large is indexed by a child process


def _index_in_child(roots: Mapping[str, Path | None], home: Path, canonical: str) -> None:
    _ignore_interrupts()
    history = History(roots, home)
    try:
        history.ensure_indexed(canonical)
    except Exception:  # the index is derived data: the next search retries
        log.warning("background indexing of %s failed", canonical, exc_info=True)
    finally:
        history.close()


PARALLEL_FROM = 2  # stale files before index_all reads them in worker processes


def prepare_file(found: SessionFileRef, root: Path | None
                 ) -> tuple[str, list[IndexDoc], dict[str, Any]] | str:
    """One session file read and analyzed, ready to write (or why it could not be read). The
    file is opened and verified inside ``root``, as every session file is."""
    from context_paging.index.catalog import Catalog
    from context_paging.index.search.store import analyzed, doc_for

    try:
        session = Catalog({found.source: root}, keep_open=0).open(found)
        cwd, items = session.info.cwd or "", session.projection.items
        docs = [analyzed(doc_for(found.ref, cwd, item)) for item in items]
        return found.ref, docs, _file_state(session)
    except (OSError, UnknownFormat) as exc:
        return str(exc)


def prepare_files(files: Sequence[SessionFileRef], roots: Mapping[str, Path | None]
                  ) -> Iterator[tuple[SessionFileRef, Any]]:
    """(file, prepare_file(file)) in order; one worker process per core when there are several
    files, at most two files per worker ahead of the caller (whose writer is the slower side:
    results must not pile up in memory)."""
    workers = min(os.cpu_count() or 1, len(files))
    if len(files) < PARALLEL_FROM or workers < 2:
        for found in files:
            yield found, prepare_file(found, roots.get(found.source))
        return
    import multiprocessing

    method = "fork" if threading.active_count() == 1 else "spawn"  # fork is unsafe with threads
    # A worker interrupted mid-task prints a traceback and can die holding the pool's queue
    # lock, which hangs the pool's shutdown: workers leave Ctrl-C to this process
    # (:func:`_hold_interrupts`), and one that reaches it while the pool starts is raised once
    # the pool is in its ``with``, which ends the pool.
    release = _hold_interrupts()
    try:
        pool = multiprocessing.get_context(method).Pool(workers, initializer=_ignore_interrupts)
    except BaseException:
        release()
        raise
    with pool:
        release()
        pending: deque = deque()
        queue = iter(files)
        for found in queue:
            job = (found, roots.get(found.source))
            pending.append((found, pool.apply_async(prepare_file, job)))
            if len(pending) >= 2 * workers:
                break
        while pending:
            found, result = pending.popleft()
            nxt = next(queue, None)
            if nxt is not None:
                pending.append((nxt, pool.apply_async(prepare_file, (nxt, roots.get(nxt.source)))))
            yield found, result.get()


def _hold_interrupts() -> Callable[[], None]:
    """Block SIGINT in this thread while worker processes start; returns what unblocks it.

    Ctrl-C is the CLI's to handle (one line, status 130), but the terminal sends SIGINT to the
    whole process group, workers included: a worker started with it blocked (the mask is
    inherited) cannot be interrupted before :func:`_ignore_interrupts` runs, and a SIGINT that
    reaches this process meanwhile waits until the returned function is called.
    """
    import signal

    mask = getattr(signal, "pthread_sigmask", None)  # POSIX; elsewhere the initializer alone
    if mask is None:
        return lambda: None
    blocked = mask(signal.SIG_BLOCK, {signal.SIGINT})
    return lambda: mask(signal.SIG_SETMASK, blocked)


def _ignore_interrupts() -> None:
    """A worker process leaves Ctrl-C to its parent, which ends it or lets it finish a write."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _still_inside(found: SessionFileRef, roots: Mapping[str, Path | None]) -> bool:
    """A remembered file is still a file inside its root (no symlink swapped in since)."""
    root = roots.get(found.source)
    real = Path(os.path.realpath(found.path))
    return root is not None and real.is_file() and real.is_relative_to(os.path.realpath(root))


def might_have_run_in(found: SessionFileRef, cwd: str, root: Path | None = None) -> bool:
    """A cheap pre-check before parsing a file to learn its working directory.

    Claude Code and Pi name a session's folder after its working directory (lossy escapes, so a
    match is only a candidate); a Codex rollout states it in its first line. Anything else
    is a candidate too.
    """
    folder = found.path.parent.name
    if found.source == "claude" and folder.startswith("-"):
        if "/subagents" in str(found.path.parent):
            folder = found.path.parent.parent.parent.name
        return folder == re.sub(r"[^A-Za-z0-9]", "-", cwd)
    if found.source == "pi" and folder.startswith("--") and folder.endswith("--"):
        return folder == "--" + re.sub(r"[/\\:]", "-", cwd.lstrip("/\\")) + "--"
    if found.source == "codex":
        try:
            with open_inside(found.path, root) as handle:
                return cwd in handle.readline().decode("utf-8", "replace")
        except OSError:
            return False
    return True


def file_stats(ref: str, session: SessionFile, enabled: bool = True,
               budget: int | None = None) -> Stats:
    """The stats report (docs/tools.md, "The stats report") for an agent's session file (its active
    path; thinking is not kept, so it is not counted). ``budget`` is the configured paging budget,
    the one a window of this session would be held to."""
    from context_paging.index.stats import Stats

    conversation = session.conversation
    chars = 0
    last_usage = None
    model = None
    for message in conversation.messages:
        chars += sum(len(block_text(b)) for b in message.content)
        if message.role == "assistant" and message.usage is not None:
            last_usage = message.usage
        if message.role == "assistant" and message.model:
            model = message.model
    usage = conversation.usage
    return Stats(
        session=ref, enabled=enabled, stored_bytes=session.cursor.size,
        history_tokens=-(-chars // 4),
        input_tokens=(last_usage.input + last_usage.cache_read + last_usage.cache_write)
        if last_usage else None,
        input_measured=last_usage is not None, budget_tokens=budget,
        model_window=model_window(model),
        cache_read_tokens=usage.cache_read if usage else None,
        cache_write_tokens=usage.cache_write if usage else None,
    )


def _identity(found: SessionFileRef) -> dict[str, object]:
    """``index.jsonl.file_identity`` of a session's file (OpenCode's: of its database)."""
    if found.source == "opencode":
        from context_paging.index.sources.opencode import identity

        return identity(str(found.path))
    return file_identity(str(found.path))


def _file_state(session: SessionFile) -> dict[str, Any]:
    """The same keys as ``index.jsonl.file_identity``, from what the last read saw."""
    cursor = session.cursor
    return {"path": cursor.path, "size": cursor.size, "mtime_ns": cursor.mtime_ns,
            "inode": cursor.inode, "head": cursor.head}
