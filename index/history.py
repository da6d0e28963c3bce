"""History items: the unit that search, browse, load and paging address
(docs/sessions.md, "History items").

A *user item* is one request. A *model-turn item* is one assistant message together with the
contiguous tool results that follow it. Items keep their messages (frozen values, never copied),
plus the metadata the tools filter on: ``tools`` (every call name, in order, duplicates kept),
``files`` (path-like argument values, first-seen order) and ``failed`` (an errored result or an
interrupted response).

Upstream aborts the whole projection on the first malformed exchange. Real session files are
messier, so here one bad exchange never hides the rest (docs/sessions.md, "One bad
exchange never hides the rest"):

* ORPHAN_TOOL_RESULT — a result with no assistant before it: skipped, reported.
* MISMATCHED_TOOL_RESULT — a result for a call the assistant did not make: skipped, reported.
* DUPLICATE_TOOL_RESULT — a second result for one call: the first is kept, the rest reported.
* INCOMPLETE_TOOL_RESULTS — a completed (not interrupted) response whose calls lack results and
  that is followed by more history: kept as a *failed* turn, reported.
* An incomplete exchange at the very end is still running: it is left out until its results
  arrive (upstream's rule), and reported as ``PENDING_TOOL_RESULTS``.
* Interrupted responses (``aborted``/``error``) are kept as failed turns with whatever results
  they got.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from context_paging.index.jsonl import Issue
from context_paging.index.model import Block, HiddenBlock, ImageBlock, Message, TextBlock, ToolCall
from context_paging.index.sources.pi import agent_message
from context_paging.paging.formats import FormatError, to_views
from context_paging.paging.messages import stop_reason
from context_paging.paging.request import Request
from context_paging.paging.select import CutKey, Frontier

RECOVERY_TOOLS = frozenset(
    {
        "search_history",
        "browse_history",
        "load_history",
        "read_context_output",
        "recall",
        "list_sessions",
    }
)
_FILE_KEYS = frozenset({"path", "file", "files", "filepath", "file_path"})
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)
_SPACES = re.compile(r"\s+")
PREVIEW_CHARS = 160


def is_recovery_tool(name: str) -> bool:
    """True for this server's recovery tools, also under a host's namespaced name.

    Hosts rename MCP tools (``mcp__context-paging__search_history``, ``context-paging.recall``),
    so the bare name is matched after the last ``__``, ``.``, ``/`` or ``:`` separator.
    """
    if name in RECOVERY_TOOLS:
        return True
    tail = re.split(r"__|[./:]", name)[-1]
    return tail in RECOVERY_TOOLS and tail != name


@dataclass(frozen=True, slots=True)
class HistoryItem:
    kind: Literal["user", "model_turn"]
    history_id: str
    sequence: int
    timestamp: str
    message: Message
    tool_results: tuple[Message, ...] = ()
    tools: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    failed: bool = False

    @property
    def is_recovery_turn(self) -> bool:
        return self.kind == "model_turn" and any(is_recovery_tool(t) for t in self.tools)

    def result_for(self, tool_call_id: str) -> Message | None:
        for result in self.tool_results:
            if result.tool_call_id == tool_call_id:
                return result
        return None

    def call(self, tool_call_id: str) -> ToolCall | None:
        for call in self.message.tool_calls:
            if call.id == tool_call_id:
                return call
        return None


def is_summary(item: HistoryItem) -> bool:
    """A compaction summary: what the agent wrote to stand for the history it compacted. It is
    a user item (the model read it as the user's message), searched and browsed like any,
    and marked ``compaction_summary`` (docs/sessions.md, "Compaction summaries")."""
    return item.kind == "user" and item.message.origin == "compaction_summary"


@dataclass(frozen=True, slots=True)
class Projection:
    items: tuple[HistoryItem, ...]
    issues: tuple[Issue, ...]


def project(messages: Sequence[Message], path: str = "") -> Projection:
    """Group an active path into history items (see the module docstring for the error rules)."""
    items: list[HistoryItem] = []
    issues: list[Issue] = []

    def report(message: Message, code: str, text: str) -> None:
        issues.append(Issue(path, message.line, -1, code, text))

    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        if message.role == "user":
            items.append(HistoryItem("user", message.id, len(items), message.timestamp, message))
            i += 1
            continue
        if message.role == "tool_result":
            report(message, "ORPHAN_TOOL_RESULT", f"result for {message.tool_call_id!r} skipped")
            i += 1
            continue
        call_ids = [call.id for call in message.tool_calls]
        wanted = set(call_ids)
        results: list[Message] = []
        seen: set[str] = set()
        j = i + 1
        while j < n and messages[j].role == "tool_result":
            result = messages[j]
            if result.tool_call_id not in wanted:
                report(result, "MISMATCHED_TOOL_RESULT",
                       f"{result.tool_call_id!r} is not a call of {message.id}")
            elif result.tool_call_id in seen:
                report(result, "DUPLICATE_TOOL_RESULT",
                       f"second result for {result.tool_call_id!r}")
            else:
                seen.add(result.tool_call_id)
                results.append(result)
            j += 1
        failed = message.interrupted or any(r.is_error for r in results)
        if len(seen) < len(wanted) and not message.interrupted:
            if j == n:
                report(message, "PENDING_TOOL_RESULTS",
                       f"{len(wanted) - len(seen)} call(s) of {message.id} have no result yet")
                break
            report(message, "INCOMPLETE_TOOL_RESULTS",
                   f"{len(wanted) - len(seen)} call(s) of {message.id} never got a result")
            failed = True
        items.append(
            HistoryItem(
                "model_turn",
                message.id,
                len(items),
                message.timestamp,
                message,
                tuple(results),
                tuple(call.name for call in message.tool_calls),
                tuple(_files_of(message.tool_calls)),
                failed,
            )
        )
        i = j
    return Projection(tuple(items), tuple(issues))


def _files_of(calls: Iterable[ToolCall]) -> list[str]:
    found: dict[str, None] = {}
    for call in calls:
        if isinstance(call.arguments, str):
            for path in _PATCH_FILE.findall(call.arguments):
                found.setdefault(path.strip(), None)
        else:
            _collect_files(call.arguments, found)
    return list(found)


def _collect_files(value: Any, found: dict[str, None]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(key, str) and key.lower() in _FILE_KEYS:
                if isinstance(inner, str):
                    found.setdefault(inner, None)
                elif isinstance(inner, list):
                    for member in inner:
                        if isinstance(member, str):
                            found.setdefault(member, None)
                    continue
            _collect_files(inner, found)
    elif isinstance(value, list):
        for member in value:
            _collect_files(member, found)


# --- the public view (docs/sessions.md, "What is never read as text") ------------------------


def public_block(block: Block) -> dict[str, Any] | None:
    """A block as the tools return it; private blocks become ``None`` at their index."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolCall):
        value: dict[str, Any] = {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
        if block.namespace is not None:
            value["namespace"] = block.namespace
        return value
    if isinstance(block, ImageBlock):
        image: dict[str, Any] = {"type": "image", "mime_type": block.mime}
        if block.url:
            image["url"] = block.url
        if block.data:
            image["data"] = block.data
        return image
    return None  # HiddenBlock


def public_result(result: Message) -> dict[str, Any]:
    return {
        "tool_call_id": result.tool_call_id,
        "tool_name": result.tool_name,
        "is_error": result.is_error,
        "content": [public_block(b) for b in result.content],
    }


def public_item(item: HistoryItem, sequence: int | None = None) -> dict[str, Any]:
    """One item in the public view. ``sequence`` overrides the raw one (navigator numbering)."""
    value: dict[str, Any] = {
        "history_id": item.history_id,
        "kind": item.kind,
        "sequence": item.sequence if sequence is None else sequence,
        "timestamp": item.timestamp,
        "content": [public_block(b) for b in item.message.content],
    }
    if is_summary(item):
        value["compaction_summary"] = True
    if item.kind == "model_turn":
        value["tool_results"] = [public_result(r) for r in item.tool_results]
        value["tools"] = list(item.tools)
        value["files"] = list(item.files)
        value["failed"] = item.failed
        if item.message.model:
            value["model"] = item.message.model
    return value


def block_text(block: Block, *, images: str = "[image]") -> str:
    """Searchable/preview text of a public block ('' for private ones; images as a marker)."""
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ToolCall):
        return json.dumps(public_block(block), ensure_ascii=False, separators=(",", ":"))
    if isinstance(block, ImageBlock):
        return images
    return ""


def content_text(blocks: Iterable[Block]) -> str:
    texts = (block_text(b) for b in blocks if not isinstance(b, HiddenBlock))
    return " ".join(t for t in texts if t)


def preview(item: HistoryItem) -> str:
    """Collapsed public text of the request or the assistant message, first 160 characters
    (a tool call as its name and arguments: :func:`call_text`)."""
    texts = (call_text(b) if isinstance(b, ToolCall) else block_text(b)
             for b in item.message.content if not isinstance(b, HiddenBlock))
    text = " ".join(t for t in texts if t)
    return _SPACES.sub(" ", text).strip()[:PREVIEW_CHARS]


# --- what search reads (docs/search.md, "What is decoded") ------------------------------------

# A tool output that is one JSON object holding its text under one of these keys (Codex's exec
# output ``{"chunk_id", …, "output"}``, a tool's ``{"stdout", "stderr"}``, an MCP-style
# ``{"content": [{"type": "text", "text"}]}``) is searched and shown as that text, decoded.
DECODED_KEYS = ("output", "stdout", "stderr", "content")
HEADER_CHARS = 400  # how far into an output a header before the JSON object may reach


def decoded_output(text: str) -> list[tuple[int, str]] | None:
    """The texts a JSON-object tool output holds under :data:`DECODED_KEYS`, in that order,
    each with the 1-based line of ``text`` it is written on, then the object's other members
    as one line of JSON (so no word of the output is lost to search); a few header lines
    before the object (Codex's exec tool: "Script completed", wall time, "Output:") come first
    as they are. ``None`` when ``text`` is not such an object (then it is searched as it is)."""
    start = len(text) - len(text.lstrip())
    if not text.startswith("{", start):  # a few header lines first: Codex's exec tool writes
        start = text.find("\n{", 0, HEADER_CHARS)  # "Script completed … Output:", then JSON
        if start < 0:
            return None
        start += 1
    stripped = text[start:].strip()
    if not (stripped.endswith("}") and '"' in stripped):
        return None
    try:
        value = json.loads(stripped, strict=False)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    found: list[tuple[int, str]] = []
    if text[:start].strip():
        found.append((1, text[:start].strip()))
    held = False
    for key in DECODED_KEYS:
        inner = value.get(key)
        if isinstance(inner, list):
            strings = [p["text"] for p in inner
                       if isinstance(p, dict) and isinstance(p.get("text"), str)]
            inner = "\n".join(strings) if strings else None
        if not isinstance(inner, str):
            continue
        held = True
        if inner:
            at = re.compile(rf'"{key}"\s*:').search(text, start)
            found.append((1 + text.count("\n", 0, at.start()) if at else 1, inner))
    if not held:
        return None
    rest = {key: inner for key, inner in value.items() if key not in DECODED_KEYS}
    if rest:
        found.append((1, json.dumps(rest, ensure_ascii=False, separators=(",", ":"))))
    return found


def result_text(result: Message) -> str:
    """A tool output's text as search reads it: its text blocks, decoded when they are one
    JSON object (:func:`decoded_output`); images as a marker."""
    joined = "\n".join(b.text for b in result.content if isinstance(b, TextBlock))
    pieces = decoded_output(joined)
    if pieces is None:
        return content_text(result.content)
    images = ["[image]" for b in result.content if isinstance(b, ImageBlock)]
    return "\n".join([text for _, text in pieces] + images)


def call_text(call: ToolCall) -> str:
    """A tool call as search reads and shows it: its name, then each argument as
    ``key: value`` (:func:`_argument_text`: a string as written, its newlines are lines); one
    argument stays on the name's line."""
    arguments = call.arguments
    if isinstance(arguments, str):
        return f"{call.name} {arguments}"
    if not isinstance(arguments, dict):
        return f"{call.name} {json.dumps(arguments, ensure_ascii=False)}"
    lines = [f"{key}: {_argument_text(value)}" for key, value in arguments.items()]
    return "\n".join([call.name, *lines]) if len(lines) != 1 else f"{call.name} {lines[0]}"


def _argument_text(value: Any) -> str:
    """An argument as written: a string itself, a list of strings (a command's words) joined by
    spaces, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return json.dumps(value, ensure_ascii=False)


def search_text(item: HistoryItem) -> str:
    """The text an item is found by (docs/search.md, "Ranking"), public blocks only, images as a
    marker.

    Model turns add each call's name and arguments (:func:`call_text`), every result's text
    (:func:`result_text`), and every file path with its segments, so ``needle.ts`` finds a turn
    that read ``src/needle.ts``.
    """
    texts = (call_text(b) if isinstance(b, ToolCall) else block_text(b)
             for b in item.message.content if not isinstance(b, HiddenBlock))
    parts = [" ".join(t for t in texts if t)]
    if item.kind == "model_turn":
        for result in item.tool_results:
            parts.append(result_text(result))
        for path in item.files:
            parts.append(path)
            parts.extend(segment for segment in re.split(r"[/\\]", path) if segment)
    return "\n".join(part for part in parts if part)


# --- messages a host sent through select_context (the ledger) ----------------------------------


def stored_messages(message: dict[str, Any], fmt: str, message_id: str, names: dict[str, str],
                    timestamp: str = "") -> list[Message]:
    """One stored host message as history Messages, read through the window's own views
    (``paging.formats.to_views``): the ledger's history and the window see the same message.

    Ids derive from the ledger id: an Anthropic user message carrying tool results becomes one
    ``tool_result`` Message per result (``<id>.r<k>``), then its text, if any, under its own id.
    System and developer messages are resident input, not history. A Responses item is one
    Message; :func:`join_turns` merges each run of model items into one model turn. Pi messages
    are read as the Pi session source reads them. ``names`` maps call ids to tool names across
    messages, for results that do not name their tool."""
    if fmt == "pi":
        converted = agent_message(message_id, message, names, timestamp)
        return [converted] if converted is not None else []
    try:
        views = to_views([message], fmt, resident=False)  # type: ignore[arg-type]
    except FormatError:
        return []  # never stored: the request that carried it was read with the same views
    out: list[Message] = []
    for view in views.views:
        body = view.message
        role = body.get("role")
        if role == "assistant":
            blocks = _view_blocks(body.get("content"), names)
            calls = any(isinstance(b, ToolCall) for b in blocks)
            # Responses items carry no stop reason of their own; other hosts' is read through
            # the one table (``paging.messages``), which keeps ``length`` and the like.
            stop = None if fmt == "responses" else stop_reason(message)
            out.append(Message("assistant", message_id, timestamp, blocks,
                               stop_reason=stop or ("tool_use" if calls else "stop"),
                               model=None if fmt == "responses" else message.get("model")))
        elif role == "toolResult":
            call_id = str(body.get("toolCallId", ""))
            out.append(Message(
                "tool_result", f"{message_id}.r{view.part}" if fmt == "anthropic" else message_id,
                timestamp, _text_or_empty(message, fmt, "output") or _view_blocks(
                    body.get("content"), names), tool_call_id=call_id,
                tool_name=names.get(call_id), is_error=body.get("isError") is True))
        elif role == "user":
            out.append(Message("user", message_id, timestamp, _text_or_empty(
                message, fmt, "content") or _view_blocks(body.get("content"), names)))
    return out


def _text_or_empty(message: dict[str, Any], fmt: str, key: str) -> tuple[Block, ...]:
    """A Responses item's empty string content or output: one empty text, as the item holds
    (the view has no block for it)."""
    if fmt == "responses" and message.get(key) == "":
        return (TextBlock(""),)
    return ()


def _view_blocks(content: Any, names: dict[str, str]) -> tuple[Block, ...]:
    """A view's blocks as history blocks: text, images (with their link), tool calls (their
    names remembered for later results); thinking and every other part hidden."""
    blocks: list[Block] = []
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            blocks.append(TextBlock(block["text"]))
        elif kind == "image" and "data" in block:
            url = block.get("url")
            blocks.append(ImageBlock("" if url else str(block.get("mimeType", "")),
                                     str(block.get("data", "")), url))
        elif kind == "toolCall" and isinstance(block.get("id"), str):
            name = str(block.get("name", ""))
            names[block["id"]] = name
            blocks.append(ToolCall(block["id"], name, block.get("arguments")))
        elif kind in ("thinking", "redacted_thinking"):
            blocks.append(HiddenBlock(kind))
        else:
            blocks.append(HiddenBlock("unknown"))
    return tuple(blocks)


def join_turns(messages: list[Message], joinable: set[str]) -> list[Message]:
    """Merge each run of consecutive assistant Messages whose ids are ``joinable`` (Responses
    items) into one, under the first id: one model response, one model turn with its calls
    (the runs ``paging.formats.responses_runs`` makes one view)."""
    out: list[Message] = []
    for message in messages:
        previous = out[-1] if out else None
        if (previous is not None and message.role == "assistant" and previous.role == "assistant"
                and message.id in joinable and previous.id in joinable):
            has_calls = bool(previous.tool_calls or message.tool_calls)
            out[-1] = replace(previous, content=previous.content + message.content,
                              stop_reason="tool_use" if has_calls else message.stop_reason)
            continue
        out.append(message)
    return out


# --- the selector's history questions, for a select_context request --------------------------


class LedgerHistory:
    """The selector's ``RawHistory``, answered from the ledger and the request."""

    def __init__(self, request: Request,
                 items: Sequence[HistoryItem] | Callable[[], Sequence[HistoryItem]]):
        """``items``: the ledger's history items, or what makes them (``LedgerSession.items``):
        then they are made only when the selector first asks about a frontier or the last
        item, which most calls never do (the ledger does not change within a call, so the
        answer is the same as made up front)."""
        self.request = request
        self._source = items
        self._items: dict[str, HistoryItem] | None = None
        self._last: HistoryItem | None = None
        self._owner: dict[int, tuple[str, str, str]] | None = None  # built when first asked

    @property
    def items(self) -> dict[str, HistoryItem]:
        if self._items is None:
            source = self._source
            items = source() if callable(source) else source
            self._items = {item.history_id: item for item in items}
            self._last = items[-1] if items else None
        return self._items

    @property
    def last(self) -> HistoryItem | None:
        self.items  # noqa: B018 — made with the items
        return self._last

    def indexes_of(self, history_id: str) -> list[int]:
        """The views whose ``key_of`` can name ``history_id``: those of its host message (a
        scan in C of the ids, not a pass in Python over every view)."""
        ids, parts = self.request.ids, self.request.views.parts
        found: list[int] = []
        source = -1
        while True:
            try:
                source = ids.index(history_id, source + 1)
            except ValueError:
                return found
            first = sum(parts[:source])  # views come in host-message order, parts[k] each
            found.extend(range(first, first + parts[source]))

    def key_of(self, index: int) -> CutKey | None:
        history_id = self.request.history_id(index)
        role = self.request.roles[index]
        if history_id is None or role not in ("user", "assistant"):
            return None
        return CutKey(history_id, self.request.first_call(index) if role == "assistant" else None)

    def resolves(self, frontier: Frontier) -> bool:
        item = self.items.get(frontier.last_evicted.history_id)
        if item is None:
            return False
        call = frontier.last_evicted.tool_call_id
        if call is not None and (item.kind != "model_turn" or item.call(call) is None):
            return False
        if frontier.kind == "partialTurn":
            if item.kind != "model_turn":
                return False
            user = frontier.user_history_id
            if user is not None and getattr(self.items.get(user), "kind", None) != "user":
                return False
        return True

    def is_last_item(self, index: int) -> bool:
        key = self.key_of(index)
        return (key is not None and self.last is not None and self.last.kind == "model_turn"
                and self.last.history_id == key.history_id)

    def tool_reference(self, index: int) -> tuple[str, str, str] | None:
        if self._owner is None:
            self._owner = self.request.tool_owners()
        return self._owner.get(index)
