"""Browse, load and page one session's history items
(docs/tools.md, "How the recovery tools answer").

The navigator sees the *visible* items: recovery-tool turns (this server's own tools, under any
host namespace) are hidden, and the rest are renumbered 0..n-1; browse anchors, loads and
references use that visible ``sequence`` (upstream's rule, documented, not unified).
``read_context_output`` uses the raw items, so the assistant blocks of a recovery turn stay
readable while its results are refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from context_paging.index.history import (
    HistoryItem,
    is_recovery_tool,
    is_summary,
    preview,
    public_block,
    public_item,
)
from context_paging.index.history import public_result as _public_result

COMPACT_LIMIT = 8_000
MAX_PAGE = 2_000
# load_history's reply stays under this many characters of JSON (about 6,000 tokens): the
# longest tool outputs are cut first, and the note names the call that returns each one whole.
LOAD_LIMIT = 24_000
LOAD_KEEP = 1_000  # characters a cut output still shows


class NavigatorError(ValueError):
    """A request the model can fix. ``code`` is upstream's error code where one exists."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def dumps(value: Any) -> str:
    """Compact JSON, the serialization every page and size limit is measured on."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Navigator:
    def __init__(self, session: str, items: Sequence[HistoryItem]) -> None:
        self.session = session
        self.raw = tuple(items)
        self.visible = tuple(item for item in items if not item.is_recovery_turn)
        self.position = {item.history_id: i for i, item in enumerate(self.visible)}
        self.raw_by_id: dict[str, HistoryItem] = {}
        for item in self.raw:
            self.raw_by_id.setdefault(item.history_id, item)

    # --- references -----------------------------------------------------------------------

    def reference(self, index: int) -> dict[str, Any]:
        item = self.visible[index]
        value = {
            "history_id": item.history_id,
            "session": self.session,
            "sequence": index,
            "kind": item.kind,
            "timestamp": item.timestamp,
            "preview": preview(item),
            "tools": list(item.tools),
            "files": list(item.files),
            "failed": item.failed,
            "previous_history_id": self.visible[index - 1].history_id if index > 0 else None,
            "next_history_id": (
                self.visible[index + 1].history_id if index + 1 < len(self.visible) else None
            ),
        }
        if is_summary(item):
            value["compaction_summary"] = True
        return value

    def reference_for(self, history_id: str) -> dict[str, Any] | None:
        index = self.position.get(history_id)
        return None if index is None else self.reference(index)

    # --- browse_history -------------------------------------------------------------------

    def browse(
        self,
        direction: Literal["backward", "forward", "around"],
        history_id: str | None = None,
        sequence: int | None = None,
        count: int = 5,
        stride: int = 1,
    ) -> list[dict[str, Any]]:
        if history_id is not None and sequence is not None:
            raise NavigatorError("UNKNOWN_HISTORY_ANCHOR", "give history_id or sequence, not both")
        n = len(self.visible)
        anchor: int | None = None
        if history_id is not None:
            anchor = self.position.get(history_id)
            if anchor is None:
                raise NavigatorError(
                    "UNKNOWN_HISTORY_ANCHOR",
                    f"history_id {history_id!r} is not a visible item of {self.session}",
                )
        elif sequence is not None:
            if not 0 <= sequence < n:
                raise NavigatorError(
                    "UNKNOWN_HISTORY_ANCHOR",
                    f"sequence {sequence} is outside 0..{n - 1} for {self.session}"
                    if n else f"{self.session} has no visible history yet",
                )
            anchor = sequence
        if n == 0:
            return []
        if direction == "backward":
            start = n - 1 if anchor is None else anchor - stride
            indexes = list(range(start, -1, -stride))[:count]
        elif direction == "forward":
            start = 0 if anchor is None else anchor + stride
            indexes = list(range(start, n, stride))[:count]
        else:
            center = n - 1 if anchor is None else anchor
            candidates = list(range(center % stride, n, stride))
            pos = candidates.index(center)
            before = (count - 1) // 2
            first = min(max(pos - before, 0), max(0, len(candidates) - count))
            indexes = candidates[first : first + count]
        return [self.reference(i) for i in indexes]

    # --- load_history ---------------------------------------------------------------------

    def load(self, history_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Public items in the requested order; one unknown id fails the whole call."""
        for history_id in history_ids:
            if history_id not in self.position:
                hint = (
                    " (it is a recovery-tool turn, which is hidden)"
                    if history_id in self.raw_by_id else ""
                )
                raise NavigatorError(
                    "UNKNOWN_HISTORY_ID",
                    f"unknown history_id {history_id!r} in {self.session}{hint}; "
                    "use search_history or browse_history to find valid ids",
                )
        return [
            public_item(self.visible[self.position[h]], self.position[h]) for h in history_ids
        ]

    # --- read_context_output --------------------------------------------------------------

    def read_output(
        self,
        history_id: str,
        source: Literal["assistant", "tool_result"],
        content_index: int | None = None,
        tool_call_id: str | None = None,
        offset: int = 0,
        limit: int = MAX_PAGE,
    ) -> dict[str, Any]:
        value = self._output_value(history_id, source, content_index, tool_call_id)
        text = dumps(value)
        if offset > len(text):
            raise NavigatorError(
                "OUTPUT_OFFSET",
                f"offset {offset} is past the end; this output has {len(text)} characters",
            )
        end = min(offset + limit, len(text))
        return {
            "offset": offset,
            "next_offset": end if end < len(text) else None,
            "total_characters": len(text),
            "text": text[offset:end],
        }

    def _output_value(
        self,
        history_id: str,
        source: str,
        content_index: int | None,
        tool_call_id: str | None,
    ) -> Any:
        if source == "assistant":
            if content_index is None:
                raise NavigatorError("OUTPUT_ARGUMENTS", "source 'assistant' needs content_index")
            if tool_call_id is not None:
                raise NavigatorError(
                    "OUTPUT_ARGUMENTS", "source 'assistant' takes content_index, not tool_call_id"
                )
        else:
            if not tool_call_id:
                raise NavigatorError("OUTPUT_ARGUMENTS", "source 'tool_result' needs tool_call_id")
            if content_index is not None:
                raise NavigatorError(
                    "OUTPUT_ARGUMENTS", "source 'tool_result' takes tool_call_id, not content_index"
                )
        item = self.raw_by_id.get(history_id)
        if item is None:
            raise NavigatorError(
                "UNKNOWN_HISTORY_ID", f"unknown history_id {history_id!r} in {self.session}"
            )
        if item.kind != "model_turn":
            raise NavigatorError(
                "NOT_A_MODEL_TURN",
                f"history_id {history_id!r} is a user item; outputs belong to model turns",
            )
        if source == "assistant":
            blocks = item.message.content
            assert content_index is not None
            if not 0 <= content_index < len(blocks):
                raise NavigatorError(
                    "UNKNOWN_CONTENT_INDEX",
                    f"content_index {content_index} is outside 0..{len(blocks) - 1} "
                    f"of {history_id!r}",
                )
            value = public_block(blocks[content_index])
            if value is None:
                raise NavigatorError(
                    "PRIVATE_CONTENT",
                    f"content_index {content_index} of {history_id!r} is private "
                    "(thinking or an unknown block) and is never returned",
                )
            return value
        assert tool_call_id is not None
        result = item.result_for(tool_call_id)
        if result is None:
            raise NavigatorError(
                "UNKNOWN_TOOL_CALL_ID",
                f"{history_id!r} has no result for tool_call_id {tool_call_id!r}",
            )
        call = item.call(tool_call_id)
        if is_recovery_tool(result.tool_name or "") or (call and is_recovery_tool(call.name)):
            raise NavigatorError(
                "RECOVERY_TOOL_OUTPUT",
                "that is the output of a recovery tool, which is not returned again; "
                "read the original history item instead",
            )
        return _public_result(result)


