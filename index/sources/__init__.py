"""Session-file formats. Each module turns the records of one file into a Conversation.

Every module exposes ``build(records, path) -> Conversation``: ``records`` are the dict values
read by ``index.jsonl`` in file order, ``path`` the file they came from. A module never raises on
odd input: what it cannot use becomes a warning (an ``index.jsonl.Issue``) in the result.

May import: the index's reader and model (``index.jsonl``, ``index.model``) and ``paging``.
"""

from __future__ import annotations

from collections.abc import Sequence

from context_paging.index.jsonl import Record
from context_paging.index.model import Conversation

SOURCES = ("pi", "claude", "codex", "gemini", "opencode")


def detect(records: Sequence[Record], path: str = "") -> str | None:
    """Which agent wrote these records, or None (docs/sessions.md, "Which agent wrote a file")."""
    head = [r.value for r in records[:5]]
    if any(v.get("type") == "session" for v in head):
        return "pi"
    if any("projectHash" in v and "sessionId" in v for v in head[:1]):
        return "gemini"
    for value in head:
        if "payload" in value or value.get("type") == "session_meta" or "record_type" in value:
            return "codex"
        if "uuid" in value and "sessionId" in value:
            return "claude"
    for value in (r.value for r in records[:50]):
        if "sessionId" in value or value.get("type") in ("file-history-snapshot", "summary"):
            return "claude"
        if "payload" in value:
            return "codex"
    parts = path.replace("\\", "/").split("/")
    if ".claude" in parts:
        return "claude"
    if ".codex" in parts or parts[-1].startswith("rollout-"):
        return "codex"
    if ".pi" in parts:
        return "pi"
    if ".gemini" in parts:
        return "gemini"
    return None


def build(source: str, records: Sequence[Record], path: str) -> Conversation:
    if source == "pi":
        from context_paging.index.sources import pi as module
    elif source == "claude":
        from context_paging.index.sources import claude as module
    elif source == "codex":
        from context_paging.index.sources import codex as module
    elif source == "gemini":
        from context_paging.index.sources import gemini as module
    elif source == "opencode":
        from context_paging.index.sources import opencode as module
    else:
        raise ValueError(f"unknown session source {source!r}")
    return module.build(records, path)
