"""Provider message formats in and out: Anthropic Messages, OpenAI Chat Completions and
Responses, Pi.

The selector works on one shape, Pi's AgentMessage (``user``, ``assistant`` with ``toolCall``
blocks and ``stopReason``, ``toolResult``, ``custom``, ``system`` …). :func:`to_views` turns a
host's request into such *views*, each remembering which input message (and which part of it) it
came from; :func:`render` turns the kept views back into the host's own format. Messages that are
kept whole come back as the very objects the host sent. Two cases are rebuilt, on purpose:

* **Anthropic user messages with tool results.** A user message made only of ``tool_result``
  blocks is tool output, not a request: each block becomes a ``toolResult`` view. A message that
  mixes results with text or images becomes those results followed by a ``user`` view (the
  results close the previous exchange, the text starts the next request). If only some parts are
  kept — the previous exchange left the window but the new request stays — the message is rebuilt
  from the kept blocks, in their original order.
* **Replaced content.** ``render(..., replacements)`` swaps the content of a kept tool result
  (recovery references, distilled outputs, outputs without their old images) or of a user
  request (an omitted exchange's stub) for one text; the rest of the message stays.
* **The paging notice.** OpenAI and Pi get a leading user message. Anthropic requires the first
  message to be a user message and merges consecutive ones, so when the first kept message is a
  user message the notice is put in front of its content as a text block; otherwise a leading
  user message carries it. Either way the bytes are the same on every call until the cut moves.

Resident items (paging/resident.py: system and developer messages, Codex's set-up and tool-list
items, Anthropic ``role: "system"`` messages) are never views: they are never evicted and keep
their places among the kept messages; those before the first kept message come first, then the
notice (for Anthropic, whose first message must be the user's, the notice comes first).

OpenAI Responses ``input`` items (what Codex sends) are one item per message, call, output or
reasoning, so one model response is a *run* of items (reasoning, assistant text, function /
custom tool / shell calls). The run becomes one assistant view whose source is its first item;
the other items are its *followers* (no views of their own) and are rendered with it, so a
reasoning item with encrypted content always travels with the calls it produced and parallel
calls stay one exchange with their outputs. Reasoning is private: a thinking view, counted but
never read. The ledger groups the same runs (``index.history.join_turns``).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal

from context_paging.paging.messages import pi_stop_reason as _stop
from context_paging.paging.resident import (
    RESPONSES_CALLS as _RESPONSES_CALLS,
)
from context_paging.paging.resident import (
    RESPONSES_MODEL,
    resident_indexes,
)
from context_paging.paging.resident import (
    RESPONSES_OUTPUTS as _RESPONSES_OUTPUTS,
)

Format = Literal["anthropic", "openai", "responses", "pi"]
FORMATS: tuple[Format, ...] = ("anthropic", "openai", "responses", "pi")
Named = tuple[int, str, str]
_CALL_NAME = itemgetter(1, 2)


class FormatError(ValueError):
    """The messages do not have the shape of the named (or any) format."""

    code = "INVALID_MESSAGE_STRUCTURE"


@dataclass(frozen=True, slots=True)
class View:
    message: dict[str, Any]  # Pi-shaped
    source: int  # index of the host message it came from
    part: int = 0  # which part of that message (Anthropic mixed user messages have several)


@dataclass(frozen=True, slots=True)
class Views:
    format: Format
    resident: tuple[int, ...]  # resident items (paging/resident.py), in order, never evicted
    views: tuple[View, ...]
    parts: tuple[int, ...]  # how many views each host message produced
    followers: dict[int, tuple[int, ...]] | None = None  # Responses: a run's other items
    # (message index, call id, tool name), in order, as each message named its calls: what a
    # later message's tool result is named by; to_views replays a prefix of it (``earlier``)
    named: tuple[Named, ...] = ()


def detect_format(messages: Sequence[Any]) -> Format:
    """The format of a request, or a FormatError naming what is ambiguous or wrong."""
    votes: set[Format] = set()
    system = False  # a ``system`` message: OpenAI's, or Claude Code's inside Anthropic messages
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise FormatError(f"message {index} is not an object")
        if _is_responses_item(message):
            votes.add("responses")
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "system" and "tool_calls" not in message:
            system = True
        elif role in ("tool", "developer") or "tool_calls" in message:
            votes.add("openai")
        elif role in ("toolResult", "custom", "bashExecution", "compactionSummary",
                      "branchSummary") or "stopReason" in message:
            votes.add("pi")
        elif isinstance(content, list):
            kinds = {b.get("type") for b in content if isinstance(b, dict)}
            if kinds & {"tool_use", "tool_result", "redacted_thinking"}:
                votes.add("anthropic")
            elif kinds & {"toolCall"}:
                votes.add("pi")
            elif kinds & {"image_url", "input_audio", "refusal"}:
                votes.add("openai")
    if system and not votes - {"anthropic"}:
        votes.add("anthropic" if votes else "openai")
    if len(votes) > 1:
        raise FormatError(
            "messages mix formats (" + ", ".join(sorted(votes)) + "); pass format explicitly"
        )
    if not votes:
        if all(isinstance(m.get("content"), str) for m in messages):
            return "openai"  # plain text chat reads the same in all three; any choice is exact
        raise FormatError(
            "cannot tell the message format (no tool calls or format-specific fields); "
            "pass format = 'anthropic', 'openai' or 'pi'"
        )
    return votes.pop()


def to_views(messages: Sequence[dict[str, Any]], fmt: Format, resident: bool = True,
             earlier: Views | None = None, start: int = 0) -> Views:
    """The request's views. ``resident=False``: no message is taken as resident input (the
    ledger's history reads stored messages one at a time, and a system message there is simply
    not history).

    ``earlier``, ``start``: the views of an earlier request (read with ``resident``, in this
    format) whose first ``start`` messages have the JSON values of these, ``start`` as
    :func:`reusable` gives it: the views of those messages are taken from it as they are, and
    only the messages after them are converted (the value is the one converting all of them
    gives). A view is a value made once and never changed afterwards: nothing downstream writes
    into a view's message, and Pi's views are copies of the host's dicts, so a host that edits
    its own messages in place does not change a view kept for a later call (the edit changes
    the message's fingerprint, and so its view is made again)."""
    if earlier is None:
        start = 0
    if fmt == "responses":
        return _responses_views(messages, resident, earlier, start)
    if fmt == "pi":
        made = tuple(View(detached(m), i) for i, m in enumerate(messages[start:], start))
        return Views(fmt, (), earlier.views[:start] + made if start else made,  # type: ignore
                     (1,) * len(messages))
    convert = _anthropic_views if fmt == "anthropic" else _openai_views
    kept, views, parts, names, named = _taken(earlier, start)
    standing = set(resident_indexes(messages, fmt, start)) if resident is not False else set()
    kept.extend(sorted(standing))
    for index in range(start, len(messages)):
        message = messages[index]
        if not isinstance(message, dict):
            raise FormatError(f"message {index} is not an object")
        if index in standing:
            parts.append(0)
            continue
        produced = [View(m, index, part) for part, m in enumerate(convert(message, index, names))]
        views.extend(produced)
        parts.append(len(produced))
        _name_calls(named, index, produced[0].message, names)
    return Views(fmt, tuple(kept), tuple(views), tuple(parts), named=tuple(named))


def detached(value: Any) -> Any:
    """A copy of the JSON containers (dicts, lists; a tuple becomes a list, as JSON reads it
    back), leaves shared: strings and numbers are immutable, so it costs the structure, not the
    text. Views are kept for later calls (``earlier``): a library host may edit its own dicts
    in place after a call, and a view must stay what the message was when it was read."""
    kind = type(value)
    if kind is dict or (kind is not str and isinstance(value, dict)):  # subclasses as dicts
        return {k: detached(v) for k, v in value.items()}
    if kind is list or kind is tuple or (kind is not str and isinstance(value, list | tuple)):
        return [detached(v) for v in value]
    return value


def reusable(messages: Sequence[Any], fmt: Format, shared: int) -> int:
    """How many leading messages keep the views an earlier request gave them when its first
    ``shared`` messages are these: all of them, except in Responses, where a run of model items
    can go on in a later item (its view then changes): there, up to the start of the run the
    last shared item is in."""
    if fmt != "responses":
        return shared
    while shared and isinstance(messages[shared - 1], dict) and (
            responses_role(messages[shared - 1]) == "model"):
        shared -= 1
    return shared


def _taken(earlier: Views | None, start: int) -> tuple[list[int], list[View], list[int],
                                                         dict[str, str], list[Named]]:
    """What converting the first ``start`` messages left: their resident indexes, views,
    parts, the call-id -> tool name map and its log, taken from ``earlier``."""
    if earlier is None or not start:
        return [], [], [], {}, []
    views = list(earlier.views[:sum(earlier.parts[:start])])
    # the log is in message order: the calls named before ``start`` are a prefix of it
    named = list(earlier.named[:bisect_left(earlier.named, (start,))])
    return ([i for i in earlier.resident if i < start], views, list(earlier.parts[:start]),
            dict(map(_CALL_NAME, named)), named)


def _name_calls(named: list[Named], index: int, view: dict[str, Any],
                names: dict[str, str]) -> None:
    """Log the names a model message's calls gave (what :func:`_taken` replays)."""
    if view.get("role") == "assistant":
        named.extend((index, b["id"], names[b["id"]]) for b in view["content"]
                     if b["type"] == "toolCall" and b.get("id") in names)


def _anthropic_views(message: dict[str, Any], index: int, names: dict[str, str]) -> list[dict]:
    role = message.get("role")
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise FormatError(f"message {index} has no content string or block list")
    if role == "assistant":
        out = []
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in SERVER_CALL_KINDS or is_server_result(block):
                # Complete inside this message (the server ran the tool): public text, not a
                # call waiting for a result (docs/host-protocol.md, "Formats").
                out.append({"type": "text", "text": public_json(block)})
            elif kind == "tool_use" and isinstance(block.get("id"), str):
                names[block["id"]] = str(block.get("name", ""))
                out.append({"type": "toolCall", "id": block["id"], "name": block.get("name", ""),
                            "arguments": detached(block.get("input", {}))})
            elif kind == "text":
                out.append({"type": "text", "text": block.get("text", "")})
            elif kind == "thinking":
                out.append({"type": "thinking", "thinking": block.get("thinking", "")})
            else:
                out.append({"type": kind or "unknown"})
        has_calls = any(b["type"] == "toolCall" for b in out)
        return [{"role": "assistant", "content": out, "stopReason": _stop(message, has_calls)}]
    if role == "system":  # resident input when a request is read (paging/resident.py)
        return [{"role": "system", "content": [_pi_block(b) for b in blocks]}]
    if role != "user":
        raise FormatError(f"message {index} has role {role!r}; Anthropic uses user, assistant "
                          "and system")
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    rest = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_result")]
    out = []
    for block in results:
        call_id = str(block.get("tool_use_id", ""))
        inner = block.get("content", "")
        inner_blocks = [{"type": "text", "text": inner}] if isinstance(inner, str) else inner
        out.append({"role": "toolResult", "toolCallId": call_id, "toolName": names.get(call_id, ""),
                    "content": [_pi_block(b) for b in inner_blocks or []],
                    "isError": bool(block.get("is_error", False))})
    if rest or not results:
        out.append({"role": "user", "content": [_pi_block(b) for b in rest]})
    return out


def _image_url(url: str) -> dict[str, Any]:
    """An image given by URL: a ``data:`` URL's bytes, or the link itself (``url``)."""
    head, _, data = url.partition(",") if url.startswith("data:") else ("", "", "")
    return _linked({"type": "image", "data": data,
                    "mimeType": head[5:].split(";")[0] or "image/*"},
                   None if url.startswith("data:") else url)


def _linked(image: dict[str, Any], url: Any) -> dict[str, Any]:
    """An image block with the link it was given by, if any: the ledger's history shows it
    (estimates and decisions read only ``data``)."""
    if isinstance(url, str) and url:
        image["url"] = url
    return image


def _pi_block(block: Any) -> dict[str, Any]:
    if not isinstance(block, dict):
        return {"type": "text", "text": str(block)}
    if is_private_part(block):
        return _private(block)
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image":
        source = block.get("source") if isinstance(block.get("source"), dict) else {}
        return _linked({"type": "image", "data": str(source.get("data", "") or ""),
                        "mimeType": str(source.get("media_type", "image/*"))},
                       source.get("url"))
    if kind == "image_url":
        url = block.get("image_url")
        url = url.get("url", "") if isinstance(url, dict) else str(url or "")
        return _image_url(url)
    return {"type": "text", "text": public_json(block)}


_PRIVATE_KINDS = frozenset({"thinking", "redacted_thinking", "reasoning"})
_PRIVATE_KEYS = frozenset({"thinking", "signature", "encrypted_content", "reasoning"})
# Assistant parts known to be public. Every other assistant part (``reasoning_text``,
# ``summary_text``, a type invented next year) is treated as private: it is counted but never
# read as text, indexed or returned (docs/sessions.md, "What is never read as text").
SERVER_CALL_KINDS = frozenset({"server_tool_use", "mcp_tool_use"})
_PUBLIC_ASSISTANT_KINDS = frozenset({
    "text", "output_text", "refusal", "tool_use", "toolCall", "tool_call", "function_call",
    "image", "image_url", "output_image"}) | SERVER_CALL_KINDS


def is_server_result(block: Any) -> bool:
    """A server tool's result inside the assistant message that made the call (Anthropic
    ``web_search_tool_result``, ``code_execution_tool_result``, ``mcp_tool_result`` …)."""
    kind = block.get("type") if isinstance(block, dict) else None
    return isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result"


def is_private_part(block: Any, role: str | None = None) -> bool:
    """The one private-part rule, for every path that builds text for a model, an index or a
    reply. Private: a part of a known reasoning kind or carrying a reasoning key, in any role
    and any host's dialect (e.g. Mistral's ``thinking`` parts in OpenAI-style content, a
    thinking block pasted into an Anthropic tool result); and in an assistant message any part
    of a kind not known to be public."""
    if not isinstance(block, dict):
        return False
    if block.get("type") in _PRIVATE_KINDS or not _PRIVATE_KEYS.isdisjoint(block):
        return True
    return role == "assistant" and block.get("type") not in _PUBLIC_ASSISTANT_KINDS and not (
        is_server_result(block))


def public_json(block: Any) -> str:
    """A public part (a server tool call or result, a document) as compact JSON text, with any
    nested private or opaque field (signatures, encrypted content) left out."""
    return json.dumps(_without_private_keys(block), ensure_ascii=False, separators=(",", ":"))


def _without_private_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_private_keys(v) for k, v in value.items()
                if k not in _PRIVATE_KEYS and not is_private_part(v)}
    if isinstance(value, list):
        return [_without_private_keys(v) for v in value if not is_private_part(v)]
    return value


