"""The MCP server: tool declarations over ``index.service.History``, nothing more.

Each tool parses its arguments (pydantic does the bounds), runs one History operation in a worker
thread (the index and session files are blocking I/O), and renders through :func:`_reply`: the
model reads compact JSON text, the host gets the same value as structured content. Anticipated
failures come back as tool errors whose text starts with an error code and names the bad value.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from context_paging.index.catalog import SessionSummary
from context_paging.index.window import ContextSettings
from context_paging.index.discovery import InvalidSessionRef, SessionRefError
from context_paging.index.ledger import LedgerError
from context_paging.index.navigator import NavigatorError, dumps
from context_paging.index.service import History, SearchReply
from context_paging.index.stats import Stats, Tokens
from context_paging.index.stats import render as render_stats
from context_paging.index.store import IndexBusy
from context_paging.paging.distill import DistillConfig
from context_paging.paging.formats import FormatError
from context_paging.paging.limits import ContextSelectionError
from context_paging.server.config import Settings
from context_paging.server.sampling import (
    Prompt,
    Sampler,
    SamplingJudge,
    can_sample,
    uses_input_required,
)
from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from context_paging import __version__

log = logging.getLogger("context_paging")
T = TypeVar("T")

INSTRUCTIONS = """\
This server keeps the exact history of coding-agent sessions (Pi, Claude Code, Codex, and \
conversations a host sent through select_context). When older context has left your window \
(a context-paging notice says so), or you need an exact earlier detail — a file path, an error \
message, a command's output, a decision — do not guess: use search_history to find it, \
browse_history to walk around a hit, load_history for whole items, read_context_output for long \
outputs page by page, and recall for the original of a tool output that was shortened. Replies \
are compact; each one says how to get more."""

# What ``serve --tools recovery`` lists: the tools a model calls. select_context is the host's
# (chat clients never call it) and paging_stats is a report for people (`context-paging stats`).
RECOVERY_TOOLS = frozenset({"search_history", "browse_history", "load_history",
                            "read_context_output", "recall", "list_sessions"})
TOOL_SETS = ("all", "recovery")

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
HOST_TOOL = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)
SessionArg = Annotated[
    str | None,
    Field(
        description="A reference from list_sessions ('claude:<id>', 'pi:<id>', 'codex:<id>', "
        "'ledger:<id>') or a bare id. Default: the session select_context last saw, else the "
        "conversation the context-paging proxy forwarded last, else the newest session run in "
        "the server's working directory.",
        max_length=4096,
    ),
]
# Ids, references and paths: generous bounds (issue 15). Real tool call ids reach 446 characters
# (Pi on openai-codex: ``call_…|<encoded item id>``); paths and MCP tool names can be long too.
ID_MAX = 4096
HistoryId = Annotated[str, Field(max_length=ID_MAX, description="A history_id from a reference.")]


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


class SearchResult(BaseModel):
    references: list[Reference]
    items: list[dict[str, Any]] | None = None
    unloaded_history_ids: list[str] | None = None
    note: str | None = None


class BrowseResult(BaseModel):
    references: list[Reference]
    note: str | None = None


class LoadResult(BaseModel):
    items: list[dict[str, Any]]


class OutputPage(BaseModel):
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
    distilled: list[dict[str, Any]] = Field(description=(
        "What this window carries shortened or left out, one entry each: tool_call_id (an "
        "output) or history_id (an omitted exchange), action (distill, remove, drop_image, "
        "omit_exchange), judge, saved_characters, saved_tokens, and recall: the exact call "
        "that returns the original"))


class StatsResult(Stats):
    text: str = Field(description="The report as text")


class ToolFailure(Exception):
    """An anticipated failure, shown to the model as ``CODE: message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")


def search_result(reply: SearchReply) -> SearchResult:
    """search_history's reply (also ``context-paging search --json``)."""
    return SearchResult(
        references=[Reference(**r) for r in reply.references], items=reply.items,
        unloaded_history_ids=reply.unloaded_history_ids, note=reply.note,
    )


def browse_result(references: list[dict[str, Any]], note: str | None) -> BrowseResult:
    """browse_history's reply (also ``context-paging browse --json``)."""
    return BrowseResult(references=[Reference(**r) for r in references], note=note)


