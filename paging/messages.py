"""Pi-shaped messages, the one shape paging reads: the helpers every module reads them with, and
the one table of stop reasons.

Views (``paging.formats``), the selector (``paging.units``, ``paging.select``), distillation
(``paging.distill``) and the ledger's history (``index.sources.pi``) all read the same dicts
(``user``, ``assistant`` with ``toolCall`` blocks and ``stopReason``, ``toolResult`` …), so they
read them here, once, rather than each with its own idea of what a tool call or an interrupted
response is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Message = Mapping[str, Any]

# Every stop reason a host API or an agent writes, by what it means: ``stop``, ``tool_use``,
# ``length``, ``aborted`` or ``error``. Anthropic (``end_turn``, ``tool_use``, ``max_tokens``),
# OpenAI chat (``stop``, ``tool_calls``, ``length``), Responses statuses and Pi's own
# ``stopReason`` (``toolUse``, ``stop``, ``length``, ``aborted``, ``error``) and Claude Code's
# session files all read here.
STOP_REASONS: dict[str, str] = {
    "end_turn": "stop", "stop": "stop", "stop_sequence": "stop", "refusal": "stop",
    "tool_use": "tool_use", "toolUse": "tool_use", "tool_calls": "tool_use",
    "max_tokens": "length", "length": "length", "model_context_window_exceeded": "length",
    "aborted": "aborted", "cancelled": "aborted", "canceled": "aborted",
    "interrupted": "aborted",
    "error": "error",
}
# The reasons that mark an interrupted response: its calls may lack results, and it is a failed
# turn in history.
INTERRUPTED = frozenset({"aborted", "error"})
# Where a host message keeps its stop reason, in the order they are looked at.
STOP_KEYS = ("stop_reason", "finish_reason", "stopReason", "status")


def stop_reason(message: Message) -> str | None:
    """The meaning (a value of :data:`STOP_REASONS`) of the first stop reason ``message``
    carries that the table knows, or None."""
    for key in STOP_KEYS:
        value = message.get(key)
        if isinstance(value, str) and value in STOP_REASONS:
            return STOP_REASONS[value]
    return None


def pi_stop_reason(message: Message, has_calls: bool) -> str:
    """A host assistant message's Pi ``stopReason``: ``aborted``/``error`` when the host marked
    it interrupted, else ``toolUse`` with calls and ``stop`` without (a view's stop reason only
    ever matters as interrupted or not)."""
    meaning = stop_reason(message)
    if meaning in INTERRUPTED:
        return meaning  # type: ignore[return-value]
    return "toolUse" if has_calls else "stop"


def role_of(message: Message) -> Any:
    return message.get("role")


def blocks(message: Message) -> list[Mapping[str, Any]]:
    """The content's blocks (a string content has none)."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    # ``type is dict`` first: the ABC check behind isinstance(…, Mapping) is the slow part of a
    # pass over every block of a long conversation, and JSON blocks are plain dicts.
    return [b for b in content if type(b) is dict or isinstance(b, Mapping)]


def text_of(message: Message) -> str:
    """The text blocks joined with newlines (a string content is its own text)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in blocks(message) if b.get("type") == "text")


def tool_call_blocks(message: Message) -> list[Mapping[str, Any]]:
    """The ``toolCall`` blocks of a message with a string id and name (any role)."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if (type(b) is dict or isinstance(b, Mapping))
            and b.get("type") == "toolCall"
            and isinstance(b.get("id"), str) and isinstance(b.get("name"), str)]


def tool_calls(message: Message) -> list[Mapping[str, Any]]:
    """An assistant's tool calls (none for any other role)."""
    return tool_call_blocks(message) if role_of(message) == "assistant" else []


def tool_call_ids(message: Message) -> list[str]:
    """Ids of a message's tool calls: blocks with type toolCall and string id and name."""
    return [block["id"] for block in tool_call_blocks(message)]


def is_interrupted(message: Message) -> bool:
    """An assistant response the host marked aborted or failed."""
    return role_of(message) == "assistant" and message.get("stopReason") in INTERRUPTED
