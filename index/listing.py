"""What a listing shows of a session file, read from its head and its tail only.

A listing needs the id, working directory, title and start (all near the top of a session
file), the last update (its last lines) and the size (a stat), never the text in between, so a
listing of 2,000 sessions reads a few dozen KB of each instead of 1.8 GB. The head is parsed by
the session's own reader (``index.sources``), as if the file ended there; the tail supplies what
the full read takes from the last lines:

* ``updated``: the last timestamp (Claude Code and Codex: any line's, Pi: any entry's);
* Claude Code: the format's version (the last ``version``), and a ``custom-title`` or
  ``ai-title`` line, which outranks the head's title as in the full read;
* Pi: a ``session_info`` name, which outranks the first prompt.

A file smaller than the head and tail together is read whole. A head holding no title yet (a
first prompt longer than the head, say) grows until it has one. A tail holding no timestamp (one
line longer than the tail) grows too; once head and tail meet, the file is read whole. The one
difference from the full read: a rename (``custom-title`` / ``session_info``) or a summary line
in the middle of a large file, with neither end holding one, is not seen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from context_paging.index import sources
from context_paging.index.jsonl import Record, open_inside, parse_records
from context_paging.index.model import SessionInfo

HEAD_BYTES = 16 << 10  # the first read of the head (it grows 4× while no title is in it)
TAIL_BYTES = 8 << 10  # the first read of the tail (it grows 4× while no timestamp is in it)


@dataclass(frozen=True, slots=True)
class Listed:
    """A session's info as a listing shows it, and the file's size when it was read."""

    info: SessionInfo
    size: int


def list_info(path: str, source: str, root: str | None = None, head: int | None = None,
              tail: int | None = None) -> Listed | None:
    """The listing of the file at ``path``, or None when only a whole read can tell (the caller
    then reads it whole). Opened and verified inside ``root``, as every session file is."""
    head, tail = head or HEAD_BYTES, tail or TAIL_BYTES
    with open_inside(path, root) as handle:
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        info = head_titles = ending = None
        while True:
            if head + tail >= size:
                return None
            records = parse_records(os.pread(fd, head, 0), path, 0, at_end=False)
            info = sources.build(source, records, path).info if records else None
            if info is not None and info.title is not None:
                head_titles = _titles(source, records)
                break
            head *= 4
        while True:
            if head + tail >= size:
                return None
            start = size - tail - 1  # from the byte before: is the first line whole?
            ending = _ending(source, parse_records(os.pread(fd, tail + 1, start), path, start,
                                                   at_end=True))
            if ending is not None:
                break
            tail *= 4
    updated, version, titles = ending
    return Listed(_merged(info, head_titles, updated, version, titles), size)


def _ending(source: str, records: list[Record]) -> tuple[str, str | None, dict] | None:
    """(last timestamp, last version, titles) of the tail, or None without a timestamp (or,
    for Claude Code, without a version)."""
    updated = version = None
    for record in records:
        value = record.value
        stamp = value.get("timestamp")
        if isinstance(stamp, str) and (stamp or source == "pi"):
            if source != "pi" or value.get("type") != "session":
                updated = stamp
        if isinstance(value.get("version"), str):
            version = value["version"]
    titles = _titles(source, records)
    if updated is None or (source == "claude" and version is None):
        return None
    return updated, version, titles


def _titles(source: str, records: list[Record]) -> dict[str, str]:
    """The last rename (``custom``) and, for Claude Code, the last AI title (``ai``)."""
    titles: dict[str, str] = {}
    for record in records:
        value, kind = record.value, record.value.get("type")
        if source == "claude":
            if kind == "custom-title" and isinstance(value.get("customTitle"), str):
                titles["custom"] = value["customTitle"]
            elif kind == "ai-title" and isinstance(value.get("aiTitle"), str):
                titles["ai"] = value["aiTitle"]
        elif source == "pi" and kind == "session_info":
            name = value.get("name")
            if isinstance(name, str) and name.strip():
                titles["custom"] = name
    return titles


def _merged(info: SessionInfo, head_titles: dict[str, str], updated: str,
            version: str | None, titles: dict[str, str]) -> SessionInfo:
    """The head's info with what the tail says: the last update, the last version, and a
    title that outranks the head's (a rename; for Claude Code an AI title unless the head
    holds a rename)."""
    title = info.title
    if "custom" in titles:
        title = titles["custom"]
    elif "ai" in titles and "custom" not in head_titles:
        title = titles["ai"]
    fmt = f"claude-{version}" if info.source == "claude" and version else info.format
    return replace(info, title=title, updated=updated, format=fmt)