def untitled(schema: Any) -> Any:
    """A JSON schema without its ``title`` annotations (a property named "title" stays)."""
    if isinstance(schema, list):
        return [untitled(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: untitled(sub) for name, sub in value.items()}
        else:
            out[key] = untitled(value)
    return out


def _reply(model: BaseModel) -> CallToolResult:
    value = model.model_dump()
    return CallToolResult(
        content=[TextContent(type="text", text=dumps(value))],
        structured_content=value,
    )


def _error(exc: Exception) -> CallToolResult:
    return CallToolResult(is_error=True, content=[TextContent(type="text", text=str(exc))])


def _with_sampling_slots(fn: Callable[..., Any], slots: int, prompts_param: Any,
                         slot: Callable[[int], Callable[..., Any]]) -> None:
    """Give ``select_context`` its hidden sampling parameters (server/sampling.py): the prompt
    list and ``slots`` answers, each filled by a ``Resolve`` dependency, never by the caller
    (they are not in the tool's input schema). The function takes them as ``**samples``; its
    signature names them so the SDK can see them."""
    annotations = typing.get_type_hints(fn, include_extras=True)  # this module's strings
    annotations.pop("samples", None)
    signature = inspect.signature(fn)
    params = [p.replace(annotation=annotations.get(p.name, p.annotation))
              for p in signature.parameters.values()
              if p.kind is not inspect.Parameter.VAR_KEYWORD]
    if slots:
        annotations["sampling_prompts"] = prompts_param
        params = [p.replace(annotation=prompts_param) if p.name == "sampling_prompts" else p
                  for p in params]
        for k in range(slots):
            name = f"sample_{k}"
            annotations[name] = Annotated[Any, Resolve(slot(k))]
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                            annotation=annotations[name]))
    else:
        params = [p for p in params if p.name != "sampling_prompts"]
        annotations.pop("sampling_prompts", None)
    returns = annotations.get("return", signature.return_annotation)
    fn.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=returns)
    fn.__annotations__ = annotations


def make_history(settings: Settings) -> History:
    """The one History of a process, configured from settings."""
    from context_paging.server.tokens import text_counter

    paging = settings.values["paging"]
    distill, warnings = DistillConfig.from_mapping(settings.values["distill"])
    for warning in warnings:
        log.warning("%s", warning)
    context = ContextSettings(enabled=paging["enabled"], token_budget=paging["token_budget"],
                              trim_to_tokens=paging["trim_to_tokens"],
                              first_cut=paging["first_cut"],
                              estimator=paging["estimator"], distill=distill)
    return History(settings.roots, settings.home, context, text_counter)