def cap_items(items: list[dict[str, Any]], limit: int = LOAD_LIMIT
              ) -> tuple[list[dict[str, Any]], str | None]:
    """Public items cut to ``limit`` characters of JSON: the longest tool-output text blocks
    are shortened to their first ``LOAD_KEEP`` characters (marked with ``cut_characters``) until
    the items fit. Returns the note naming each cut output and how to read it whole."""
    size = len(dumps(items))
    if size <= limit:
        return items, None
    blocks = []  # (length, item, result, block index)
    for item in items:
        for result in item.get("tool_results", ()):
            for index, block in enumerate(result["content"]):
                if block and block.get("type") == "text" and len(block["text"]) > LOAD_KEEP:
                    blocks.append((len(block["text"]), item, result, index))
    cut: dict[str, tuple[str, int]] = {}
    for length, item, result, index in sorted(blocks, key=lambda row: -row[0]):
        if size <= limit:
            break
        block = result["content"][index]
        result["content"][index] = {**block, "text": block["text"][:LOAD_KEEP],
                                    "cut_characters": length - LOAD_KEEP}
        size -= length - LOAD_KEEP
        cut[result["tool_call_id"]] = (item["history_id"], length)
    calls = "; ".join(
        f"recall(tool_call_id={call!r}) or read_context_output(history_id={owner!r}, "
        f"source='tool_result', tool_call_id={call!r}) for {length:,} characters"
        for call, (owner, length) in cut.items())
    note = (f"Cut to stay under {limit:,} characters: {len(cut)} long tool output(s) show "
            f"their first {LOAD_KEEP:,} characters (cut_characters says how many follow). "
            f"Whole: {calls}." if cut else
            f"These items take {size:,} characters; load fewer at a time.")
    return items, note


def compact_references(references: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """Keep a reply of references under 8,000 characters of JSON by shrinking, never failing.

    Whole references are dropped from the end first; if one reference alone is too large (a turn
    that touched dozens of long paths), its file list is cut. Returns the note to show when
    anything was left out.
    """
    total = len(references)
    kept = list(references)
    while len(kept) > 1 and len(dumps({"references": kept})) > COMPACT_LIMIT:
        kept.pop()
    note = None
    if len(kept) < total:
        note = (
            f"Reply shrunk to {len(kept)} of {total} references to stay under "
            f"{COMPACT_LIMIT:,} characters; ask again with a smaller limit or a narrower query "
            "for the rest."
        )
    if kept and len(dumps({"references": kept})) > COMPACT_LIMIT:
        first = dict(kept[0])
        files = list(first["files"])
        while files and len(dumps({"references": [first]})) > COMPACT_LIMIT:
            files.pop()
            first["files"] = files
        kept[0] = first
        note = (note + " " if note else "") + (
            f"The file list of {first['history_id']} was cut to {len(files)} entries; "
            "load_history returns the whole item."
        )
    return kept, note
