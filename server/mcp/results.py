"""What the tools return: the reply models (their schemas are the tools' output schemas) and
the builders the CLI shares with the tools (``search --json``, ``browse --json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from context_paging.index.catalog import SessionSummary
from context_paging.index.stats import Stats, Tokens
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from context_paging.index.service import SearchReply


class Reference(BaseModel):
    history_id: str
    session: str
    sequence: int = Field(description="Position among the session's visible items (0 = oldest)")
    kind: Literal["user", "model_turn"]
    timestamp: str
    preview: str
    tools: list[str]
    files: list[str]
    failed: bool
    previous_history_id: str | None
    next_history_id: str | None
    compaction_summary: bool = Field(default=False, description=(
        "A summary the agent wrote when it compacted the conversation, not a request"))


class Match(BaseModel):
    source: Literal["user", "assistant", "tool_result"]
    tool_name: str | None = Field(description="The tool whose call or output this line is in")
    tool_call_id: str | None = Field(description="For a tool output: pass it to recall or "
                                     "read_context_output")
    content_index: int | None = Field(description="For a user or assistant block: its index")
    line: int = Field(description="1-based line in that output or block (recall's offset)")
    text: str = Field(description="The line, clipped around the match ('…' where cut)")
    spans: list[list[int]] = Field(description="[start, end) of each match in text")


class SearchReference(Reference):
    matches: list[Match] = Field(description="The lines that made this a hit, best first")


class Searched(BaseModel):
    scope: Literal["session", "project", "all"]
    sessions: list[str] = Field(description="The session searched (scope 'session')")
    session_count: int
    item_count: int
    project: str | None = None
    chosen_by: Literal["given", "select_context", "directory", "proxy"] | None = Field(
        default=None, description="How the session was chosen when none was given")


class SearchResult(BaseModel):
    references: list[SearchReference]
    items: list[dict[str, Any]] | None = None
    unloaded_history_ids: list[str] | None = None
    note: str | None = None
    searched: Searched
    next_offset: int | None = Field(default=None, description="Pass as offset for the next "
                                    "page of hits; null when there are no more")


class BrowseResult(BaseModel):
    references: list[Reference]
    note: str | None = None


class LoadResult(BaseModel):
    items: list[dict[str, Any]]
    note: str | None = Field(default=None, description="Set when long tool outputs were cut "
                             "to keep the reply small: the calls that return them whole")


class OutputPage(BaseModel):
    """A page of read_context_output. The text copy of the reply is the page's text itself,
    then (when more follows) a second text with the call for the next page."""

    offset: int
    next_offset: int | None
    total_characters: int
    text: str


class RecallResult(BaseModel):
    text: str
    images: int = Field(description="How many images follow the text as image content")


class SessionsResult(BaseModel):
    sessions: list[SessionSummary]


class Usage(BaseModel):
    input_tokens: Annotated[int | None, Field(ge=0)] = None
    output_tokens: Annotated[int | None, Field(ge=0)] = None
    cache_read_tokens: Annotated[int | None, Field(ge=0)] = None
    cache_write_tokens: Annotated[int | None, Field(ge=0)] = None


class SelectContextResult(BaseModel):
    messages: list[dict[str, Any]] = Field(description="The window to send, in the input format")
    mode: Literal["within_budget", "paged", "protected_overflow", "recovery", "disabled"]
    estimated_tokens: Tokens
    budget_tokens: Tokens
    target_tokens: Tokens
    evicted_messages: int
    frontier: dict[str, Any] | None
    fallback_reason: str | None
    notice: str | None
    last_message_id: str | None = Field(default=None, description=(
        "Id of the newest message now stored for the session: pass it as after_id next time "
        "and send only the messages after it"))
    window: list[dict[str, int]] | None = Field(default=None, description=(
        "Only with reply_form 'positions': the window in order, each part either {from, to} "
        "(the host's own messages conversation[from:to], sent unchanged) or {message: k} "
        "(messages[k]); messages then holds only what the server made or changed"))
    not_stored: list[int] | None = Field(default=None, description=(
        "Only with reply_form 'positions': positions of this call's conversation the server "
        "did not store (resident leading messages, ephemeral ones); leave them out of the list "
        "the next after_id call's positions count over"))
    distilled: list[dict[str, Any]] = Field(description=(
        "What this window carries shortened or left out, one entry each: tool_call_id (an "
        "output) or history_id (an omitted exchange), action (distill, remove, drop_image, "
        "omit_exchange), judge, saved_characters, saved_tokens, and recall: the exact call "
        "that returns the original"))


class StatsResult(Stats):
    text: str = Field(description="The report as text")


def search_result(reply: SearchReply) -> SearchResult:
    """search_history's reply (also ``context-paging search --json``)."""
    return SearchResult(
        references=[SearchReference(**r) for r in reply.references], items=reply.items,
        unloaded_history_ids=reply.unloaded_history_ids, note=reply.note,
        searched=Searched(**{f: getattr(reply.searched, f) for f in Searched.model_fields}),
        next_offset=reply.next_offset,
    )


def marked_copy(value: dict[str, Any]) -> dict[str, Any]:
    """search_history's reply as the model reads it: each match's line with its spans in «…»
    (the offsets stay in the structured content)."""
    from context_paging.index.search.query import marked

    references = []
    for reference in value["references"]:
        shown = [{k: v for k, v in m.items() if k != "spans" and v is not None}
                 | {"text": marked(m["text"], m["spans"])} for m in reference["matches"]]
        references.append({**reference, "matches": shown})
    return {**value, "references": references}


def browse_result(references: list[dict[str, Any]], note: str | None) -> BrowseResult:
    """browse_history's reply (also ``context-paging browse --json``)."""
    return BrowseResult(references=[Reference(**r) for r in references], note=note)