def create_server(settings: Settings, history: History | None = None,
                  tools: str | None = None) -> MCPServer:
    """The server; ``tools`` is "all" or "recovery" (default: the ``[server] tools`` setting)."""
    history = history or make_history(settings)
    tool_set = tools or settings.get("server", "tools")
    if tool_set not in TOOL_SETS:
        raise ValueError(f"tools must be one of {TOOL_SETS}, not {tool_set!r}")
    lock = threading.Lock()
    server = MCPServer("context-paging", instructions=INSTRUCTIONS, version=__version__,
                       log_level="WARNING")
    server.history = history  # type: ignore[attr-defined]  # for tests and the ledger
    # Held while a History call runs; ``serve`` takes it on Ctrl-C so a ledger append or an
    # index commit finishes before the process exits.
    server.history_lock = lock  # type: ignore[attr-defined]

    async def run(fn: Callable[..., T], *args: Any, recovery: bool = True, **kwargs: Any) -> T:
        """Run a blocking History call in a worker thread, one at a time, mapping errors."""
        if recovery and not settings.paging_enabled:
            raise ToolFailure("DISABLED", "context paging is disabled in this server's settings "
                              "([paging] enabled = false); the recovery tools are off")

        def locked() -> T:
            with lock:
                return fn(*args, **kwargs)

        try:
            return await anyio.to_thread.run_sync(locked)
        except NavigatorError as exc:
            raise ToolFailure(exc.code, str(exc)) from None
        except InvalidSessionRef as exc:  # malformed, like a bad ledger id
            raise ToolFailure("INVALID_SESSION", str(exc)) from None
        except SessionRefError as exc:
            raise ToolFailure("UNKNOWN_SESSION", str(exc)) from None
        except IndexBusy as exc:
            raise ToolFailure("INDEX_BUSY", str(exc)) from None
        except ContextSelectionError as exc:
            raise ToolFailure(exc.code, str(exc)) from None
        except FormatError as exc:
            raise ToolFailure("INVALID_MESSAGE_STRUCTURE", str(exc)) from None
        except LedgerError as exc:
            raise ToolFailure("INVALID_SESSION", str(exc)) from None
        except OSError as exc:  # disk full, read-only home, a file where a directory belongs
            where = exc.filename or settings.home
            raise ToolFailure("STORAGE_ERROR", f"cannot use {str(where)!r}: "
                              f"{exc.strerror or exc}; free space or fix the permissions under "
                              f"{str(settings.home)!r}, then call again") from None

    def tool(title: str, annotations: ToolAnnotations = READ_ONLY):
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
                try:
                    return await fn(*args, **kwargs)
                except ToolFailure as exc:
                    return _error(exc)

            if tool_set == "recovery" and fn.__name__ not in RECOVERY_TOOLS:
                return fn
            description = " ".join((fn.__doc__ or "").split())
            server.tool(title=title, description=description, annotations=annotations)(wrapper)
            # pydantic titles every schema ("title": "Query", "search_historyArguments"); a
            # client sends the input schema to the model on every request and the titles only
            # repeat the names, so they go (the SDK keeps no other copy of the schema).
            # This reaches into the SDK's tool manager (no public way exists); if a later SDK
            # moves it, the titles simply stay (the snapshot test then shows the change).
            manager = getattr(server, "_tool_manager", None)
            registered = manager.get_tool(fn.__name__) if manager is not None else None
            if registered is not None and isinstance(getattr(registered, "parameters", None),
                                                     dict):
                registered.parameters = untitled(registered.parameters)
            return fn

        return register

    def progress_reporter(ctx: Context) -> Callable[[float, float | None, str], None]:
        def report(done: float, total: float | None, message: str) -> None:
            try:
                anyio.from_thread.run(ctx.report_progress, done, total, message)
            except Exception:  # progress is best effort; a closed stream must not fail the call
                log.debug("progress not delivered", exc_info=True)

        return report

    @tool("Search History")
    async def search_history(
        query: Annotated[str, Field(max_length=200, description="Text to find; an empty "
                                    "string lists items oldest first")],
        ctx: Context,
        session: SessionArg = None,
        scope: Annotated[Literal["session", "project", "all"], Field(
            description="session: one session; project: every session with the same working "
            "directory (the session's, else the server's); all: every session (no session "
            "needed)")] = "session",
        files: Annotated[list[Annotated[str, Field(max_length=ID_MAX)]] | None, Field(
            max_length=10, description="Only turns that touched every one of these exact paths")
        ] = None,
        tools: Annotated[list[Annotated[str, Field(max_length=ID_MAX)]] | None, Field(
            max_length=10, description="Only turns that called every one of these tools")] = None,
        failed: Annotated[bool | None, Field(description="Only failed (true) or successful "
                                             "(false) items")] = None,
        limit: Annotated[int, Field(ge=1, le=10)] = 5,
        load: Annotated[bool, Field(
            description="Also return the first three items in full")] = False,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Find earlier history items by words, identifiers, paths or error text. Returns
        references (history_id, preview, tools, files); follow up with load_history or
        browse_history."""
        reply = await run(
            history.search, query, session, scope, files or (), tools or (), failed, limit, load,
            progress_reporter(ctx),
        )
        return _reply(search_result(reply))

    @tool("Browse History")
    async def browse_history(
        direction: Annotated[Literal["backward", "forward", "around"], Field(
            description="backward: older items; forward: newer; around: both sides")],
        history_id: Annotated[str | None, Field(max_length=ID_MAX,
                                                description="Anchor item")] = None,
        sequence: Annotated[int | None, Field(ge=0, le=1_000_000, description="Anchor by "
                                              "position instead of history_id")] = None,
        count: Annotated[int, Field(ge=1, le=10)] = 5,
        stride: Annotated[int, Field(ge=1, le=10, description="Step between items")] = 1,
        session: SessionArg = None,
    ) -> Annotated[CallToolResult, BrowseResult]:
        """List references to the items around an anchor, or from the newest (backward) or
        oldest (forward) end without one."""
        references, note = await run(
            history.browse, session, direction=direction, history_id=history_id,
            sequence=sequence, count=count, stride=stride,
        )
        return _reply(browse_result(references, note))

    @tool("Load History")
    async def load_history(
        history_ids: Annotated[list[HistoryId], Field(min_length=1, max_length=3)],
        session: SessionArg = None,
    ) -> Annotated[CallToolResult, LoadResult]:
        """Return up to three history items exactly. Hidden blocks (thinking) are null. For long
        outputs use read_context_output."""
        items = await run(history.load, session, history_ids)
        return _reply(LoadResult(items=items))

    @tool("Read Context Output")
    async def read_context_output(
        history_id: HistoryId,
        source: Literal["assistant", "tool_result"],
        content_index: Annotated[int | None, Field(ge=0, description="For source 'assistant': "
                                                   "the block's original index")] = None,
        tool_call_id: Annotated[str | None, Field(max_length=ID_MAX, description="For source "
                                                  "'tool_result'")] = None,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=2000)] = 2000,
        session: SessionArg = None,
    ) -> Annotated[CallToolResult, OutputPage]:
        """Read one assistant block or tool result as exact JSON, a page at a time; repeat with
        offset=next_offset until it is null."""
        page = await run(
            history.read_output, session, history_id=history_id, source=source,
            content_index=content_index, tool_call_id=tool_call_id, offset=offset, limit=limit,
        )
        return _reply(OutputPage(**page))

    @tool("Recall")
    async def recall(
        tool_call_id: Annotated[str | None, Field(max_length=ID_MAX, description="The tool output "
                                                  "to return")] = None,
        history_id: Annotated[str | None, Field(max_length=ID_MAX, description="An exchange to "
                                                "return as a transcript")] = None,
        pattern: Annotated[str | None, Field(max_length=500, description="Regular expression: "
                                             "only matching lines, numbered")] = None,
        offset: Annotated[int | None, Field(ge=1, description="First line (1-based); with a "
                                            "pattern, counts matching lines")] = None,
        limit: Annotated[int | None, Field(ge=1, le=2000, description="Lines to return")] = None,
        session: SessionArg = None,
    ) -> Annotated[CallToolResult, RecallResult]:
        """Return the original of a shortened tool output or an omitted exchange, optionally
        only the lines matching a pattern. The reply says how to continue."""
        recalled = await run(
            history.recall, session, tool_call_id=tool_call_id, history_id=history_id,
            pattern=pattern, offset=offset, limit=limit,
        )
        images = [
            ImageContent(type="image", data=image.data, mime_type=image.mime)
            for image in recalled.images if image.data
        ]
        result = RecallResult(text=recalled.text, images=len(images))
        return CallToolResult(
            content=[TextContent(type="text", text=recalled.text), *images],
            structured_content=result.model_dump(),
        )

    @tool("List Sessions")
    async def list_sessions(
        source: Literal["pi", "claude", "codex"] | None = None,
        project: Annotated[str | None, Field(max_length=4096, description="Only sessions whose "
                                             "working directory is this path or under it")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> Annotated[CallToolResult, SessionsResult]:
        """List Pi, Claude Code and Codex sessions, newest first, with the reference to pass as
        session."""
        summaries = await run(history.list_sessions, source, project, limit)
        return _reply(SessionsResult(sessions=summaries))

    sampler = Sampler(history.distill_config)

    async def sampling_prompts(session: str, messages: list, format: str,
                               ephemeral: list | None, model: str | None,
                               after_id: str | None, ctx: Context) -> list[Prompt]:
        """2026-era connections: the prompts this call's resolver slots ask (server/sampling)."""
        if not (sampler.slots and uses_input_required(ctx) and can_sample(ctx)):
            return []
        try:
            plan = await run(history.distill_plan, session, messages, format, ephemeral or (),
                             model, after_id, recovery=False)
        except Exception:  # the tool body reports a bad request with its proper error
            return []
        return sampler.prompts(plan)[: sampler.slots]

    sampling_prompts.__annotations__ = {
        "session": str, "messages": list, "format": str, "ephemeral": list | None,
        "model": str | None, "after_id": str | None, "ctx": Context, "return": list}
    prompts_param = Annotated[list, Resolve(sampling_prompts)]

    def sampling_slot(k: int) -> Callable[..., Sample | None]:
        def ask(prompts: list, ctx: Context) -> Sample | None:
            if k >= len(prompts):
                return None
            return sampler.sample(prompts[k], fresh_round=ctx.request_state is None)

        ask.__annotations__ = {"prompts": prompts_param, "ctx": Context, "return": Sample | None}
        ask.__qualname__ = f"sampling_slot_{k}"
        return ask

    async def judge_for(ctx: Context, prompts: list[Prompt], samples: dict[str, Any],
                        session: str, messages: list, fmt: str,
                        ephemeral: list[int] | None, model: str | None,
                        after_id: str | None = None) -> SamplingJudge | None:
        """The sampling judge with this call's answers, or None (local) without sampling."""
        if not sampler.slots or not can_sample(ctx):
            return None
        if uses_input_required(ctx):
            results = {p.key: samples.get(f"sample_{k}") for k, p in enumerate(prompts)}
            return SamplingJudge(sampler.in_time(list(results), results), results, sampler)
        try:
            plan = await run(history.distill_plan, session, messages, fmt, ephemeral or (),
                             model, after_id, recovery=False)
        except Exception:  # select_context reports a bad request; anything else: local judge
            log.debug("no sampling plan for this call", exc_info=True)
            return None
        everything = sampler.prompts(plan)
        return SamplingJudge(await sampler.ask(ctx, everything), {p.key for p in everything},
                             sampler)

    async def select_context(
        session: Annotated[str, Field(max_length=140, description="Ledger session id for this "
                                      "conversation (letters, digits, '.', '_', '-')")],
        messages: Annotated[list[dict[str, Any]], Field(description="The full outgoing "
                                                        "conversation, oldest first; with "
                                                        "after_id, only the messages after it")],
        format: Literal["auto", "anthropic", "openai", "responses", "pi"] = "auto",
        system: Annotated[str | list[dict[str, Any]] | None, Field(
            description="System prompt (resident input, counted once)")] = None,
        tools: Annotated[list[dict[str, Any]] | None, Field(
            description="Tool definitions sent with the request (resident input)")] = None,
        model: Annotated[str | None, Field(max_length=200)] = None,
        model_window: Annotated[float | None, Field(description="The model's context window "
                                                    "in tokens")] = None,
        token_budget: Annotated[int | float | None, Field(description="Override the configured "
                                                          "budget")] = None,
        trim_to_tokens: Annotated[int | float | None, Field(description="Where a cut lands "
                                                            "(default 5/8 of the budget)")] = None,
        usage: Annotated[Usage | None, Field(description="Provider usage of the latest "
                                             "response, for calibration")] = None,
        ephemeral: Annotated[list[Annotated[int, Field(ge=0)]] | None, Field(
            description="Indexes of outgoing-only messages, never stored as history")] = None,
        after_id: Annotated[str | None, Field(max_length=64, description=(
            "A last_message_id from an earlier reply: messages then holds only what follows it. "
            "An id the server does not hold fails with UNKNOWN_AFTER_ID: send everything"))] = None,
        *,
        ctx: Context,
        sampling_prompts: list[Prompt] | None = None,
        **samples: Any,
    ) -> Annotated[CallToolResult, SelectContextResult]:
        """Call before every model request with the whole conversation, or with after_id and
        only the messages after it. Stores new messages in
        the session's ledger, then returns the window to send: the newest messages that fit the
        token budget, whole oldest turns replaced by a short notice once the budget is exceeded,
        with a stable cut point so prompt caches keep hitting. Errors start with their code."""
        judge = await judge_for(ctx, sampling_prompts or [], samples, session, messages,
                                format, ephemeral, model, after_id)
        reply = await run(
            history.select_context, session, messages, fmt=format, system=system, tools=tools,
            model=model, model_window=model_window, token_budget=token_budget,
            trim_to_tokens=trim_to_tokens,
            usage=usage.model_dump(exclude_none=True) if usage else None,
            ephemeral=ephemeral or (), judge=judge, after_id=after_id, recovery=False,
        )
        return _reply(SelectContextResult(**reply))

    _with_sampling_slots(select_context, sampler.slots, prompts_param, sampling_slot)
    tool("Select Context", HOST_TOOL)(select_context)

    @tool("Paging Stats")
    async def paging_stats(session: SessionArg = None) -> Annotated[CallToolResult, StatsResult]:
        """Report a session's saved history size, the latest request against the budget, and
        cache totals."""
        stats = await run(history.stats, session, settings.paging_enabled, recovery=False)
        text = render_stats(stats)
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=StatsResult(text=text, **stats.as_dict()).model_dump(),
        )

    return server