def _private(block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "thinking",
            "thinking": json.dumps(block, ensure_ascii=False, separators=(",", ":"))}


def _openai_views(message: dict[str, Any], index: int, names: dict[str, str]) -> list[dict]:
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, str) or content is None:
        blocks = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, list):
        blocks = [_private(b) if is_private_part(b, role) else _pi_block(b) for b in content]
    else:
        raise FormatError(f"message {index} content must be a string, a list or null")
    if role in ("system", "developer"):
        return [{"role": "system", "content": blocks}]
    if role == "user":
        return [{"role": "user", "content": blocks}]
    if role == "assistant":
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            call_id = call.get("id") if isinstance(call, dict) else None
            if not isinstance(call_id, str):
                raise FormatError(f"message {index} has a tool call without a string id")
            raw = function.get("arguments", "")
            try:
                arguments = json.loads(raw) if isinstance(raw, str) else detached(raw)
            except ValueError:
                arguments = raw
            names[call_id] = str(function.get("name", ""))
            calls.append({"type": "toolCall", "id": call_id, "name": function.get("name", ""),
                          "arguments": arguments})
        return [{"role": "assistant", "content": blocks + calls,
                 "stopReason": _stop(message, bool(calls))}]
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise FormatError(f"message {index} (role tool) has no string tool_call_id")
        return [{"role": "toolResult", "toolCallId": call_id, "toolName": names.get(call_id, ""),
                 "content": blocks, "isError": False}]
    raise FormatError(f"message {index} has role {role!r}, which OpenAI chat does not use")


