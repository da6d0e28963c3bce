"""The ledger: every conversation a host sent through ``select_context``, append-only.

``CONTEXT_PAGING_HOME/ledger/<session>.jsonl`` holds one line per message ever seen, plus a
``head`` line whenever the conversation's newest message changes:

    {"type": "message", "id": "m…", "parent": "m…"|null, "format": "anthropic", "ts": "…",
     "message": {…the host's message, exactly…}}
    {"type": "head", "id": "m…", "ts": "…"}
    {"type": "decision", "ts": "…", "decision": {…Decision.to_dict()…}}

``decision`` lines are distillation decisions (``paging.distill``), appended when a
``select_context`` pass makes them; for one target the latest line wins. Stored messages are
never rewritten: a decision only changes what later windows send, and ``recall`` reads the
original from the ``message`` line.

Ids are a hash chain: ``id = H(parent id, H(canonical JSON of the message))``, so a host that
re-sends the same prefix gets the same ids, and a host that edits or truncates its history starts
a new branch (new ids from the first changed message on) while the old branch stays stored.
Outgoing-only (``ephemeral``) messages are never stored and take no part in the chain.

A crash can leave a half-written last line; the reader treats it as pending, and the next append
cuts it off first (its message is simply appended again, since the host re-sends it). Appends
hold an exclusive ``flock`` so two server processes never interleave lines.

Per-session selection state (the cut frontier and its frozen notice, calibration memory) lives
in ``CONTEXT_PAGING_HOME/state/<session>.json``, replaced atomically.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from context_paging.index.canonical import canonical
from context_paging.index.canonical import line as json_line
from context_paging.index.history import HistoryItem, project
from context_paging.index.jsonl import FileCursor, Issue, file_identity
from context_paging.index.model import Message
from context_paging.index.sources.hosts import host_messages
from context_paging.paging.distill import Decision

_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class LedgerError(ValueError):
    """A bad ledger session id, or a ledger that cannot be written."""


def check_session_id(session: str) -> str:
    name = session.removeprefix("ledger:")
    if not _SESSION_ID.match(name) or ".." in name:
        raise LedgerError(
            f"ledger session id {session!r} is not allowed: use 1–128 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return name


def fingerprint(message: Any) -> str:
    """Content hash of one message: canonical JSON (sorted keys, ASCII), stable across processes.

    SHA-256 because it is the fastest hash here (CPU instructions). The canonical bytes come
    from :func:`index.canonical.canonical` (orjson where it writes the same bytes).
    """
    return hashlib.sha256(canonical(message)).hexdigest()[:32]


def chain_ids(fingerprints: Sequence[str | None]) -> list[str | None]:
    """History ids for a conversation; ``None`` fingerprints (ephemeral messages) get no id."""
    ids: list[str | None] = []
    previous = ""
    for fp in fingerprints:
        if fp is None:
            ids.append(None)
            continue
        previous = "m" + hashlib.blake2b(f"{previous}:{fp}".encode(), digest_size=10).hexdigest()
        ids.append(previous)
    return ids


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LedgerSession:
    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.ref = f"ledger:{name}"
        self.path = directory / f"{name}.jsonl"
        self.cursor = FileCursor(str(self.path))
        self.records: dict[str, dict[str, Any]] = {}
        self.head: str | None = None
        self.issues: list[Issue] = []
        self.decisions: list[Decision] = []  # in ledger order; the latest per target wins
        self._items: tuple[str | None, int, tuple[HistoryItem, ...]] | None = None
        self._converted: dict[str, list[Message]] = {}  # id -> its Messages (ids fix the prefix)

    def refresh(self) -> None:
        if not self.path.exists() or self.cursor.unchanged():
            return
        chunk, restarted = self.cursor.read()
        if restarted:
            self.records, self.head, self.issues = {}, None, []
            self.decisions = []
            self._converted = {}
        self.issues.extend(chunk.issues)
        for record in chunk.records:
            value = record.value
            if value.get("type") == "message" and isinstance(value.get("id"), str):
                self.records.setdefault(value["id"], value)
            elif value.get("type") == "head":
                self.head = value.get("id") if isinstance(value.get("id"), str) else None
            elif value.get("type") == "decision" and isinstance(value.get("decision"), dict):
                try:
                    self.decisions.append(Decision.from_dict(value["decision"]))
                except (TypeError, ValueError):
                    continue  # a decision this version cannot read: that output stays whole

    def append(self, messages: Sequence[Any], ids: Sequence[str | None], fmt: str) -> int:
        """Store the messages not seen before and move the head. Returns how many were new."""
        self.refresh()
        lines = []
        parent = None
        for message, message_id in zip(messages, ids, strict=True):
            if message_id is None:
                continue
            if message_id not in self.records:
                record = {"type": "message", "id": message_id, "parent": parent, "format": fmt,
                          "ts": _now(), "message": message}
                lines.append(record)
                self.records[message_id] = record
            parent = message_id
        new_head = parent
        if new_head != self.head:
            lines.append({"type": "head", "id": new_head, "ts": _now()})
            self.head = new_head
        if lines:
            self._write(lines)
        return sum(1 for line in lines if line["type"] == "message")

    def append_decisions(self, decisions: Sequence[Decision]) -> None:
        """Persist new distillation decisions (read back by :meth:`refresh` after a restart)."""
        if not decisions:
            return
        self.refresh()
        lines = [{"type": "decision", "ts": _now(), "decision": d.to_dict()} for d in decisions]
        if self._write(lines):  # nothing else was written in between: these are the next lines
            self.decisions.extend(Decision.from_dict(line["decision"]) for line in lines)
        else:
            self.refresh()  # read back in ledger order, after any other process's lines

    def _write(self, lines: list[dict[str, Any]]) -> bool:
        """Append the lines under the lock. Returns True when the file held exactly what this
        session had read before them, and moves the cursor past them: a 15 MB first append is
        then not read back and parsed again (the caller has the lines already)."""
        data = b"".join(json_line(line) for line in lines)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                size = os.fstat(handle.fileno()).st_size
                if size and _last_byte(self.path) != b"\n":
                    _cut_partial_line(handle, self.path)
                start = os.fstat(handle.fileno()).st_size
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
                stat = os.fstat(handle.fileno())
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        cursor = self.cursor
        if start != cursor.offset or (start and stat.st_ino != cursor.inode):
            return False
        cursor.offset, cursor.next_line = stat.st_size, cursor.next_line + len(lines)
        cursor.size, cursor.mtime_ns, cursor.inode = stat.st_size, stat.st_mtime_ns, stat.st_ino
        if start == 0:
            cursor.head = file_identity(str(self.path))["head"]  # type: ignore[assignment]
        return True

    def path_ids(self) -> list[str]:
        """Ids from the first message to the head (the conversation the host sent last)."""
        out: list[str] = []
        seen: set[str] = set()
        current = self.head
        while current is not None and current in self.records and current not in seen:
            seen.add(current)
            out.append(current)
            current = self.records[current].get("parent")
        return out[::-1]

    def path_to(self, message_id: str) -> list[str] | None:
        """Ids from the first message to ``message_id``, or None if it is not stored here."""
        out: list[str] = []
        seen: set[str] = set()
        current: str | None = message_id
        while current is not None:
            record = self.records.get(current)
            if record is None or current in seen:
                return None
            seen.add(current)
            out.append(current)
            current = record.get("parent")
        return out[::-1]

    def messages(self) -> list[Message]:
        names: dict[str, str] = {}
        out: list[Message] = []
        for message_id in self.path_ids():
            converted = self._converted.get(message_id)
            if converted is None:
                record = self.records[message_id]
                body = record.get("message")
                converted = host_messages(
                    body, str(record.get("format", "pi")), message_id, names,
                    str(record.get("ts", "")),
                ) if isinstance(body, dict) else []
                self._converted[message_id] = converted
            else:
                _remember_names(converted, names)
            out.extend(converted)
        return out

    def items(self) -> tuple[HistoryItem, ...]:
        self.refresh()
        key = (self.head, len(self.records))
        if self._items is None or self._items[:2] != key:
            self._items = (*key, project(self.messages(), str(self.path)).items)
        return self._items[2]

    def file_state(self) -> dict[str, Any]:
        stat = self.path.stat() if self.path.exists() else None
        return {"path": str(self.path), "size": stat.st_size if stat else 0,
                "mtime_ns": stat.st_mtime_ns if stat else 0, "head": self.head}


def _remember_names(messages: Sequence[Message], names: dict[str, str]) -> None:
    """Keep the call-id → tool-name map complete when converted messages come from the cache."""
    for message in messages:
        for call in message.tool_calls:
            names[call.id] = call.name


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1)


def _cut_partial_line(handle: Any, path: Path) -> None:
    """Drop a half-written last line (a crash mid-append) before writing after it."""
    with open(path, "rb") as reader:
        data = reader.read()
    keep = data.rfind(b"\n") + 1
    handle.truncate(keep)


class Ledger:
    def __init__(self, home: Path) -> None:
        self.directory = home / "ledger"
        self.state_directory = home / "state"
        self._sessions: dict[str, LedgerSession] = {}

    def session(self, ref: str) -> LedgerSession:
        name = check_session_id(ref)
        session = self._sessions.get(name)
        if session is None:
            session = self._sessions[name] = LedgerSession(self.directory, name)
        session.refresh()
        return session

    def sessions(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(f"ledger:{p.stem}" for p in self.directory.glob("*.jsonl"))

    def open(self, ref: str) -> tuple[str, str, Sequence[HistoryItem], dict[str, Any]]:
        """(ref, cwd, items, file state) — the shape index.service.History expects."""
        session = self.session(ref)
        if not session.path.exists():
            from context_paging.index.discovery import SessionRefError

            raise SessionRefError(f"no ledger session {ref!r}; select_context creates one")
        return session.ref, "", session.items(), session.file_state()

    # --- selection state ----------------------------------------------------------------------

    def load_state(self, ref: str) -> dict[str, Any]:
        path = self.state_directory / f"{check_session_id(ref)}.json"
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # a damaged state file only costs the cut point; the ledger is intact
        return value if isinstance(value, dict) else {}

    def save_state(self, ref: str, state: dict[str, Any]) -> None:
        self.state_directory.mkdir(parents=True, exist_ok=True)
        path = self.state_directory / f"{check_session_id(ref)}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
