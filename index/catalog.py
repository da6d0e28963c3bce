"""The sessions under the configured roots, read on demand and kept up to date incrementally.

One :class:`Catalog` per process holds a :class:`~index.sessions.SessionFile` per path, so a
session that is read twice parses only what was appended in between.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from context_paging.index.discovery import SessionFileRef, iter_session_files, resolve
from context_paging.index.sessions import SessionFile, UnknownFormat

log = logging.getLogger("context_paging")


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

    def __init__(self, roots: Mapping[str, Path | None], keep_open: int = 32) -> None:
        self.roots = dict(roots)
        self.keep_open = keep_open
        self._files: OrderedDict[str, SessionFile] = OrderedDict()

    def open(self, found: SessionFileRef) -> SessionFile:
        """The up-to-date SessionFile for a discovered file."""
        key = str(found.path)
        session = self._files.pop(key, None)
        if session is None:
            root = self.roots.get(found.source)
            session = SessionFile(key, found.source, str(root) if root is not None else None)
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
        summaries = []
        for found in found_all:
            try:
                summary = self.summary(found)
            except (OSError, UnknownFormat) as exc:
                log.warning("skipped %s: %s", found.path, exc)
                continue
            if project is None or _in_project(summary.cwd, project):
                summaries.append(summary)
        summaries.sort(key=lambda s: s.updated or "", reverse=True)
        return summaries

    def summary(self, found: SessionFileRef) -> SessionSummary:
        session = self.open(found)
        info = session.info
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
            size=session.cursor.size,
            format=info.format,
            parent=parent,
        )


def _in_project(cwd: str | None, project: str) -> bool:
    if not cwd:
        return False
    cwd, project = cwd.rstrip("/"), project.rstrip("/")
    if os.path.isabs(project):
        return cwd == project or cwd.startswith(project + "/")
    return project in cwd
