"""The sessions under the configured roots, read on demand and kept up to date incrementally.

One :class:`Catalog` per process holds a :class:`~index.sessions.SessionFile` per path, so a
session that is read twice parses only what was appended in between. Listings are cached in the
home (``catalog.json``: each file's summary under its size, mtime and inode), so listing
thousands of sessions reads only the files that changed since the last listing, and of those
only the head and the tail (index.listing). A damaged cache is rebuilt with one warning.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from context_paging.index.discovery import SessionFileRef, iter_session_files, resolve
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:  # the readers load when a session is opened: SessionSummary is a tool's
    # output model, and the MCP server lists its tools before it reads any session
    from context_paging.index.listing import Listed
    from context_paging.index.sessions import SessionFile

log = logging.getLogger("context_paging")
CACHE_VERSION = 1  # change with SessionSummary's fields
PARALLEL_FROM = 32  # uncached files per extra worker process


class SessionSummary(BaseModel):
    """One session as listed: also the ``list_sessions`` tool's output item."""

    model_config = ConfigDict(frozen=True)

    ref: str
    source: str
    session_id: str
    path: str
    title: str | None
    cwd: str | None
    created: str | None
    updated: str | None
    size: int
    format: str
    parent: str | None


class Catalog:
    """Open sessions, least recently used dropped first.

    A SessionFile keeps its parsed records (that is what makes re-reading incremental), which is
    several times the file's size in memory; indexing a large corpus must not keep them all.
    """

    def __init__(self, roots: Mapping[str, Path | None], keep_open: int = 32,
                 cache: Path | None = None) -> None:
        self.roots = dict(roots)
        self.keep_open = keep_open
        self._files: OrderedDict[str, SessionFile] = OrderedDict()
        self.cache = cache  # summaries by path and file identity, kept across runs
        self._cached: dict[str, dict] | None = None

    def open(self, found: SessionFileRef) -> SessionFile:
        """The up-to-date SessionFile for a discovered file."""
        key = _key(found)
        session = self._files.pop(key, None)
        if session is None:
            from context_paging.index.sessions import SessionFile

            root = self.roots.get(found.source)
            session = SessionFile(str(found.path), found.source,
                                  str(root) if root is not None else None, found.session_id)
        self._files[key] = session
        while len(self._files) > self.keep_open:
            self._files.popitem(last=False)
        session.refresh()
        return session

    def session(self, ref: str) -> tuple[SessionFileRef, SessionFile]:
        found = resolve(ref, self.roots)
        return found, self.open(found)

    def summaries(
        self, source: str | None = None, project: str | None = None
    ) -> list[SessionSummary]:
        """Every readable session, newest first. Unreadable files are logged and skipped."""
        found_all = [f for f in iter_session_files(self.roots) if source in (None, f.source)]
        cached = self._load_cache()
        changed = False
        identities: dict[str, list[int]] = {}
        stale = []
        for found in found_all:
            try:
                identities[_key(found)] = _identity(found)
            except OSError as exc:
                log.warning("skipped %s: %s", found.path, exc)
                continue
            entry = cached.get(_key(found))
            if entry is None or entry["identity"] != identities[_key(found)]:
                stale.append(found)
        for found, summary in self._read_summaries(stale):  # new or changed: read them
            if isinstance(summary, str):
                log.warning("skipped %s: %s", found.path, summary)
                continue
            key = _key(found)
            cached[key] = {"identity": identities[key], "summary": summary.model_dump()}
            changed = True
        summaries = []
        for found in found_all:
            entry = cached.get(_key(found))
            if entry is None or entry["identity"] != identities.get(_key(found)):
                continue
            summary = SessionSummary(**entry["summary"])
            if project is None or _in_project(summary.cwd, project):
                summaries.append(summary)
        if source is None:  # a full listing knows which files are gone
            present = {_key(f) for f in found_all}
            for key in [k for k in cached if k not in present]:
                del cached[key]
                changed = True
        if changed:
            self._save_cache(cached)
        summaries.sort(key=lambda s: s.updated or "", reverse=True)
        return summaries

    def _read_summaries(self, stale: list[SessionFileRef]):
        """(file, summary or the reason it could not be read) for each file; many files are
        read by one worker process per core (a cold listing of 2,000 sessions)."""
        workers = min(os.cpu_count() or 1, len(stale) // PARALLEL_FROM)
        if workers < 2:
            for found in stale:
                yield found, _summarize((found, self.roots.get(found.source)))
            return
        # fork is cheap, but not safe in a process with other threads (the MCP server's)
        import multiprocessing

        method = "fork" if threading.active_count() == 1 else "spawn"
        context = multiprocessing.get_context(method)
        with context.Pool(workers) as pool:
            jobs = [(found, self.roots.get(found.source)) for found in stale]
            yield from zip(stale, pool.imap(_summarize, jobs, chunksize=16), strict=False)

    def _load_cache(self) -> dict[str, dict]:
        if self._cached is None:
            self._cached = {}
            if self.cache is not None:
                self._cached = _read_cache(self.cache)
        return self._cached

    def _save_cache(self, cached: dict[str, dict]) -> None:
        """Write the cache atomically (another process may be listing at the same time)."""
        if self.cache is None:
            return
        try:
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            temp = self.cache.with_name(f"{self.cache.name}.{os.getpid()}.tmp")
            temp.write_text(json.dumps({"version": CACHE_VERSION, "sessions": cached}),
                            encoding="utf-8")
            os.replace(temp, self.cache)
        except OSError as exc:
            log.warning("could not write the session catalog cache %s: %s", self.cache, exc)

    def summary(self, found: SessionFileRef) -> SessionSummary:
        """The listing of one file, from its head and tail where they tell it all
        (index.listing), else from the whole file."""
        from context_paging.index.listing import Listed, list_info

        root = self.roots.get(found.source)
        listed = None
        if found.source != "opencode":  # a database row, not a file with a head and a tail
            listed = list_info(str(found.path), found.source,
                               str(root) if root is not None else None)
        if listed is None:
            session = self.open(found)
            listed = Listed(session.info, session.cursor.size)
        return _summary(found, listed)


def _summary(found: SessionFileRef, listed: Listed) -> SessionSummary:
    info = listed.info
    parent = f"{found.source}:{info.parent_id}" if info.parent_id else None
    return SessionSummary(
        ref=found.ref,
        source=found.source,
        session_id=found.session_id,
        path=str(found.path),
        title=info.title,
        cwd=info.cwd,
        created=info.created,
        updated=info.updated,
        size=listed.size,
        format=info.format,
        parent=parent,
    )


def _read_cache(path: Path) -> dict[str, dict]:
    """The cached entries of ``path`` that are well formed. A missing file or an older version
    is silently empty; a file that is garbage, truncated or of the wrong shape (valid JSON all
    the same) is derived data: it is rebuilt, with one warning naming what was wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("session catalog cache %s could not be read (%s); rebuilding it", path, exc)
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        log.warning("session catalog cache %s is not JSON (%s); rebuilding it", path, exc)
        return {}
    if isinstance(value, dict) and isinstance(value.get("version"), int) and \
            value["version"] != CACHE_VERSION:
        return {}  # written by another release: rebuilt without a word
    sessions = value.get("sessions") if isinstance(value, dict) else None
    if not isinstance(sessions, dict) or value.get("version") != CACHE_VERSION:
        log.warning("session catalog cache %s has the wrong shape (not a version and a "
                    "'sessions' object); rebuilding it", path)
        return {}
    kept = {key: entry for key, entry in sessions.items() if _valid_entry(entry)}
    if len(kept) < len(sessions):
        log.warning("session catalog cache %s had %d malformed entries of %d; reading those "
                    "sessions again", path, len(sessions) - len(kept), len(sessions))
    return kept


def _valid_entry(entry: object) -> bool:
    """An entry is ``{"identity": [size, mtime_ns, inode], "summary": {SessionSummary}}``."""
    if not isinstance(entry, dict):
        return False
    identity = entry.get("identity")
    if not (isinstance(identity, list) and len(identity) == 3
            and all(type(n) is int for n in identity)):
        return False
    summary = entry.get("summary")
    return isinstance(summary, dict) and summary.keys() == _SUMMARY_TYPES.keys() and all(
        type(summary[name]) in kinds for name, kinds in _SUMMARY_TYPES.items())


# The JSON types of each SessionSummary field, checked on every cached entry (pydantic's own
# validation of 2,000 entries would double a warm listing's time).
_SUMMARY_TYPES = {
    name: (int,) if field.annotation is int else
    (str,) if field.annotation is str else (str, type(None))
    for name, field in SessionSummary.model_fields.items()
}


def _summarize(job: tuple[SessionFileRef, Path | None]) -> SessionSummary | str:
    from context_paging.index.sessions import UnknownFormat

    found, root = job  # the root goes along: the file is opened and verified inside it
    try:
        return Catalog({found.source: root}, keep_open=0).summary(found)
    except (OSError, UnknownFormat) as exc:
        return str(exc)


def _key(found: SessionFileRef) -> str:
    """A session's key in the cache: its file, or for a session in a database the database and
    the session's id."""
    if found.source == "opencode":
        return f"{found.path}#{found.session_id}"
    return str(found.path)


def _identity(found: SessionFileRef) -> list[int]:
    """What says a file is unchanged without reading it: size, mtime and inode (for OpenCode's
    database, with its write-ahead log)."""
    if found.source == "opencode":
        from context_paging.index.sources.opencode import identity

        now = identity(str(found.path))
        return [int(now["size"]), int(now["mtime_ns"]), int(now["inode"])]
    stat = found.path.stat()
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


def _in_project(cwd: str | None, project: str) -> bool:
    if not cwd:
        return False
    cwd, project = cwd.rstrip("/"), project.rstrip("/")
    if os.path.isabs(project):
        return cwd == project or cwd.startswith(project + "/")
    return project in cwd
