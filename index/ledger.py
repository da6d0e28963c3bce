"""The ledger: every conversation a host sent through ``select_context``, append-only.

``CONTEXT_PAGING_HOME/ledger/<session>.jsonl`` holds one line per message ever seen, plus a
``head`` line whenever the conversation's newest message changes:

    {"type": "message", "id": "m…", "parent": "m…"|null, "format": "anthropic", "ts": "…",
     "message": {…the host's message, exactly…}}
    {"type": "head", "id": "m…", "ts": "…"}
    {"type": "decision", "ts": "…", "decision": {…Decision.to_dict()…}}

Lines are written by :func:`index.jsonl.dump_line`: compact JSON through orjson (older ledgers
have the json module's spaced lines; any JSON reader gets the same values from both): parse
them, do not grep them.

``decision`` lines are distillation decisions (``paging.distill``), appended when a
``select_context`` pass makes them; for one target the latest line wins. Stored messages are
never rewritten: a decision only changes what later windows send, and ``recall`` reads the
original from the ``message`` line.

Ids are a hash chain: ``id = H(parent id, H(canonical JSON of the message))``, so a host that
re-sends the same prefix gets the same ids, and a host that edits or truncates its history starts
a new branch (new ids from the first changed message on) while the old branch stays stored.
Outgoing-only (``ephemeral``) messages are never stored and take no part in the chain.

Every append is on disk (``fsync``) before the call that made it answers. ``select_context``
lets the ``fsync`` run in a background thread while it selects (``durable=False``) and waits for
it, and re-raises its error, before it replies or raises (:meth:`LedgerSession.synced`): an
acknowledged call has its messages on disk, and the disk's flush costs the call no time.

A crash can leave a half-written last line; the reader treats it as pending, and the next append
cuts it off first (its message is simply appended again, since the host re-sends it). Appends
hold an exclusive ``flock`` so two server processes never interleave lines.

Per-session selection state (the cut frontier and its frozen notice, calibration memory) lives
in ``CONTEXT_PAGING_HOME/state/<session>.json``, rewritten in place on every call
(``index/home/overwrite.py``; readers take a shared lock, so they see the old or the new value).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import operator
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from context_paging.index.canonical import canonical
from context_paging.index.history import HistoryItem, join_turns, project, stored_messages
from context_paging.index.home.overwrite import overwrite
from context_paging.index.home.private import FILE_MODE, private_directory
from context_paging.index.jsonl import FileCursor, Issue, dump_line, file_identity, open_inside
from context_paging.index.model import Message
from context_paging.paging.distill import Decision
from context_paging.paging.formats import detached
from context_paging.paging.request import common_start

log = logging.getLogger("context_paging")
OPEN_SESSIONS = 64  # ledger sessions kept read in memory (Ledger.session)
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class LedgerError(ValueError):
    """A bad ledger session id, or a ledger that cannot be written."""

    code = "INVALID_SESSION"


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


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LedgerSession:
    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.ref = f"ledger:{name}"
        self.path = directory / f"{name}.jsonl"
        self.cursor = FileCursor(str(self.path), str(directory))
        self.records: dict[str, dict[str, Any]] = {}
        self.head: str | None = None
        self.issues: list[Issue] = []
        self.decisions: list[Decision] = []  # in ledger order; the latest per target wins
        self._items: tuple[str | None, int, tuple[HistoryItem, ...]] | None = None
        self._converted: dict[str, list[Message]] = {}  # id -> its Messages (ids fix the prefix)
        # The last path converted (ids, call-id -> name map after them, Messages before
        # join_turns, joinable ids) and the last projection (its Messages, its items): a
        # conversation that grew by a turn converts and projects only that turn.
        self._path: _Path | None = None
        self._projected: tuple[list[Message], tuple[HistoryItem, ...]] | None = None
        self._flushing: list[Future[None]] = []  # fsyncs still running (durable=False writes)
        # The ids from the first message to the last one the last append stored, each record's
        # parent checked: what a walk back from that id gives, known without walking (records
        # are never changed, only added; a restarted file forgets it).
        self._chain: list[str] = []
        self._flush_lock = threading.Lock()

    def refresh(self) -> None:
        if not self.path.exists():
            # Deleted since this session was read (by hand, or another server sharing the
            # home): what it held is gone, so forget it too, or the next append would take
            # those messages as stored and write only the rest (a file whose path breaks).
            if self.cursor.inode != -1 or self.records or self.head is not None:
                self.cursor = FileCursor(str(self.path), str(self.path.parent))
                self.records, self.head, self.issues = {}, None, []
                self.decisions = []
                self._converted = {}
                self._items = None
                self._path = self._projected = None
                self._chain = []
            return
        if self.cursor.unchanged():
            return
        chunk, restarted = self.cursor.read()
        if restarted:
            self.records, self.head, self.issues = {}, None, []
            self.decisions = []
            self._converted = {}
            self._path = self._projected = None
            self._chain = []
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

    def append(self, messages: Sequence[Any], ids: Sequence[str | None], fmt: str,
               durable: bool = True, copies: Sequence[Any] | None = None) -> int:
        """Store the messages not seen before and move the head. Returns how many were new.
        ``durable=False``: the lines are written, their ``fsync`` runs in the background; the
        caller must call :meth:`synced` before it acknowledges anything. ``copies``: a copy of
        each message's containers that nothing will change (``paging.request.Request.copies``),
        kept as the record's message instead of copying the message again."""
        self.refresh()
        lines: list[dict[str, Any]] = []  # the new lines' values, written by _write
        # The ids this request shares at its start with the last chain appended are stored,
        # with these very parents: only the rest is looked at (a request that grew by a turn
        # costs that turn, not the conversation).
        # (The chain holds no None: an outgoing-only message ends the shared start.)
        chain = self._chain
        start = common_start(list(ids), chain) if chain else 0
        parent = ids[start - 1] if start else None
        path, checked = chain[:start], True
        now = _now()  # one time for the whole append: the messages arrived together
        for position in range(start, len(ids)):
            message_id = ids[position]
            if message_id is None:
                continue
            record = self.records.get(message_id)
            if record is None:
                # The record holds its own containers: a library host may edit its dicts in
                # place after the call, and the record must stay what was written.
                kept = (detached(messages[position]) if copies is None
                        else copies[position])
                record = {"type": "message", "id": message_id, "parent": parent, "format": fmt,
                          "ts": now, "message": kept}
                lines.append(record)
                self.records[message_id] = record
            elif record.get("parent") != parent:
                checked = False  # a record stored with another parent: walks decide
            path.append(message_id)
            parent = message_id
        self._chain = path if checked else []
        new = len(lines)
        new_head = parent
        if new_head != self.head:
            lines.append({"type": "head", "id": new_head, "ts": now})
            self.head = new_head
        if lines:
            self._write(lines, durable)
        return new

    def append_decisions(self, decisions: Sequence[Decision], durable: bool = True) -> None:
        """Persist new distillation decisions (read back by :meth:`refresh` after a restart)."""
        if not decisions:
            return
        self.refresh()
        now = _now()
        values = [d.to_dict() for d in decisions]
        lines = [{"type": "decision", "ts": now, "decision": v} for v in values]
        # True: nothing else was written in between, these are the next lines
        if self._write(lines, durable):
            self.decisions.extend(Decision.from_dict(v) for v in values)
        else:
            self.refresh()  # read back in ledger order, after any other process's lines

    def synced(self) -> None:
        """Wait for every background ``fsync`` of this session's appends; the first that failed
        raises its ``OSError`` (the caller reports a storage error, as for a failed write)."""
        with self._flush_lock:
            pending = list(self._flushing)
        failure: BaseException | None = None
        for future in pending:  # each waits for all: another thread's call may hold ours
            error = future.exception()
            failure = failure or error
        with self._flush_lock:
            self._flushing = [f for f in self._flushing if f not in pending]
        if failure is not None:
            raise failure

    def _write(self, lines: list[Any], durable: bool = True) -> bool:
        """Append the lines (their values, each written by ``dump_line``) under the lock.
        Returns True when the file held exactly what this session had read before them, and
        moves the cursor past them: a 15 MB first append is then not read back and parsed
        again (the caller has the values already).

        Each line is written as soon as it is made and then dropped, so the next one is made in
        the memory it used: made all first, the 15 MiB of a first append were fresh memory,
        every page of it faulting in (half the append's time on the bench), and so was every
        piece they were joined into. Still under the lock, so no other process's line comes
        between them; a crash between two lines leaves the lines before it, and one cut off
        inside a write is cut off by the next append."""
        private_directory(self.path.parent)
        with open(self.path, "a+b", opener=_no_follow) as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                size = os.fstat(handle.fileno()).st_size
                if size and os.pread(handle.fileno(), 1, size - 1) != b"\n":
                    _cut_partial_line(handle, size)
                start = os.fstat(handle.fileno()).st_size
                for value in lines:
                    handle.write(dump_line(value))
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
                else:  # a second descriptor keeps the file open for the background fsync
                    self._flush_later(os.dup(handle.fileno()))
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

    def _flush_later(self, fd: int) -> None:
        def flush() -> None:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        try:
            future = _flusher().submit(flush)
        except RuntimeError:  # the interpreter is shutting down: flush here
            flush()
            return
        with self._flush_lock:
            self._flushing.append(future)

    def path_ids(self) -> list[str]:
        """Ids from the first message to the head (the conversation the host sent last)."""
        if self._chain and self._chain[-1] == self.head:
            return list(self._chain)
        out: list[str] = []
        seen: set[str] = set()
        current = self.head
        # The walk back may stop at an id of the last path converted: the rest of the walk
        # would retrace that path's start (records are only ever added, never changed, and its
        # first message still has no parent, so the walk would end there again).
        cached = self._path
        known = cached.at if cached is not None and cached.ids and self.records[
            cached.ids[0]].get("parent") is None else {}
        while current is not None and current in self.records and current not in seen:
            position = known.get(current)
            if position is not None:
                return [*cached.ids[:position + 1], *reversed(out)]  # type: ignore[union-attr]
            seen.add(current)
            out.append(current)
            current = self.records[current].get("parent")
        return out[::-1]

    def path_to(self, message_id: str) -> list[str] | None:
        """Ids from the first message to ``message_id``, or None if it is not stored here."""
        if self._chain and self._chain[-1] == message_id:  # the usual after_id: the last head
            return list(self._chain)
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
        ids = self.path_ids()
        # Chain ids commit to their whole prefix: the ids this path shares at its start with
        # the last one converted are the same conversation, already converted (with the same
        # call names); the last path is cut back to them and only the ids after are new.
        cached = self._path
        if cached is None:
            cached = self._path = _Path()
        start = cached.cut(common_start(ids, cached.ids))
        names, out, joinable = cached.names, cached.out, cached.joinable
        for names.position, message_id in enumerate(ids[start:], start):
            converted = self._converted.get(message_id)
            if converted is None:
                record = self.records[message_id]
                body = record.get("message")
                converted = stored_messages(
                    body, str(record.get("format", "pi")), message_id, names,
                    str(record.get("ts", "")),
                ) if isinstance(body, dict) else []
                self._converted[message_id] = converted
            else:
                _remember_names(converted, names)
            if self.records[message_id].get("format") == "responses":
                joinable.add(message_id)
            out.extend(converted)
            cached.add(message_id, len(out))
        return join_turns(out, joinable) if joinable else list(out)

    def items(self) -> tuple[HistoryItem, ...]:
        self.refresh()
        key = (self.head, len(self.records))
        if self._items is None or self._items[:2] != key:
            messages = self.messages()
            items = _project_extending(self._projected, messages, str(self.path))
            self._projected = (messages, items)
            self._items = (*key, items)
        return self._items[2]

    def file_state(self) -> dict[str, Any]:
        stat = self.path.stat() if self.path.exists() else None
        return {"path": str(self.path), "size": stat.st_size if stat else 0,
                "mtime_ns": stat.st_mtime_ns if stat else 0, "head": self.head}