def render(
    messages: Sequence[dict[str, Any]],
    views: Views,
    kept: Sequence[int],
    notice: str | None,
    replacements: dict[int, str] | None = None,
) -> list[dict[str, Any]]:
    """The host's messages for the kept view indexes (in order), with the notice in front."""
    replacements = replacements or {}
    kept_parts: dict[int, list[int]] = {}
    order: list[int] = []
    for view_index in kept:
        view = views.views[view_index]
        if view.source not in kept_parts:
            kept_parts[view.source] = []
            order.append(view.source)
        kept_parts[view.source].append(view_index)
    body: list[tuple[int, dict[str, Any]]] = []
    for source in order:
        indexes = kept_parts[source]
        message = messages[source]
        if len(indexes) < views.parts[source]:
            message = _partial(message, views, indexes)
        if any(i in replacements for i in indexes):
            message = _replace(message, views, indexes, replacements)
        body.append((source, message))
        if views.followers and source in views.followers:
            body.extend((i, messages[i]) for i in views.followers[source])
    return _with_resident(messages, views, body, notice)


def _with_resident(messages: Sequence[dict[str, Any]], views: Views,
                   body: list[tuple[int, dict[str, Any]]],
                   notice: str | None) -> list[dict[str, Any]]:
    """The kept messages with the resident ones in their places. Resident messages before the
    first kept one come first; the notice follows them (Anthropic, whose first message must be
    the user's, gets it in front of everything)."""
    first = body[0][0] if body else len(messages)
    lead = [messages[i] for i in views.resident if i < first]
    later = [(i, messages[i]) for i in views.resident if i >= first]
    if later:
        body = sorted(body + later, key=_SOURCE)
    rest = [message for _, message in body]
    if notice is None:
        return lead + rest
    if views.format == "anthropic":
        return _with_notice(lead + rest, notice, views.format)
    return lead + _with_notice(rest, notice, views.format)


