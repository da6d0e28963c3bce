"""Reading a conversation: runs, turns, tool calls, questions and sizes
(docs/distillation.md, "What can be distilled").

Input shape, used by the whole package: ``entries`` is a sequence of ``(history_id, message)``
pairs, oldest first, where ``message`` is a Pi AgentMessage dict (``user``, ``assistant`` with
``text``/``thinking``/``toolCall`` blocks and ``stopReason``, ``toolResult`` with
``toolCallId``/``toolName``/``content``/``isError``, ``custom``, ``system``, ``bashExecution``,
``compactionSummary``, ``branchSummary``). The history id is the message's stable id in stored
history; the messages of one history item (an assistant and its tool results) may share it. Tool
outputs are addressed by their ``toolCallId``, exchanges by the history id of their prompt.

A *run* is a non-steering user prompt and everything after it up to the next one. A user
message is *steering* when the closest earlier message (custom notices skipped) is a tool
result, or an assistant with tool calls that did not stop as aborted/error: it was typed while
the agent worked, so it belongs to the run in progress. A *turn* is one assistant message of a
run, counted from 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from context_paging.paging.distill.render import plural, tool_label
from context_paging.paging.messages import (  # the one set of Pi-message helpers
    blocks,
    is_interrupted,
    text_of,
    tool_calls,
)
from context_paging.paging.messages import role_of as role
from context_paging.paging.tokens import image_size

Entry = tuple[str, Mapping[str, Any]]
Message = Mapping[str, Any]

IMAGE_UNKNOWN_TOKENS = 1_600
IMAGE_MAX_TOKENS = 6_700
LATER_CALLS_LIMIT = 30
EDITABLE_ROLES = frozenset({"user", "assistant", "toolResult", "custom"})
_READ_TOOLS = frozenset({"read"})
_WRITE_TOOLS = frozenset({"edit", "write", "multiedit"})


def images_of(message: Message) -> list[Mapping[str, Any]]:
    return [b for b in blocks(message) if b.get("type") == "image"]


def arguments_of(call: Mapping[str, Any]) -> Mapping[str, Any]:
    arguments = call.get("arguments")
    return arguments if type(arguments) is dict or isinstance(arguments, Mapping) else {}


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def image_cost(block: Mapping[str, Any]) -> tuple[int, tuple[int, int] | None]:
    """Tokens of an image (``ceil(w·h / 750)`` within 1…6,700; 1,600 when unreadable)."""
    size = image_size(str(block.get("data", "")))
    if size is None:
        return IMAGE_UNKNOWN_TOKENS, None
    return max(1, min(IMAGE_MAX_TOKENS, math.ceil(size[0] * size[1] / 750))), size


def content_chars(message: Message) -> int:
    """A message's size in text chars: an image counts its tokens × 4, thinking its text plus
    half its signature, a tool call its name plus its arguments JSON, other blocks their JSON."""
    kind = role(message)
    if kind == "bashExecution":
        return len(str(message.get("command", ""))) + len(str(message.get("output", "")))
    if kind in ("compactionSummary", "branchSummary"):
        return len(str(message.get("summary", "")))
    content = message.get("content")
    if isinstance(content, str):
        return len(content)
    total = 0
    for block in blocks(message):
        kind = block.get("type")
        if kind == "text":
            total += len(str(block.get("text", "")))
        elif kind == "image":
            total += image_cost(block)[0] * 4
        elif kind == "thinking":
            signature = str(block.get("thinkingSignature") or block.get("signature") or "")
            total += len(str(block.get("thinking", ""))) + len(signature) // 2
        elif kind == "toolCall":
            total += len(str(block.get("name", ""))) + len(dumps(block.get("arguments", {})))
        else:
            total += len(dumps(block))
    return total


def is_steering(messages: Sequence[Message], index: int) -> bool:
    for position in range(index - 1, -1, -1):
        if role(messages[position]) != "custom":
            return _steers(messages[position])
    return False


def _steers(earlier: Message) -> bool:
    """A user message after ``earlier`` (the nearest non-custom one) steers a running turn."""
    if role(earlier) == "toolResult":
        return True
    return bool(tool_calls(earlier)) and not is_interrupted(earlier)


def run_starts(messages: Sequence[Message]) -> list[int]:
    """Indexes of the non-steering user messages: where runs and exchanges start (one pass:
    each user message is judged by the nearest non-custom message before it)."""
    starts: list[int] = []
    earlier: Message | None = None
    for i, message in enumerate(messages):
        kind = role(message)
        if kind == "user" and (earlier is None or not _steers(earlier)):
            starts.append(i)
        if kind != "custom":
            earlier = message
    return starts


@dataclass(frozen=True, slots=True)
class Call:
    id: str
    name: str
    arguments: Mapping[str, Any]
    turn: int
    index: int  # of the assistant message

    @property
    def label(self) -> str:
        return tool_label(self.name, self.arguments)


@dataclass(frozen=True, slots=True)
class Read:
    """What a pass reads of one message, worked out once per message: its text
    (:func:`text_of`), whether it holds images, its tool calls as ``(id, name, arguments)``
    (an assistant's) and :func:`content_chars`. The window keeps these between calls by a key
    that names the message's content, so a re-sent prefix is not read again."""

    text: str
    images: bool
    calls: tuple[tuple[str, str, Mapping[str, Any]], ...]
    chars: int

    @classmethod
    def of(cls, message: Message) -> Read:
        return cls(text_of(message), bool(images_of(message)),
                   tuple((b["id"], b["name"], arguments_of(b)) for b in tool_calls(message)),
                   content_chars(message))


def calls_of(messages: Sequence[Message], start: int, end: int,
             reads: Sequence[Read] | None = None) -> list[Call]:
    """Tool calls of the assistant messages in [start, end), with their turn in that span.
    ``reads``: the messages' :class:`Read`, when the caller has them."""
    calls: list[Call] = []
    turn = -1
    for i in range(start, end):
        if role(messages[i]) != "assistant":
            continue
        turn += 1
        if reads is not None:
            calls.extend(Call(c, name, arguments, turn, i) for c, name, arguments in reads[i].calls)
            continue
        for block in tool_calls(messages[i]):
            calls.append(Call(block["id"], block["name"], arguments_of(block), turn, i))
    return calls


def assistant_count(messages: Sequence[Message], start: int = 0, end: int | None = None) -> int:
    return sum(1 for m in messages[start:end] if role(m) == "assistant")


def prompt_text(message: Message) -> str:
    text = text_of(message)
    if not text.strip() and images_of(message):
        return "[an image, no text]"
    return text


def question_of(messages: Sequence[Message], start: int, end: int) -> str:
    """The run's prompt, plus every steering message the user added while it ran."""
    parts = [prompt_text(messages[start])]
    for i in range(start + 1, end):
        if role(messages[i]) == "user":
            parts.append(f"[added by the user during the run] {prompt_text(messages[i])}")
    return "\n\n".join(parts)


def assistant_texts(messages: Sequence[Message], start: int, end: int,
                    reads: Sequence[Read] | None = None) -> list[str]:
    if reads is not None:
        return [text for i in range(start, end)
                if role(messages[i]) == "assistant" and (text := reads[i].text).strip()]
    return [
        text
        for m in messages[start:end]
        if role(m) == "assistant" and (text := text_of(m)).strip()
    ]


def normalize_path(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    while "//" in path:
        path = path.replace("//", "/")
    return path


def normalize_command(command: str) -> str:
    command = " ".join(command.split())
    if command.endswith("2>&1"):
        command = command[: -len("2>&1")]
    return command.strip()


def _path(arguments: Mapping[str, Any]) -> str | None:
    for key in ("path", "file_path", "file"):
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return normalize_path(value)
    return None


def _command(arguments: Mapping[str, Any]) -> str | None:
    for key in ("command", "cmd"):
        value = arguments.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        if isinstance(value, str) and value.strip():
            return normalize_command(value)
    return None


def _range(arguments: Mapping[str, Any]) -> tuple[Any, Any]:
    return arguments.get("offset", 1), arguments.get("limit")


CallFacts = tuple[str, str | None, tuple[Any, Any], str | None]  # name, path, range, command


def call_facts(calls: Sequence[Call]) -> list[CallFacts]:
    """What :func:`superseded_by` compares, per call: worked out once for a whole pass."""
    return [(c.name.lower(), _path(c.arguments), _range(c.arguments), _command(c.arguments))
            for c in calls]


def superseded_by(
    tool: str, arguments: Mapping[str, Any], turn: int, calls: Sequence[Call],
    facts: Sequence[CallFacts] | None = None,
) -> str | None:
    """Why a newer call made this output out of date, or None (later turns only;
    docs/distillation.md, "Mid-run checkpoints and break-even").
    ``facts``: :func:`call_facts` of ``calls``, from a caller that asks about many outputs."""
    if facts is None:
        facts = call_facts(calls)
    later = [(c, f) for c, f in zip(calls, facts, strict=True) if c.turn > turn]

    def when(call: Call) -> str:
        return plural(call.turn - turn, "turn") + " later"

    name = tool.lower()
    path = _path(arguments)
    if name in _READ_TOOLS and path is not None:
        for call, (other, where, _, _) in later:
            if other in _WRITE_TOOLS and where == path:
                return f"the file changed after this read ({call.label}, {when(call)})"
        lines = _range(arguments)
        for call, (other, where, span, _) in later:
            if other in _READ_TOOLS and where == path and span == lines:
                return f"the same lines were read again later ({call.label}, {when(call)})"
        return None
    command = _command(arguments)
    if command is not None:
        for call, (_, _, _, ran) in later:
            if ran == command:
                return f"the same command ran again later ({when(call)})"
        return None
    own = dumps(arguments)
    for call, _ in later:
        if call.name == tool and dumps(call.arguments) == own:
            return f"the same {tool} call ran again later ({when(call)})"
    return None


def later_calls_for(
    turn: int, calls: Sequence[Call], limit: int = LATER_CALLS_LIMIT,
    labels: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """Labels of the calls made after ``turn``; a long list keeps both ends. ``labels``: the
    calls' labels computed once by a caller that asks for many turns (linear, not quadratic)."""
    if labels is None:
        labels = [c.label for c in calls]
    labels = [label for c, label in zip(calls, labels, strict=True) if c.turn > turn]
    if len(labels) <= limit:
        return tuple(labels)
    half = limit // 2
    skipped = len(labels) - 2 * half
    return (*labels[:half], f"[… {skipped} more calls …]", *labels[-half:])
