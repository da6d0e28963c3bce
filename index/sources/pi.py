"""Pi (badlogic/pi-mono coding agent) session files → :class:`Conversation`.

The format (docs/sessions.md, "Pi"): a ``type:"session"`` header, then one *entry* per
line. Versions 2 and 3 link entries into a tree by ``id``/``parentId``; version 1 (legacy) is a
plain list without ids. Reading works like pi's own loader, in memory:

* **Header.** Looked for among the first 5 objects (forks put a title line before it).
  A file without one still loads, with a ``missing_header`` warning: the session id then comes
  from the file name and the version from the entries (ids present → v3, else v1).
* **v1 → v2.** Each entry gets the synthetic id ``L<line>`` (a second object glued on the same
  line ``L<line>.1``, …) and the previous entry as its parent, so ids never change as the file
  grows. ``firstKeptEntryIndex`` (an index into the file's objects, header = 0) becomes
  :attr:`Entry.first_kept_id`. **v2 → v3.** Role ``hookMessage`` is read as ``custom``.
* **Active branch**. The leaf is the last entry in file order. A ``leaf`` entry moves it
  to its ``targetId`` (``null`` = empty conversation) only while nothing was written after it,
  because every later append moves the leaf forward again. The path runs
  from the leaf to a root through ``parentId``; an entry whose parent is missing is a root
  (``orphan`` warning); a cycle stops the walk (``cycle`` warning). A repeated id: the later
  entry wins, as in pi's id map (``duplicate_id`` warning).
* **Messages** (brief). ``user`` → user; ``assistant`` → assistant (thinking →
  ``HiddenBlock("thinking")``, or ``"redacted_thinking"`` when ``redacted:true``; any other
  non text/toolCall block → ``HiddenBlock("unknown")``; ``textSignature``/``thoughtSignature``
  are dropped); ``toolResult`` → tool_result; ``bashExecution`` (user-run ``!cmd``) → user with
  origin ``bash``. Its text is exactly what pi sends the model (``bashExecutionToText`` in
  pi's messages.ts)::

      Ran `<command>`\\n```\\n<output>\\n```          (or "(no output)" after the first line)
      \\n\\n(command cancelled)                   if cancelled, else
      \\n\\nCommand exited with code <n>          for a non-zero exit code
      \\n\\n[Output truncated. Full output: <p>]  if truncated and a path is stored

  ``!!cmd`` runs (``excludeFromContext``) are kept too, since the user saw them; the model did
  not (counted as ``bash_excluded``). Everything else — ``custom`` role and
  ``custom_message`` entries, ``compaction``, ``branch_summary``, ``model_change``,
  ``thinking_level_change``, ``label``, ``session_info``, ``custom``, ``leaf``,
  ``active_tools_change`` and unknown types — is counted in ``stats`` over the whole file.
  ``compactions`` counts every compaction entry in the file, on any branch. A compaction on the
  active path also gives its summary as a user message of origin ``compaction_summary``
  (searched and browsed, marked as a summary).
* **History view.** The whole active path is returned, including entries before a compaction's
  kept point (a history viewer shows everything); pi's replay rewrites (summaries, dropped aborted
  turns, synthetic "No result provided" results) are not applied.
* **Usage**: every assistant message in the file, on every branch, plus the newer
  ``usage`` on ``toolResult``, ``compaction`` and ``branch_summary`` entries, once per entry
  id. Assistant copies inside a compaction's ``retainedTail`` are not counted again.
* **Small choices.** A prompt's unknown block stays a hidden slot; a result's is skipped with
  a warning. A result without ``toolName`` takes the name of its call. Timestamps are the
  entry's ISO string (else the message's Unix ms as ISO UTC). ``parent_id`` is the session id
  in the ``parentSession``/``branchedFrom`` file name (after the last ``_``).
* **Title**: the latest non-empty ``session_info.name``, else the first non-empty line of the
  first user prompt in the file, cut to 80 characters.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from context_paging.index.jsonl import Issue, Record
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
from context_paging.paging.messages import STOP_REASONS

_HEADER_SCAN = 5
_TITLE_CHARS = 80
# Entry types that never become messages, and the stats key that counts them (whole file).
_COUNTED_TYPES = {
    "compaction": "compactions", "branch_summary": "branch_summaries",
    "model_change": "model_changes", "thinking_level_change": "thinking_level_changes",
    "label": "labels", "session_info": "session_infos", "custom": "custom_entries",
    "custom_message": "custom_messages", "leaf": "leaf_entries",
    "active_tools_change": "active_tools_changes",
}
_PATH_COUNTERS = ("path_entries", "user", "bash", "bash_excluded", "assistant", "tool_results",
                  "tool_calls", "hidden_blocks", "skipped_context")


@dataclass(frozen=True, slots=True)
class Entry:
    """One session entry after the in-memory migration to v3 (id always set)."""

    id: str
    parent_id: str | None
    type: str
    value: dict[str, Any]
    line: int
    offset: int
    first_kept_id: str | None = None  # compaction: the first entry its summary did not cover


@dataclass(frozen=True, slots=True)
class Migrated:
    """A file read as v3: its header (or None), original version, entries in file order."""

    header: dict[str, Any] | None
    version: int
    entries: tuple[Entry, ...]
    issues: tuple[Issue, ...]
    pre_header: int  # objects before the header (fork title lines); not entries


@dataclass(frozen=True, slots=True)
class _Log:
    """Where warnings of one build go (the list is filled in place)."""

    path: str
    issues: list[Issue] = field(default_factory=list)

    def warn(self, at: Record | Entry, kind: str, message: str) -> None:
        self.issues.append(Issue(self.path, at.line, at.offset, kind, message))


# --- migration ----------------------------------------------------------------------


def migrate(records: Sequence[Record], path: str = "") -> Migrated:
    """Find the header and give every entry an id and a parent, v1 included."""
    log = _Log(path)
    at = next((i for i, r in enumerate(records[:_HEADER_SCAN])
               if r.value.get("type") == "session"), None)
    header = records[at] if at is not None else None
    if at is None:
        log.warn(records[0] if records else Record(0, -1, {}), "missing_header",
                 "no pi session header in the first 5 objects; read anyway")
    body = records[at + 1 :] if at is not None else records
    version = _version(header, body, log)
    ids = _line_ids(body)
    entries: list[Entry] = []
    previous: str | None = None
    for record, synthetic in zip(body, ids, strict=True):
        kind = record.value.get("type")
        if kind == "session":
            log.warn(record, "extra_header", "second session header skipped")
            continue
        entry_id, parent = _links(record, synthetic, previous, version, log)
        entries.append(Entry(entry_id, parent, kind if isinstance(kind, str) else "",
                             record.value, record.line, record.offset,
                             _first_kept(record, version, ids, log)))
        previous = entry_id
    head = header.value if header is not None else None
    return Migrated(head, version, tuple(entries), tuple(log.issues), at or 0)


def _version(header: Record | None, body: Sequence[Record], log: _Log) -> int:
    if header is None:
        # pi would refuse the file; guess from the first entry so that its ids are kept.
        return 3 if body and isinstance(body[0].value.get("id"), str) else 1
    version = header.value.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        log.warn(header, "bad_version", "header version is not a positive number; read as 1")
        return 1
    if version > 3:
        log.warn(header, "newer_version", f"version {version} read as 3")
    return version


def _line_ids(records: Sequence[Record]) -> list[str]:
    """``L<line>`` per object; further objects glued onto the same line get ``.1``, ``.2``, …"""
    ids: list[str] = []
    last_line, repeat = -1, 0
    for record in records:
        repeat = repeat + 1 if record.line == last_line else 0
        last_line = record.line
        ids.append(f"L{record.line}" if repeat == 0 else f"L{record.line}.{repeat}")
    return ids


def _links(
    record: Record, synthetic: str, previous: str | None, version: int, log: _Log
) -> tuple[str, str | None]:
    if version == 1:
        return synthetic, previous  # a v1 file is one linear chain
    entry_id = record.value.get("id")
    if not isinstance(entry_id, str) or not entry_id:
        log.warn(record, "missing_id", f"entry without an id read as {synthetic}")
        entry_id = synthetic
    if "parentId" not in record.value:
        return entry_id, previous
    parent = record.value["parentId"]
    return entry_id, parent if isinstance(parent, str) else None


def _first_kept(record: Record, version: int, ids: Sequence[str], log: _Log) -> str | None:
    value = record.value
    if value.get("type") != "compaction":
        return None
    if isinstance(value.get("firstKeptEntryId"), str):
        return value["firstKeptEntryId"]
    index = value.get("firstKeptEntryIndex")
    if version != 1 or not isinstance(index, int) or isinstance(index, bool):
        return None
    # pi's v1 entry array is the file's objects with the header at index 0, so entry ``index``
    # is the object at position ``index - 1`` after the header.
    if not 1 <= index <= len(ids):
        log.warn(record, "dangling_first_kept", f"no entry at firstKeptEntryIndex {index}")
        return None
    return ids[index - 1]


# --- the active branch --------------------------------------------------------------


def active_path(records: Sequence[Record], path: str = "") -> list[str]:
    """The entry ids of the active branch, root first."""
    entries = migrate(records, path).entries
    log = _Log(path)
    return [entry.id for entry in _walk(entries, _index(entries, log), log)]


def _index(entries: Sequence[Entry], log: _Log) -> dict[str, Entry]:
    by_id: dict[str, Entry] = {}
    for entry in entries:
        if entry.id in by_id:
            log.warn(entry, "duplicate_id", f"id {entry.id!r} repeated; the later entry wins")
        by_id[entry.id] = entry  # as in pi's id map
    for entry in entries:
        if entry.parent_id is not None and entry.parent_id not in by_id:
            log.warn(entry, "orphan",
                     f"parent {entry.parent_id!r} of {entry.id!r} missing; read as a root")
    return by_id


def _leaf(entries: Sequence[Entry], by_id: dict[str, Entry], log: _Log) -> Entry | None:
    """The entry the active branch ends at, or None for an empty conversation."""
    last = pointer = -1
    for position, entry in enumerate(entries):
        if entry.type == "leaf":
            pointer = position
        else:
            last = position
    fallback = by_id.get(entries[last].id) if last >= 0 else None
    if pointer <= last:  # no leaf entry (or none at all), or entries were appended after it
        return fallback
    target = entries[pointer].value.get("targetId")
    if target is None:
        return None
    if isinstance(target, str) and target in by_id:
        return by_id[target]
    log.warn(entries[pointer], "dangling_leaf", "leaf target missing; the last entry is used")
    return fallback


def _walk(entries: Sequence[Entry], by_id: dict[str, Entry], log: _Log) -> list[Entry]:
    chain: list[Entry] = []
    seen: set[str] = set()
    entry = _leaf(entries, by_id, log)
    while entry is not None:
        if entry.id in seen:
            log.warn(entry, "cycle", f"parent chain loops at {entry.id!r}; the path stops there")
            break
        seen.add(entry.id)
        chain.append(entry)
        entry = by_id.get(entry.parent_id) if entry.parent_id is not None else None
    chain.reverse()
    return chain


# --- messages -------------------------------------------------------------------------


def build(records: Sequence[Record], path: str) -> Conversation:
    migrated = migrate(records, path)
    log = _Log(path, list(migrated.issues))
    by_id = _index(migrated.entries, log)
    chain = _walk(migrated.entries, by_id, log)
    stats = _file_stats(migrated, log)
    messages = _messages(chain, stats, log)
    return Conversation(
        info=_info(migrated, path),
        messages=tuple(messages),
        warnings=tuple(log.issues),
        compactions=stats["compactions"],
        usage=_total_usage(by_id.values()),
        stats=stats,
    )


def _file_stats(migrated: Migrated, log: _Log) -> dict[str, int]:
    stats = {"entries": len(migrated.entries), "pre_header_objects": migrated.pre_header}
    stats.update(dict.fromkeys(_COUNTED_TYPES.values(), 0), unknown_entries=0)
    for entry in migrated.entries:
        key = _COUNTED_TYPES.get(entry.type)
        if key is not None:
            stats[key] += 1
        elif entry.type != "message":
            stats["unknown_entries"] += 1
            log.warn(entry, "unknown_type", f"entry type {entry.type!r} skipped")
    return stats


def _messages(chain: Sequence[Entry], stats: dict[str, int], log: _Log) -> list[Message]:
    stats.update(dict.fromkeys(_PATH_COUNTERS, 0), path_entries=len(chain))
    names: dict[str, str] = {}  # call id → tool name, for results that do not store one
    out: list[Message] = []
    for entry in chain:
        summary = entry.value.get("summary") if entry.type == "compaction" else None
        if isinstance(summary, str) and summary.strip():
            out.append(Message("user", entry.id, _timestamp(entry, {}), (TextBlock(summary),),
                               entry.line, origin="compaction_summary"))
            continue
        body = entry.value.get("message") if entry.type == "message" else None
        if entry.type == "message" and not isinstance(body, dict):
            log.warn(entry, "bad_entry", "message entry without a message object skipped")
        message = _message(entry, body, names, stats, log) if isinstance(body, dict) else None
        if message is None:
            stats["skipped_context"] += 1
        else:
            out.append(message)
    return out


def _message(
    entry: Entry, body: dict[str, Any], names: dict[str, str], stats: dict[str, int], log: _Log
) -> Message | None:
    role = body.get("role")
    stamp = _timestamp(entry, body)
    if role == "user":
        stats["user"] += 1
        content = _prompt_content(body.get("content"))
        stats["hidden_blocks"] += sum(isinstance(b, HiddenBlock) for b in content)
        return Message("user", entry.id, stamp, content, entry.line)
    if role == "assistant":
        stats["assistant"] += 1
        return _assistant(entry, body, names, stats, log)
    if role == "toolResult":
        stats["tool_results"] += 1
        return _tool_result(entry, body, names, log)
    if role == "bashExecution":
        stats["bash"] += 1
        stats["bash_excluded"] += body.get("excludeFromContext") is True
        text = TextBlock(_bash_text(body))
        return Message("user", entry.id, stamp, (text,), entry.line, origin="bash")
    if role in ("custom", "hookMessage"):  # v2 hookMessage = v3 custom: injected context
        stats["custom_messages"] += 1
    elif role not in ("branchSummary", "compactionSummary"):
        log.warn(entry, "unknown_role", f"message role {role!r} skipped")
    return None


def _assistant(
    entry: Entry, body: dict[str, Any], names: dict[str, str], stats: dict[str, int], log: _Log
) -> Message:
    content = body.get("content")
    if content is not None and not isinstance(content, list):
        log.warn(entry, "bad_content", "assistant content is not a list; read as empty")
    blocks: list[Block] = []
    for block in content if isinstance(content, list) else ():
        converted = _assistant_block(block)
        if isinstance(converted, ToolCall):
            stats["tool_calls"] += 1
            names[converted.id] = converted.name
        elif isinstance(converted, HiddenBlock):
            stats["hidden_blocks"] += 1
        blocks.append(converted)
    stop, model = body.get("stopReason"), body.get("model")
    return Message(
        "assistant", entry.id, _timestamp(entry, body), tuple(blocks), entry.line,
        stop_reason=STOP_REASONS.get(stop) if isinstance(stop, str) else None,
        model=model if isinstance(model, str) else None,
        usage=_usage(body.get("usage")),
    )


def _assistant_block(block: Any) -> Block:
    # Signatures (textSignature, thinkingSignature, thoughtSignature) are never copied.
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text" and isinstance(block.get("text"), str):
        return TextBlock(block["text"])
    if kind == "thinking":
        return HiddenBlock("redacted_thinking" if block.get("redacted") is True else "thinking")
    if kind == "toolCall" and isinstance(block.get("id"), str) and isinstance(
        block.get("name"), str
    ):
        namespace = block.get("namespace")
        namespace = namespace if isinstance(namespace, str) else None
        return ToolCall(block["id"], block["name"], _arguments(block.get("arguments")), namespace)
    return HiddenBlock("unknown")


def _arguments(value: Any) -> Any:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _tool_result(entry: Entry, body: dict[str, Any], names: dict[str, str], log: _Log) -> Message:
    call_id = body.get("toolCallId")
    call_id = call_id if isinstance(call_id, str) else None
    name = body.get("toolName")
    if not isinstance(name, str):
        name = names.get(call_id) if call_id is not None else None
    content = body.get("content")
    blocks = _prompt_content(content, hidden=False)
    if isinstance(content, list) and len(blocks) < len(content):
        dropped = len(content) - len(blocks)
        log.warn(entry, "unknown_block", f"{dropped} non text/image result block(s) skipped")
    return Message(
        "tool_result", entry.id, _timestamp(entry, body), blocks, entry.line,
        tool_call_id=call_id, tool_name=name, is_error=body.get("isError") is True,
    )


def _prompt_content(content: Any, *, hidden: bool = True) -> tuple[Block, ...]:
    """Text and image blocks; any other block is a hidden slot (``hidden``) or left out."""
    if isinstance(content, str):
        return (TextBlock(content),)
    blocks: list[Block] = []
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            blocks.append(TextBlock(block["text"]))
        elif kind == "image" and isinstance(block.get("data"), str):
            mime = block.get("mimeType")
            blocks.append(ImageBlock(mime if isinstance(mime, str) else "", block["data"]))
        elif hidden:
            blocks.append(HiddenBlock("unknown"))
    return tuple(blocks)


def _bash_text(body: dict[str, Any]) -> str:
    """The user text pi sends for a ``!cmd`` run (see the module docstring)."""
    command, output, code = body.get("command"), body.get("output"), body.get("exitCode")
    text = f"Ran `{command if isinstance(command, str) else ''}`\n"
    text += f"```\n{output}\n```" if isinstance(output, str) and output else "(no output)"
    if body.get("cancelled") is True:
        text += "\n\n(command cancelled)"
    elif isinstance(code, int) and not isinstance(code, bool) and code != 0:
        text += f"\n\nCommand exited with code {code}"
    full = body.get("fullOutputPath")
    if body.get("truncated") is True and isinstance(full, str) and full:
        text += f"\n\n[Output truncated. Full output: {full}]"
    return text


def _timestamp(entry: Entry, body: dict[str, Any]) -> str:
    """The entry's ISO time; else the message's Unix milliseconds as ISO UTC; else ''."""
    stamp = entry.value.get("timestamp")
    if isinstance(stamp, str):
        return stamp
    millis = body.get("timestamp")
    if not isinstance(millis, int | float) or isinstance(millis, bool):
        return ""
    try:
        moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return ""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- usage and session facts ----------------------------------------------------------


def _usage(value: Any) -> Usage | None:
    if not isinstance(value, dict):
        return None

    def count(key: str) -> int:
        number = value.get(key)
        ok = isinstance(number, int | float) and not isinstance(number, bool)
        return int(number) if ok else 0

    return Usage(count("input"), count("output"), count("cacheRead"), count("cacheWrite"))


def _total_usage(entries: Iterable[Entry]) -> Usage | None:
    total: Usage | None = None
    for entry in entries:
        carrier = entry.value
        if entry.type == "message":
            carrier = carrier.get("message")
            if not isinstance(carrier, dict) or carrier.get("role") not in (
                "assistant", "toolResult"
            ):
                continue
        elif entry.type not in ("compaction", "branch_summary"):
            continue
        usage = _usage(carrier.get("usage"))
        if usage is not None:
            total = usage if total is None else total + usage
    return total


def _info(migrated: Migrated, path: str) -> SessionInfo:
    header = migrated.header or {}
    parent = _string(header.get("parentSession")) or _string(header.get("branchedFrom"))
    updated = next((e.value["timestamp"] for e in reversed(migrated.entries)
                    if isinstance(e.value.get("timestamp"), str)), None)
    return SessionInfo(
        source="pi",
        session_id=_string(header.get("id")) or _id_from_name(path),
        path=path,
        cwd=_string(header.get("cwd")),
        title=_title(migrated.entries),
        created=_string(header.get("timestamp")),
        updated=updated,
        format=f"pi-v{migrated.version}",
        parent_id=_id_from_name(parent) if parent else None,
        parent_kind="fork" if parent else None,
    )


def _title(entries: Sequence[Entry]) -> str | None:
    for entry in reversed(entries):
        name = entry.value.get("name") if entry.type == "session_info" else None
        if isinstance(name, str) and name.strip():
            return name
    for entry in entries:
        body = entry.value.get("message") if entry.type == "message" else None
        if isinstance(body, dict) and body.get("role") == "user":
            for block in _prompt_content(body.get("content")):
                text = block.text if isinstance(block, TextBlock) else ""
                line = next((s.strip() for s in text.splitlines() if s.strip()), "")
                if line:
                    return line[:_TITLE_CHARS]
    return None


def _id_from_name(path: str) -> str:
    """The session id in a pi file name: after the last ``_``, without ``.jsonl``."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    name = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    return name.rsplit("_", 1)[-1]


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def agent_message(
    message_id: str, body: dict[str, Any], names: dict[str, str], timestamp: str = ""
) -> Message | None:
    """One Pi AgentMessage dict as a Message (None for roles that are not history).

    Used for conversations a host sends in Pi format (the ledger). ``names`` maps call ids to tool
    names across calls, for results that do not store their tool name.
    """
    entry = Entry(message_id, None, "message", {"timestamp": timestamp, "message": body}, 0, 0)
    stats = dict.fromkeys((*_PATH_COUNTERS, "custom_messages"), 0)
    return _message(entry, body, names, stats, _Log(""))