_SOURCE = itemgetter(0)


def _partial(message: dict[str, Any], views: Views, indexes: list[int]) -> dict[str, Any]:
    """An Anthropic user message rebuilt from the parts that stay in the window."""
    keep_results = {views.views[i].message.get("toolCallId") for i in indexes
                    if views.views[i].message["role"] == "toolResult"}
    keep_rest = any(views.views[i].message["role"] == "user" for i in indexes)
    blocks = [
        b for b in message["content"]
        if (isinstance(b, dict) and b.get("type") == "tool_result"
            and b.get("tool_use_id") in keep_results)
        or (keep_rest and not (isinstance(b, dict) and b.get("type") == "tool_result"))
    ]
    return {**message, "content": blocks}


def _replace(message: dict[str, Any], views: Views, indexes: list[int],
             replacements: dict[int, str]) -> dict[str, Any]:
    """A tool result's or a request's content replaced, the rest of the message as sent.

    Used for recovery mode (a tool result too large for the model window becomes a reference),
    for distilled tool outputs and for an omitted exchange's request (the decision's stub). The
    replacement is one text: Pi gets one text block, OpenAI a string, Anthropic a
    ``tool_result`` with one text block (its ``tool_use_id``, ``is_error`` and other keys kept)
    or, for a request, one text block in place of the request's own blocks. Same text in, same
    bytes out.
    """
    if views.format == "pi":
        text = replacements[indexes[0]]
        return {**message, "content": [{"type": "text", "text": text}]}
    if views.format == "openai":
        return {**message, "content": replacements[indexes[0]]}
    if views.format == "responses":
        if message.get("type") in _RESPONSES_OUTPUTS:
            return {**message, "output": replacements[indexes[0]]}
        return {**message, "content": [{"type": "input_text", "text": replacements[indexes[0]]}]}
    by_call = {views.views[i].message.get("toolCallId"): replacements[i]
               for i in indexes if i in replacements}
    request = next((replacements[i] for i in indexes
                    if i in replacements and views.views[i].message["role"] == "user"), None)
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    blocks = []
    request_written = False
    for block in content:
        is_result = isinstance(block, dict) and block.get("type") == "tool_result"
        if is_result and block.get("tool_use_id") in by_call:
            block = {**block, "content": [{"type": "text", "text": by_call[block["tool_use_id"]]}]}
        elif not is_result and request is not None:
            if request_written:
                continue  # the request's blocks are replaced by its one text, written once
            block, request_written = {"type": "text", "text": request}, True
        blocks.append(block)
    return {**message, "content": blocks}


