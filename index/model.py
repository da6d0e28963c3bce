"""The normalized history model that all three session formats (and the ledger) are read into.

A source module turns the records of one session file into a :class:`Conversation`: session
facts plus the *active path* as a list of :class:`Message` values, oldest first. Messages have
three roles only — ``user`` (a real request), ``assistant`` (one model response) and
``tool_result`` — because that is all paging, search and distillation need; injected context,
settings changes and lifecycle events are counted, not carried. A compaction summary is a
``user`` message of origin ``compaction_summary`` (docs/sessions.md, "Compaction summaries").

Privacy is structural: thinking, redacted thinking, signatures and unknown assistant blocks are
read into :class:`HiddenBlock`, which keeps only *what kind* of block stood there, so no tool can
return their text by mistake (docs/sessions.md, "What is never read as text").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from context_paging.paging.messages import INTERRUPTED

Role = Literal["user", "assistant", "tool_result"]
Source = Literal["pi", "claude", "codex", "gemini", "opencode", "ledger"]


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """An image; ``data`` is base64 (possibly empty when only a URL is known)."""

    mime: str
    data: str = ""
    url: str | None = None

    @property
    def byte_length(self) -> int:
        return len(self.data) * 3 // 4


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call. ``arguments`` is the parsed JSON value, or the raw string if it was not JSON."""

    id: str
    name: str
    arguments: Any
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class HiddenBlock:
    """A block that is never indexed or returned (thinking, redacted thinking, unknown)."""

    kind: str


Block = TextBlock | ImageBlock | ToolCall | HiddenBlock


@dataclass(frozen=True, slots=True)
class Usage:
    """Provider token counts of one response, non-overlapping
    (docs/sessions.md, "Token counts per response")."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int | None = None

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    def __add__(self, other: Usage) -> Usage:
        reasoning = None
        if self.reasoning is not None or other.reasoning is not None:
            reasoning = (self.reasoning or 0) + (other.reasoning or 0)
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            reasoning,
        )


# Normalized stop reasons: paging.messages.STOP_REASONS; INTERRUPTED (imported above) marks an
# interrupted response.


@dataclass(frozen=True, slots=True)
class Message:
    """One model-visible message on the active path.

    ``id`` is stable as the file grows: the agent's own id where the format has one (Pi entry id,
    Claude Code uuid of the first fragment), else ``L<line>`` of the first line it came from.
    """

    role: Role
    id: str
    timestamp: str
    content: tuple[Block, ...]
    line: int = 0
    # user
    origin: str = "typed"  # typed | bash | steering | slash_command | notification |
    # compaction_summary (the summary an agent wrote when it compacted: not a request)
    # assistant
    stop_reason: str | None = None  # stop | tool_use | length | aborted | error | None
    model: str | None = None
    usage: Usage | None = None
    # tool_result
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolCall))

    @property
    def interrupted(self) -> bool:
        return self.stop_reason in INTERRUPTED


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What is known about a session without reading its messages."""

    source: Source
    session_id: str
    path: str
    cwd: str | None = None
    title: str | None = None
    created: str | None = None  # ISO-8601 UTC
    updated: str | None = None
    format: str = ""  # e.g. "pi-v3", "claude-2.1.37", "codex-0.40.0"
    parent_id: str | None = None  # the session this one was forked from or spawned by
    parent_kind: str | None = None  # fork | subagent | resume


@dataclass(frozen=True, slots=True)
class Conversation:
    """A session read into the normalized model: the active path plus what was set aside."""

    info: SessionInfo
    messages: tuple[Message, ...]
    warnings: tuple[Any, ...] = ()  # index.jsonl.Issue values
    compactions: int = 0
    usage: Usage | None = None  # summed over every response in the file, all branches
    stats: dict[str, int] = field(default_factory=dict)  # per-format counters, for tests and CLI
