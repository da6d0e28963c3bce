"""OpenCode sessions (its SQLite store) → :class:`Conversation`.

OpenCode 1.18 keeps every session of a user in one SQLite database, ``opencode.db`` in its data
folder (``~/.local/share/opencode``), written in WAL mode (docs/sessions.md, "OpenCode"). The
tables read are ``session`` (id, title, directory, version, parent, times in Unix ms),
``message`` (one row per user request or assistant response, JSON ``data`` with ``role``,
``modelID``, ``tokens``) and ``part`` (JSON ``data`` by ``type``: ``text``, ``reasoning``,
``tool`` with its ``state`` — input, output or error — ``file``, ``step-start``,
``step-finish``, ``patch``, ``snapshot``, …).

The database is opened read only and never written. One session is read into records, so the
rest of the index treats it like a session file: the first record is the session row, then
one record per message with its parts, oldest first. ``build`` turns them into messages:

* a user message's ``text`` parts are the prompt (``synthetic`` ones, which OpenCode adds as
  context, are counted, not shown); ``file`` parts with inline data are images;
* an assistant message is one response per ``step-start`` (most hold one step): its ``text``
  parts, its ``reasoning`` parts as private slots (never text), its ``tool`` parts as calls,
  each followed by a tool result holding the call's output (or its error);
* usage is the message's ``tokens`` (``input``, ``output``, ``reasoning``, ``cache.read``,
  ``cache.write``), once per message.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from context_paging.index.jsonl import Chunk, Issue, Record, open_inside
from context_paging.index.model import (
    Block,
    Conversation,
    HiddenBlock,
    ImageBlock,
    Message,
    SessionInfo,
    TextBlock,
    ToolCall,
    Usage,
)

log = logging.getLogger("context_paging")
DATABASE = "opencode.db"
_TITLE_CHARS = 80
_COUNTED_PARTS = ("step-start", "step-finish", "patch", "snapshot", "agent", "subtask",
                  "compaction", "retry")


class DatabaseError(OSError):
    """The database could not be read (locked, damaged, not OpenCode's)."""


def _connect(path: str, root: str | None) -> sqlite3.Connection:
    with open_inside(path, root):  # the file is where it should be, no symlink out of root
        pass
    try:
        connection = sqlite3.connect(f"file:{quote(os.path.realpath(path))}?mode=ro", uri=True,
                                     timeout=2.0)
        connection.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        raise DatabaseError(f"{path}: {exc}") from exc
    return connection


def session_ids(path: str, root: str | None = None) -> list[str]:
    """The ids of the sessions in the database, oldest first (none, with one warning, when it
    cannot be read)."""
    try:
        connection = _connect(path, root)
    except OSError as exc:
        log.warning("OpenCode's sessions not listed: %s", exc)
        return []
    try:
        rows = connection.execute("SELECT id FROM session ORDER BY time_created, id").fetchall()
    except sqlite3.Error as exc:
        log.warning("OpenCode's sessions not listed: %s: %s", path, exc)
        return []
    finally:
        connection.close()
    return [row[0] for row in rows if isinstance(row[0], str)]


def identity(path: str) -> dict[str, object]:
    """What tells that the database changed without reading it: the database and its write-ahead
    log together (a write lands in the log first and reaches the database file much later)."""
    with open_inside(path) as handle:
        stat = os.fstat(handle.fileno())
    size, mtime = stat.st_size, stat.st_mtime_ns
    try:
        log = os.stat(f"{path}-wal")
        size, mtime = size + log.st_size, max(mtime, log.st_mtime_ns)
    except OSError:
        pass
    return {"path": path, "size": size, "mtime_ns": mtime, "inode": stat.st_ino,
            "head": "opencode"}


def read_records(path: str, session_id: str, root: str | None = None) -> list[Record]:
    """One session as records: the session row, then each message with its parts."""
    connection = _connect(path, root)
    try:
        connection.row_factory = sqlite3.Row
        row = connection.execute("SELECT * FROM session WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise DatabaseError(f"{path}: no OpenCode session {session_id!r}")
        messages = connection.execute(
            "SELECT id, time_created, data FROM message WHERE session_id = ? "
            "ORDER BY time_created, id", (session_id,)).fetchall()
        parts = connection.execute(
            "SELECT id, message_id, data FROM part WHERE session_id = ? ORDER BY id",
            (session_id,)).fetchall()
    except sqlite3.Error as exc:
        raise DatabaseError(f"{path}: {exc}") from exc
    finally:
        connection.close()
    by_message: dict[str, list[Any]] = {}
    for part in parts:
        by_message.setdefault(part["message_id"], []).append(
            {"id": part["id"], "data": _json(part["data"])})
    records = [Record(1, 0, {"session": dict(row)})]
    for number, message in enumerate(messages, start=2):
        records.append(Record(number, 0, {"message": {
            "id": message["id"], "time_created": message["time_created"],
            "data": _json(message["data"])}, "parts": by_message.get(message["id"], [])}))
    return records


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


@dataclass(slots=True)
class DatabaseCursor:
    """The cursor of one session in the database: it reads the session whole whenever the
    database changed (an OpenCode session is small next to a transcript file)."""

    path: str
    session_id: str
    root: str | None = None
    inode: int = -1
    head: str = ""
    size: int = 0
    mtime_ns: int = 0
    bytes_parsed_total: int = field(default=0)

    def read(self) -> tuple[Chunk, bool]:
        now = identity(self.path)
        records = read_records(self.path, self.session_id, self.root)
        self.size, self.mtime_ns = int(now["size"]), int(now["mtime_ns"])
        self.inode, self.head = int(now["inode"]), str(now["head"])
        return Chunk(records, [], 0, len(records) + 1, 0, False), True

    def unchanged(self) -> bool:
        try:
            now = identity(self.path)
        except OSError:
            return False
        return (now["size"], now["mtime_ns"], now["inode"]) == (
            self.size, self.mtime_ns, self.inode)


# --- messages -------------------------------------------------------------------------


@dataclass(slots=True)
class _Log:
    path: str
    issues: list[Issue] = field(default_factory=list)

    def warn(self, record: Record, kind: str, message: str) -> None:
        self.issues.append(Issue(self.path, record.line, record.offset, kind, message))


def build(records: Sequence[Record], path: str) -> Conversation:
    log = _Log(path)
    session: dict[str, Any] = {}
    stats = {"messages": 0, "user": 0, "assistant": 0, "tool_results": 0, "tool_calls": 0,
             "hidden_blocks": 0, "skipped_context": 0, "other_parts": 0}
    out: list[Message] = []
    usage: Usage | None = None
    for record in records:
        value = record.value if isinstance(record.value, dict) else {}
        if isinstance(value.get("session"), dict):
            session = value["session"]
            continue
        message = value.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("data"), dict):
            log.warn(record, "bad_message", "a message without its data skipped")
            continue
        stats["messages"] += 1
        parts = [p for p in value.get("parts") or () if isinstance(p, dict)
                 and isinstance(p.get("data"), dict)]
        role = message["data"].get("role")
        if role == "user":
            prompt = _user(message, parts, record, stats)
            if prompt is not None:
                out.append(prompt)
        elif role == "assistant":
            out.extend(_assistant(message, parts, record, stats))
            counted = _usage(message["data"].get("tokens"))
            if counted is not None:
                usage = counted if usage is None else usage + counted
        else:
            log.warn(record, "unknown_role", f"message role {role!r} skipped")
    return Conversation(info=_info(session, out, path), messages=tuple(out),
                        warnings=tuple(log.issues), usage=usage, stats=stats)


def _stamp(millis: Any) -> str:
    if not isinstance(millis, int | float) or isinstance(millis, bool):
        return ""
    try:
        moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return ""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _user(message: dict[str, Any], parts: list[dict[str, Any]], record: Record,
          stats: dict[str, int]) -> Message | None:
    blocks: list[Block] = []
    for part in parts:
        data = part["data"]
        if data.get("type") == "text" and isinstance(data.get("text"), str):
            if data.get("synthetic") is True:
                stats["skipped_context"] += 1
            else:
                blocks.append(TextBlock(data["text"]))
        elif data.get("type") == "file" and isinstance(data.get("url"), str) and \
                data["url"].startswith("data:") and str(data.get("mime", "")).startswith("image/"):
            blocks.append(ImageBlock(str(data["mime"]), data["url"].partition(",")[2]))
        else:
            stats["other_parts"] += 1
    if not blocks:
        return None
    stats["user"] += 1
    return Message("user", str(message.get("id")), _stamp(message.get("time_created")),
                   tuple(blocks), record.line)


def _assistant(message: dict[str, Any], parts: list[dict[str, Any]], record: Record,
               stats: dict[str, int]) -> list[Message]:
    """One assistant message per step, each followed by its tool results."""
    data = message["data"]
    steps: list[list[dict[str, Any]]] = [[]]
    for part in parts:
        if part["data"].get("type") == "step-start" and steps[-1]:
            steps.append([])
        steps[-1].append(part)
    model = data.get("modelID") if isinstance(data.get("modelID"), str) else None
    stamp = _stamp(message.get("time_created"))
    finish = data.get("finish")
    out: list[Message] = []
    for number, step in enumerate(steps):
        blocks: list[Block] = []
        results: list[Message] = []
        for part in step:
            part_data, kind = part["data"], part["data"].get("type")
            if kind == "text" and isinstance(part_data.get("text"), str):
                blocks.append(TextBlock(part_data["text"]))
            elif kind == "reasoning":
                stats["hidden_blocks"] += 1
                blocks.append(HiddenBlock("thinking"))
            elif kind == "tool" and isinstance(part_data.get("callID"), str):
                call, result = _tool(part_data, part, stamp, record)
                stats["tool_calls"] += 1
                blocks.append(call)
                if result is not None:
                    stats["tool_results"] += 1
                    results.append(result)
            elif kind not in _COUNTED_PARTS:
                stats["other_parts"] += 1
        if not blocks and number > 0:
            continue
        stats["assistant"] += 1
        last = number == len(steps) - 1
        stop = "tool_use" if results else ("stop" if last and finish == "stop" else None)
        ident = str(message.get("id")) + (f".{number}" if number else "")
        out.append(Message("assistant", ident, stamp, tuple(blocks), record.line,
                           stop_reason=stop, model=model,
                           usage=_usage(data.get("tokens")) if last else None))
        out.extend(results)
    return out


def _tool(data: dict[str, Any], part: dict[str, Any], stamp: str,
          record: Record) -> tuple[ToolCall, Message | None]:
    state = data.get("state") if isinstance(data.get("state"), dict) else {}
    name = data.get("tool") if isinstance(data.get("tool"), str) else ""
    arguments = state.get("input") if state.get("input") is not None else {}
    call = ToolCall(data["callID"], name, arguments)
    status = state.get("status")
    if status == "completed" and isinstance(state.get("output"), str):
        text, error = state["output"], False
    elif status == "error":
        text, error = str(state.get("error") or ""), True
    else:
        return call, None
    return call, Message("tool_result", f"{part.get('id')}.result", stamp, (TextBlock(text),),
                         record.line, tool_call_id=data["callID"], tool_name=name,
                         is_error=error)


def _usage(tokens: Any) -> Usage | None:
    if not isinstance(tokens, dict):
        return None

    def count(value: Any) -> int:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return max(int(value), 0) if ok else 0

    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    return Usage(count(tokens.get("input")), count(tokens.get("output")),
                 count(cache.get("read")), count(cache.get("write")),
                 count(tokens.get("reasoning")) if "reasoning" in tokens else None)


def _info(session: dict[str, Any], messages: list[Message], path: str) -> SessionInfo:
    def text(key: str) -> str | None:
        value = session.get(key)
        return value if isinstance(value, str) and value else None

    version = text("version")
    return SessionInfo(
        source="opencode",
        session_id=text("id") or "",
        path=path,
        cwd=text("directory"),
        title=text("title") or _title(messages),
        created=_stamp(session.get("time_created")) or None,
        updated=_stamp(session.get("time_updated")) or None,
        format=f"opencode-{version}" if version else "opencode",
        parent_id=text("parent_id"),
        parent_kind="subagent" if text("parent_id") else None,
    )


def _title(messages: list[Message]) -> str | None:
    for message in messages:
        for block in message.content if message.role == "user" else ():
            line = next((s.strip() for s in getattr(block, "text", "").splitlines()
                         if s.strip()), "")
            if line:
                return line[:_TITLE_CHARS]
    return None