def _with_notice(body: list[dict[str, Any]], notice: str, fmt: Format) -> list[dict[str, Any]]:
    if fmt == "pi":
        return [{"role": "user", "content": notice, "timestamp": 0}, *body]
    if fmt == "responses":
        return [{"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": notice}]}, *body]
    if fmt == "anthropic" and body and body[0].get("role") == "user":
        first = body[0]
        content = first.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        return [{**first, "content": [{"type": "text", "text": notice}, *blocks]}, *body[1:]]
    return [{"role": "user", "content": notice}, *body]


# --- OpenAI Responses input items ---------------------------------------------------------------

_RESPONSES_TYPES = RESPONSES_MODEL | _RESPONSES_OUTPUTS
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file"})


def _is_responses_item(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    if kind in _RESPONSES_TYPES:
        return True
    content = item.get("content")
    return (kind == "message" or isinstance(content, list)) and any(
        isinstance(b, dict) and b.get("type") in _RESPONSES_PARTS for b in content or ())


def responses_role(item: dict[str, Any]) -> str:
    """``user``, ``system`` (system/developer, and any item that is not conversation: resident,
    paging/resident.py), ``output`` (a call's output) or ``model`` (the model's own items,
    grouped into runs)."""
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role in ("system", "developer"):
            return "system"
        return "model" if role == "assistant" else "user"
    if kind in _RESPONSES_OUTPUTS:
        return "output"
    return "model" if kind in RESPONSES_MODEL else "system"


def responses_runs(items: Sequence[dict[str, Any]], start: int = 0) -> list[list[int]]:
    """Maximal runs of consecutive model items, as index lists (the ledger groups the same).
    ``start``: only those from there on (a run starts there: the item before is no model
    item)."""
    runs: list[list[int]] = []
    previous = None
    for index, item in enumerate(items[start:], start):
        if not isinstance(item, dict):
            raise FormatError(f"input item {index} is not an object")
        role = responses_role(item)
        if role == "model":
            if previous == "model":
                runs[-1].append(index)
            else:
                runs.append([index])
        previous = role
    return runs


def _responses_text(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}] if value else []
    blocks = []
    for block in value if isinstance(value, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(block.get("text"), str):
            blocks.append({"type": "text", "text": block["text"]})
        elif kind == "input_image":
            blocks.append(_image_url(str(block.get("image_url") or "")))
        elif isinstance(block, dict) and is_private_part(block):
            blocks.append(_private(block))
        else:
            blocks.append(_pi_block(block))
    return blocks


def responses_call(item: dict[str, Any]) -> tuple[str, Any] | None:
    """The tool name and arguments of a Responses call item (``function_call`` arguments are a
    JSON string, parsed when they parse; custom and shell calls carry theirs as they are), or
    None for any other item."""
    kind = item.get("type")
    if kind not in _RESPONSES_CALLS:
        return None
    name = str(item.get("name") or ("local_shell" if kind == "local_shell_call" else ""))
    raw = item.get("arguments", item.get("input", item.get("action")))
    try:
        arguments = (json.loads(raw) if kind == "function_call" and isinstance(raw, str)
                     else detached(raw))
    except ValueError:
        arguments = raw
    return name, arguments


def _model_block(item: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]]:
    kind = item.get("type", "message")
    if kind == "message":
        return _responses_text(item.get("content"))
    call = responses_call(item)
    if call is not None and isinstance(item.get("call_id"), str):
        name, arguments = call
        names[item["call_id"]] = name
        return [{"type": "toolCall", "id": item["call_id"], "name": name,
                 "arguments": arguments}]
    return [_private(item)]  # reasoning, compaction, server-side calls: counted, never read