def _project_extending(previous: tuple[list[Message], tuple[HistoryItem, ...]] | None,
                       messages: list[Message], path: str) -> tuple[HistoryItem, ...]:
    """``project(messages).items``, reusing the previous projection for a shared prefix.

    ``project`` starts afresh at every user message: what it makes before one depends only on
    the messages before it (the look-ahead for tool results stops at a user message). So when
    the first ``k`` Messages are the very objects projected last time and the ``k``-th is a
    user message, the items before that message's item are unchanged; only the rest is
    projected, and its items renumbered after them. Anything else projects everything."""
    if previous is None:
        return project(messages, path).items
    old, old_items = previous
    # The leading Messages that are the very same objects (compared in C, not in a loop).
    same = list(map(operator.is_, old, messages))
    common = same.index(False) if False in same else len(same)
    boundary = next((k for k in range(common - 1, 0, -1) if messages[k].role == "user"), None)
    if boundary is None:
        return project(messages, path).items
    anchor = messages[boundary]
    before = next((n for n in range(len(old_items) - 1, -1, -1)
                   if old_items[n].kind == "user" and old_items[n].message is anchor), None)
    if before is None:
        return project(messages, path).items
    tail = project(messages[boundary:], path).items
    return old_items[:before] + tuple(replace(item, sequence=item.sequence + before)
                                      for item in tail)


