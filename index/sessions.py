"""One session file, read incrementally into a Conversation and its history items.

A :class:`SessionFile` keeps the records it has parsed and a :class:`~index.jsonl.FileCursor`.
``refresh()`` parses only the bytes appended since the last read (or everything again when the
file shrank, was replaced, or its first line changed), then the source module rebuilds the
conversation from the records. Rebuilding is linear and cheap next to JSON parsing; ids come from
the records themselves, so earlier items keep their ids when the file grows.
"""

from __future__ import annotations

from functools import cached_property

from context_paging.index import sources
from context_paging.index.history import Projection, project
from context_paging.index.jsonl import FileCursor, Issue, Record
from context_paging.index.model import Conversation, SessionInfo
from context_paging.index.sources.opencode import DatabaseCursor


class UnknownFormat(ValueError):
    """The file is not a session file of a known agent (or holds no records yet)."""

    code = "UNKNOWN_SESSION"


class SessionFile:
    def __init__(self, path: str, source: str | None = None, root: str | None = None,
                 session_id: str | None = None) -> None:
        self.path = path
        self.source = source
        self.cursor: FileCursor | DatabaseCursor = FileCursor(path, root)  # stays inside root
        if source == "opencode":  # one session of a database, not a file of its own
            self.cursor = DatabaseCursor(path, session_id or "", root)
        self.records: list[Record] = []
        self.read_issues: list[Issue] = []
        self.pending = False
        self._built = False

    def refresh(self) -> bool:
        """Read what was appended. Returns True when the conversation may have changed."""
        if self._built and self.cursor.unchanged():
            return False
        chunk, restarted = self.cursor.read()
        if restarted:
            self.records, self.read_issues = [], []
        changed = restarted or bool(chunk.records) or chunk.pending != self.pending
        self.records.extend(chunk.records)
        self.read_issues.extend(chunk.issues)
        self.pending = chunk.pending
        if self.source is None and self.records:
            self.source = sources.detect(self.records, self.path)
        if changed or not self._built:
            self.__dict__.pop("conversation", None)
            self.__dict__.pop("projection", None)
            self._built = True
            return True
        return False

    @cached_property
    def conversation(self) -> Conversation:
        if not self._built:
            self.refresh()
        if self.source is None:
            raise UnknownFormat(f"{self.path} is not a Pi, Claude Code, Codex or Gemini CLI "
                                "session file")
        return sources.build(self.source, self.records, self.path)

    @cached_property
    def projection(self) -> Projection:
        return project(self.conversation.messages, self.path)

    @property
    def info(self) -> SessionInfo:
        return self.conversation.info

    @property
    def issues(self) -> list[Issue]:
        """Everything skipped while reading, building and projecting, in that order."""
        return [*self.read_issues, *self.conversation.warnings, *self.projection.issues]


def load(path: str, source: str | None = None) -> SessionFile:
    """Read a whole session file."""
    session = SessionFile(path, source)
    session.refresh()
    return session