def _responses_views(items: Sequence[dict[str, Any]], leading: bool = True,
                     earlier: Views | None = None, start: int = 0) -> Views:
    resident, views, parts, names, named = _taken(earlier, start)
    parts.extend([0] * (len(items) - start))
    # Runs before ``start`` end before it (``reusable``): their followers are kept as they were.
    followers = {k: v for k, v in (earlier.followers or {}).items() if k < start} if (
        earlier is not None and start) else {}
    runs = {run[0]: run for run in responses_runs(items, start)}
    in_run = {i for run in runs.values() for i in run}
    standing = set(resident_indexes(items, "responses", start)) if leading else set()
    resident.extend(sorted(standing))
    for index in range(start, len(items)):
        item = items[index]
        role = responses_role(item)
        if index in standing:
            continue
        if index in runs:
            run = runs[index]
            content = [b for i in run for b in _model_block(items[i], names)]
            has_calls = any(b["type"] == "toolCall" for b in content)
            views.append(View({"role": "assistant", "content": content,
                               "stopReason": _stop(items[run[-1]], has_calls)}, index))
            parts[index] = 1
            if len(run) > 1:
                followers[index] = tuple(run[1:])
            _name_calls(named, index, views[-1].message, names)
        elif index in in_run:
            continue  # rendered with its run's first item
        elif role == "output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise FormatError(f"input item {index} ({item.get('type')}) has no call_id")
            views.append(View({"role": "toolResult", "toolCallId": call_id,
                               "toolName": names.get(call_id, ""),
                               "content": _responses_text(item.get("output")),
                               "isError": False}, index))
            parts[index] = 1
        else:
            views.append(View({"role": "system" if role == "system" else "user",
                               "content": _responses_text(item.get("content"))}, index))
            parts[index] = 1
    return Views("responses", tuple(resident), tuple(views), tuple(parts), followers,
                 tuple(named))