_MISSING = object()


class _Names(dict[str, str]):
    """The call-id -> tool-name map of a converted path, logging each write with the path
    position being converted, so the map can be wound back to what it was before a position
    (conversion writes it with ``names[id] = name``, which this class sees)."""

    def __init__(self) -> None:
        super().__init__()
        self.position = 0
        self.log: list[tuple[int, str, Any]] = []

    def __setitem__(self, key: str, value: str) -> None:
        self.log.append((self.position, key, self.get(key, _MISSING)))
        super().__setitem__(key, value)

    def rewind(self, position: int) -> None:
        """Undo every write made at ``position`` or later, newest first."""
        log = self.log
        while log and log[-1][0] >= position:
            _, key, old = log.pop()
            if old is _MISSING:
                super().__delitem__(key)
            else:
                super().__setitem__(key, old)


class _Path:
    """The last path converted: its ids (``at``: id -> position), the Messages they became
    (``ends``: how many after each id), before ``join_turns``, the names map after them and the
    ids of Responses items (joinable)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.at: dict[str, int] = {}
        self.ends: list[int] = []
        self.out: list[Message] = []
        self.names = _Names()
        self.joinable: set[str] = set()

    def cut(self, keep: int) -> int:
        """Forget every id from position ``keep`` on, as if only the first ``keep`` had been
        converted; returns ``keep``."""
        for message_id in self.ids[keep:]:
            del self.at[message_id]
            self.joinable.discard(message_id)
        del self.ids[keep:], self.ends[keep:]
        del self.out[self.ends[-1] if self.ends else 0:]
        self.names.rewind(keep)
        return keep

    def add(self, message_id: str, end: int) -> None:
        self.at[message_id] = len(self.ids)
        self.ids.append(message_id)
        self.ends.append(end)


def _remember_names(messages: Sequence[Message], names: dict[str, str]) -> None:
    """Keep the call-id → tool-name map complete when converted messages come from the cache."""
    for message in messages:
        for call in message.tool_calls:
            names[call.id] = call.name


_FLUSHER: list[ThreadPoolExecutor] = []
_FLUSHER_LOCK = threading.Lock()


# Background fsyncs at once: each call waits for its own session's before it answers, so with
# one thread a conversation waited for every other conversation's flush queued ahead of it
# (16 ms at p50 with eight conversations at once through the proxy; docs/proxy.md).
FLUSH_THREADS = 8


def _flusher() -> ThreadPoolExecutor:
    """The threads for background fsyncs (the syscall releases the GIL, so it runs while the
    caller selects); made on first use."""
    with _FLUSHER_LOCK:
        if not _FLUSHER:
            _FLUSHER.append(ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="ledger-fsync"))
        return _FLUSHER[0]


def _no_follow(path: str, flags: int) -> int:
    """``open`` opener for files in the home: never write through a symlink planted there."""
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)


def _cut_partial_line(handle: Any, size: int) -> None:
    """Drop a half-written last line (a crash mid-append) before writing after it. Read through
    the append handle itself, so a link swapped in for the path is never read."""
    data = os.pread(handle.fileno(), size, 0)
    keep = data.rfind(b"\n") + 1
    handle.truncate(keep)


class Ledger:
    def __init__(self, home: Path) -> None:
        self.directory = home / "ledger"
        self.state_directory = home / "state"
        # The sessions read lately, each holding all its messages: a long-running server that
        # sees many sessions keeps only the last OPEN_SESSIONS (a session dropped is read from
        # its file again when it comes back; the file is the truth, as for another process).
        self._sessions: OrderedDict[str, LedgerSession] = OrderedDict()
        self._open_lock = threading.Lock()  # the table above: calls of several sessions at once

    def session(self, ref: str) -> LedgerSession:
        name = check_session_id(ref)
        with self._open_lock:
            session = self._sessions.get(name)
            if session is None:
                session = self._sessions[name] = LedgerSession(self.directory, name)
                self._forget_oldest()
            else:
                self._sessions.move_to_end(name)
        session.refresh()
        return session

    def _forget_oldest(self) -> None:
        """Drop the least recently used sessions past OPEN_SESSIONS, except one whose appends
        are not known to be on disk yet (its :meth:`synced` must still find them)."""
        excess = len(self._sessions) - OPEN_SESSIONS
        for name in list(self._sessions)[:max(0, excess)]:
            if not self._sessions[name]._flushing:
                del self._sessions[name]

    def synced(self, ref: str) -> None:
        """:meth:`LedgerSession.synced` for a session this ledger has open (nothing to wait
        for otherwise, or for an id that is not valid)."""
        session = self._sessions.get(ref.removeprefix("ledger:")) if isinstance(ref, str) else None
        if session is not None:
            session.synced()

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
        """The saved selection state, or ``{}``. A damaged file (not JSON, nested too deep, a
        field of the wrong type) only costs the cut point and calibration: it is moved aside to
        ``<session>.json.broken`` with one warning, so the next call starts clean."""
        path = self.state_directory / f"{check_session_id(ref)}.json"
        try:
            with open_inside(path, self.state_directory) as handle:
                fcntl.flock(handle, fcntl.LOCK_SH)  # save_state writes in place under LOCK_EX
                value = json.loads(handle.read().decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:
            problem = f"{type(exc).__name__}: {str(exc)[:200]}"
        else:
            problem = state_problem(value)
            if problem is None:
                return value
        log.warning("state file %s is damaged (%s); moved aside, the cut point starts over",
                    path, problem)
        try:
            os.replace(path, path.with_name(path.name + ".broken"))
        except OSError:
            pass  # the next save replaces it anyway
        return {}

    def save_state(self, ref: str, state: dict[str, Any]) -> None:
        private_directory(self.state_directory)
        path = self.state_directory / f"{check_session_id(ref)}.json"
        # In place, not a rename over the old file (about 2 ms a call on ext4):
        # index/home/overwrite.py
        overwrite(path, json.dumps(state, ensure_ascii=False).encode("utf-8"))


def _number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def state_problem(value: Any) -> str | None:
    """What is wrong with a loaded state value, or None. Checks every field a later call reads
    (index.window.state), so a bad field cannot survive into the next save or break paging_stats."""
    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__}, not an object"
    settings = value.get("settings")
    if settings is not None and not (isinstance(settings, list) and len(settings) == 2):
        return "settings is not a pair"
    for key in ("cut", "anchor", "latest"):
        if value.get(key) is not None and not isinstance(value[key], dict):
            return f"{key} is not an object"
    latest = value.get("latest") or {}
    for key in ("estimated_tokens", "budget_tokens"):
        if latest.get(key) is not None and not _number(latest[key]):
            return f"latest.{key} is not a number"
    if latest.get("mode") is not None and not isinstance(latest["mode"], str):
        return "latest.mode is not a string"
    usage = value.get("usage_by_response")
    if usage is not None:
        if not isinstance(usage, dict):
            return "usage_by_response is not an object"
        for pair in usage.values():
            if not (isinstance(pair, list) and len(pair) == 2
                    and all(_number(n) and n >= 0 for n in pair)):
                return "usage_by_response holds a value that is not two token counts"
    if value.get("model_window") is not None and not _number(value["model_window"]):
        return "model_window is not a number"
    evicted = value.get("evicted_messages")
    if evicted is not None and not (isinstance(evicted, int) and not isinstance(evicted, bool)):
        return "evicted_messages is not an integer"
    if not isinstance(value.get("calibrated", False), bool):
        return "calibrated is not true or false"
    return None
