"""The MCP server: tool functions over ``index.service.History``, registered from one table.

Each tool is a module-level function whose first parameter is the server's ``Deps`` (the
History, the settings, the lock, the sampler; server/mcp/binding.py); :func:`create_server` binds it
and registers it from one table, :data:`TOOLS`, under its title, annotations and tool sets.
select_context's sampling resolvers are in server/mcp/select_sampling.py, the reply models in
server/mcp/results.py. A tool parses its arguments (pydantic does
the bounds), runs one History operation in a worker thread (the index and session files are
blocking I/O), and renders through :func:`_reply`: the model reads compact JSON text, the host
gets the same value as structured content. Anticipated failures (server/errors.py) come back as
tool errors whose text starts with an error code and names the bad value.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

import anyio.from_thread
from context_paging.index.canonical import orjson, plain
from context_paging.index.search.notes import DEFAULT_SESSION_RULE
from context_paging.index.stats import render as render_stats
from context_paging.paging.window_form import FORMS
from context_paging.paging.window_form import check as check_form
from context_paging.server.bounds import LENGTHS, between
from context_paging.server.config import Settings
from context_paging.server.histories import distill_config, loading_history, make_history
from context_paging.server.idle import Idler
from context_paging.server.mcp.binding import (
    Deps,
    ToolFailure,
    argument_failure,
    bind,
    error_result,
)
from context_paging.server.mcp.results import (
    BrowseResult,
    LoadResult,
    OutputPage,
    RecallResult,
    Reference,
    SearchResult,
    SelectContextResult,
    SessionsResult,
    StatsResult,
    Usage,
    browse_result,
    marked_copy,
    search_result,
)
from context_paging.server.mcp.sampling import Prompt, Sampler
from context_paging.server.mcp.select_sampling import judge_for, with_sampling
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from context_paging import __version__

if TYPE_CHECKING:  # the index and the window load with the first History (server/warmup.py)
    from context_paging.index.service import History
    from context_paging.server.warmup import LoadingHistory

__all__ = [  # the reply models and builders live in server/mcp/results.py; imported from here too
    "BrowseResult", "LoadResult", "OutputPage", "RecallResult", "Reference", "SearchResult",
    "SelectContextResult", "SessionsResult", "StatsResult", "Usage", "browse_result",
    "search_result", "create_server", "make_history", "distill_config", "loading_history",
    "MCPServer", "RECOVERY_TOOLS", "TOOLS", "TOOL_SETS", "Deps", "ToolFailure",
]

log = logging.getLogger("context_paging")

INSTRUCTIONS = """\
This server keeps the exact history of coding-agent sessions (Pi, Claude Code, Codex, and \
conversations a host sent through select_context). When older context has left your window \
(a context-paging notice says so), or you need an exact earlier detail — a file path, an error \
message, a command's output, a decision — do not guess: use search_history to find it, \
browse_history to walk around a hit, load_history for whole items, read_context_output for long \
outputs page by page, and recall for the original of a tool output that was shortened. Replies \
are compact; each one says how to get more."""

TOOL_SETS = ("all", "recovery")

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
HOST_TOOL = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)
# Ids, references and paths: generous bounds (server/bounds.py, the CLI's flags read the same).
ID_MAX = LENGTHS["id"]
SessionArg = Annotated[
    str | None,
    Field(
        description="A reference from list_sessions ('claude:<id>', 'pi:<id>', 'codex:<id>', "
        "'ledger:<id>') or a bare id (6 characters or more). " + DEFAULT_SESSION_RULE,
        max_length=ID_MAX,
    ),
]
HistoryId = Annotated[str, Field(max_length=ID_MAX, description="A history_id from a reference.")]


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


def compact_json(value: Any) -> str:
    """``navigator.dumps(value)``, the very same text, through orjson where it writes the same
    bytes (index/canonical.py: no floats, str keys, 64-bit integers, no lone surrogates). A
    select_context window is hundreds of KB; orjson writes it in a fifth of the time."""
    if orjson is not None and plain(value):
        try:
            return orjson.dumps(value).decode()
        except TypeError:  # an integer beyond 64 bits, a lone surrogate
            pass
    from context_paging.index.navigator import dumps

    return dumps(value)


def _reply(model: BaseModel, without: str | None = None,
           omit: tuple[str, ...] = ()) -> CallToolResult:
    # The text copy of the structured content: the MCP spec asks for it (clients that do not
    # read structured content, and the model, read this), so it stays, made cheaply. Only
    # ``without``, a field a setting leaves out of the copy (select_context's window), is not
    # copied; it is in the structured content.
    # ``omit``: optional fields this reply does not have (select_context's ``window`` in the
    # messages form), left out rather than sent as null: that reply stays byte for byte.
    value = model.model_dump(exclude=set(omit) or None)
    text = value if without is None else {k: v for k, v in value.items() if k != without}
    return CallToolResult(
        content=[TextContent(type="text", text=compact_json(text))],
        structured_content=value,
    )


def progress_reporter(ctx: Context) -> Callable[[float, float | None, str], None]:
    def report(done: float, total: float | None, message: str) -> None:
        try:
            anyio.from_thread.run(ctx.report_progress, done, total, message)
        except Exception:  # progress is best effort; a closed stream must not fail the call
            log.debug("progress not delivered", exc_info=True)

    return report


# --- the tools ------------------------------------------------------------------------------


async def search_history(
    deps: Deps,
    query: Annotated[str, Field(max_length=LENGTHS["query"],
                                description="Words to find (any may match); "
                                "\"a phrase\" in double quotes, AND to require every word, "
                                "-word to leave items out; an empty string lists items "
                                "oldest first")],
    ctx: Context,
    session: SessionArg = None,
    scope: Annotated[Literal["session", "project", "all"], Field(
        description="session: one session; project: every session with the same working "
        "directory (the session's, else the server's); all: every session (no session "
        "needed)")] = "session",
    files: Annotated[list[Annotated[str, Field(max_length=ID_MAX)]] | None, Field(
        max_length=LENGTHS["filters"], description="Only turns that touched every one of "
        "these files: a "
        "path, a suffix of one or a file name")] = None,
    tools: Annotated[list[Annotated[str, Field(max_length=ID_MAX)]] | None, Field(
        max_length=LENGTHS["filters"],
        description="Only turns that called every one of these tools")] = None,
    failed: Annotated[bool | None, Field(description="Only failed (true) or successful "
                                         "(false) items")] = None,
    limit: Annotated[int, Field(**between("search.limit"))] = 5,
    offset: Annotated[int, Field(**between("search.offset"),
                                 description="Hits to skip: a reply's next_offset")] = 0,
    load: Annotated[bool, Field(
        description="Also return the first three items in full")] = False,
) -> Annotated[CallToolResult, SearchResult]:
    """Find earlier history items by words, identifiers, paths or error text. Each reference
    shows the lines that matched (marked «…», with the tool, tool_call_id and line to pass to
    recall), and the reply says what was searched; follow up with recall, load_history or
    browse_history."""
    reply = await deps.run(
        deps.history.search, query, session, scope, files or (), tools or (), failed, limit,
        load, progress_reporter(ctx), offset=offset,
    )
    value = search_result(reply).model_dump()
    return CallToolResult(content=[TextContent(type="text", text=compact_json(
        marked_copy(value)))], structured_content=value)


async def browse_history(
    deps: Deps,
    direction: Annotated[Literal["backward", "forward", "around"], Field(
        description="backward: older items; forward: newer; around: both sides")],
    history_id: Annotated[str | None, Field(max_length=ID_MAX,
                                            description="Anchor item")] = None,
    sequence: Annotated[int | None, Field(**between("browse.sequence"), description="Anchor "
                                          "by position instead of history_id")] = None,
    count: Annotated[int, Field(**between("browse.count"))] = 5,
    stride: Annotated[int, Field(**between("browse.stride"),
                                 description="Step between items")] = 1,
    session: SessionArg = None,
) -> Annotated[CallToolResult, BrowseResult]:
    """List references to the items around an anchor, or from the newest (backward) or
    oldest (forward) end without one."""
    references, note = await deps.run(
        deps.history.browse, session, direction=direction, history_id=history_id,
        sequence=sequence, count=count, stride=stride,
    )
    return _reply(browse_result(references, note))


async def load_history(
    deps: Deps,
    history_ids: Annotated[list[HistoryId],
                           Field(min_length=1, max_length=LENGTHS["history_ids"])],
    session: SessionArg = None,
) -> Annotated[CallToolResult, LoadResult]:
    """Return up to three history items exactly. Hidden blocks (thinking) are null. A reply
    over 24,000 characters has its longest outputs cut, and its note names the recall call
    for each."""
    items, note = await deps.run(deps.history.load_capped, session, history_ids)
    return _reply(LoadResult(items=items, note=note))


async def read_context_output(
    deps: Deps,
    history_id: HistoryId,
    source: Literal["assistant", "tool_result"],
    content_index: Annotated[int | None, Field(**between("output.content_index"),
                                               description="For source 'assistant': "
                                               "the block's original index")] = None,
    tool_call_id: Annotated[str | None, Field(max_length=ID_MAX, description="For source "
                                              "'tool_result'")] = None,
    offset: Annotated[int, Field(**between("output.offset"))] = 0,
    limit: Annotated[int, Field(**between("output.limit"))] = 2000,
    session: SessionArg = None,
) -> Annotated[CallToolResult, OutputPage]:
    """Read one assistant block or tool result as exact JSON, a page at a time; repeat with
    offset=next_offset until it is null."""
    page = await deps.run(
        deps.history.read_output, session, history_id=history_id, source=source,
        content_index=content_index, tool_call_id=tool_call_id, offset=offset, limit=limit,
    )
    result = OutputPage(**page)
    content = [TextContent(type="text", text=result.text)]
    if result.next_offset is not None:
        content.append(TextContent(type="text", text=(
            f"[characters {result.offset}-{result.next_offset} of {result.total_characters}; "
            f"next page: offset={result.next_offset}]")))
    return CallToolResult(content=content, structured_content=result.model_dump())


async def recall(
    deps: Deps,
    tool_call_id: Annotated[str | None, Field(max_length=ID_MAX, description="The tool output "
                                              "to return")] = None,
    history_id: Annotated[str | None, Field(max_length=ID_MAX, description="An exchange to "
                                            "return as a transcript")] = None,
    pattern: Annotated[str | None, Field(max_length=LENGTHS["pattern"],
                                         description="Regular expression: "
                                         "only matching lines, numbered")] = None,
    offset: Annotated[int | None, Field(**between("recall.offset"),
                                        description="First line (1-based); with a "
                                        "pattern, counts matching lines")] = None,
    limit: Annotated[int | None, Field(**between("recall.limit"),
                                       description="Lines to return")] = None,
    session: SessionArg = None,
) -> Annotated[CallToolResult, RecallResult]:
    """Return the original of a shortened tool output or an omitted exchange, optionally
    only the lines matching a pattern. The reply says how to continue."""
    recalled = await deps.run(
        deps.history.recall, session, tool_call_id=tool_call_id, history_id=history_id,
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


async def list_sessions(
    deps: Deps,
    source: Literal["pi", "claude", "codex", "gemini", "opencode"] | None = None,
    project: Annotated[str | None, Field(max_length=ID_MAX, description="Only sessions whose "
                                         "working directory is this path or under it")] = None,
    limit: Annotated[int, Field(**between("sessions.limit"))] = 20,
) -> Annotated[CallToolResult, SessionsResult]:
    """List Pi, Claude Code and Codex sessions, newest first, with the reference to pass as
    session."""
    summaries = await deps.run(deps.history.list_sessions, source, project, limit)
    return _reply(SessionsResult(sessions=summaries))


async def select_context(
    deps: Deps,
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
    model: Annotated[str | None, Field(max_length=LENGTHS["model"])] = None,
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
    reply_form: Annotated[str, Field(
        max_length=20, json_schema_extra={"enum": list(FORMS)}, description=(
            "messages: the whole window. positions: window lists its parts in order, {from, "
            "to} = your conversation[from:to] (with after_id: the stored messages, then the "
            "new ones) or {message: k} = messages[k], which holds only what the server made "
            "or changed"))] = "messages",
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
    check_form(reply_form)  # before sampling asks the host's model anything
    judge = await judge_for(deps, ctx, sampling_prompts or [], samples, session, messages,
                            format, ephemeral, model, after_id)
    reply = await deps.run(
        deps.history.select_context, session, messages, fmt=format, system=system, tools=tools,
        model=model, model_window=model_window, token_budget=token_budget,
        trim_to_tokens=trim_to_tokens,
        usage=usage.model_dump(exclude_none=True) if usage else None,
        ephemeral=ephemeral or (), judge=judge, after_id=after_id, reply_form=reply_form,
        recovery=False,
    )
    if deps.idler is not None:
        deps.idler.due()  # counting ahead, once this reply is written (server/idle.py)
    # The summary setting keeps the whole window out of the text copy; in the positions form
    # ``messages`` holds only what the server made, small, so the copy keeps it (a client that
    # reads only the text can still rebuild the window).
    summary = (deps.settings.get("server", "select_context_text") == "summary"
               and reply_form == "messages")
    return _reply(SelectContextResult(**reply), without="messages" if summary else None,
                  omit=() if "window" in reply else ("window", "not_stored"))


async def paging_stats(deps: Deps,
                       session: SessionArg = None) -> Annotated[CallToolResult, StatsResult]:
    """Report a session's saved history size, the latest request against the budget, and
    cache totals."""
    stats = await deps.run(deps.history.stats, session, deps.settings.paging_enabled,
                           recovery=False)
    text = render_stats(stats)
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=StatsResult(text=text, **stats.as_dict()).model_dump(),
    )


# --- the table --------------------------------------------------------------------------------

BOTH = frozenset({"all", "recovery"})
ALL_ONLY = frozenset({"all"})


class Tool(NamedTuple):
    """One row of the table: the function (its name is the tool's), how it is shown, and
    which ``serve --tools`` sets list it."""

    fn: Callable[..., Awaitable[CallToolResult]]
    title: str
    annotations: ToolAnnotations = READ_ONLY
    sets: frozenset[str] = BOTH
    # Extra set-up of the bound function before registration (select_context's sampling).
    prepare: Callable[[Callable[..., Any], Deps], None] | None = None

    @property
    def name(self) -> str:
        return self.fn.__name__


# Registration order is the order of ``tools/list``. select_context is the host's (chat clients
# never call it) and paging_stats is a report for people (`context-paging stats`): neither is in
# the recovery set, the tools a model calls.
TOOLS = (
    Tool(search_history, "Search History"),
    Tool(browse_history, "Browse History"),
    Tool(load_history, "Load History"),
    Tool(read_context_output, "Read Context Output"),
    Tool(recall, "Recall"),
    Tool(list_sessions, "List Sessions"),
    Tool(select_context, "Select Context", HOST_TOOL, ALL_ONLY, prepare=with_sampling),
    Tool(paging_stats, "Paging Stats", sets=ALL_ONLY),
)
RECOVERY_TOOLS = frozenset(t.name for t in TOOLS if "recovery" in t.sets)


class Server(MCPServer):
    """The SDK's server with argument errors coded like the tools' own (``INVALID_ARGUMENT:
    field 'direction' is required …``) instead of the validator's raw text."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return error_result(argument_failure(exc.__cause__))
            raise


def create_server(settings: Settings, history: History | LoadingHistory | None = None,
                  tools: str | None = None) -> MCPServer:
    """The server; ``tools`` is "all" or "recovery" (default: the ``[server] tools`` setting).
    Without ``history``, the History is built now; ``serve`` passes :func:`loading_history`."""
    history = history or make_history(settings)
    tool_set = tools or settings.get("server", "tools")
    if tool_set not in TOOL_SETS:
        raise ValueError(f"tools must be one of {TOOL_SETS}, not {tool_set!r}")
    lock = threading.Lock()
    deps = Deps(history, settings, lock, Sampler(history.distill_config),
                Idler(history.idle, lock))
    server = Server("context-paging", instructions=INSTRUCTIONS, version=__version__,
                    log_level="WARNING")
    server.history = history  # type: ignore[attr-defined]  # for tests and the ledger
    server.history_lock = deps.lock  # type: ignore[attr-defined]
    server.idler = deps.idler  # type: ignore[attr-defined]  # serve kicks it after each write
    for row in TOOLS:
        if tool_set not in row.sets:
            continue
        fn = bind(row.fn, deps)
        if row.prepare is not None:
            row.prepare(fn, deps)
        description = " ".join((row.fn.__doc__ or "").split())
        server.tool(title=row.title, description=description, annotations=row.annotations)(fn)
        # pydantic titles every schema ("title": "Query", "search_historyArguments"); a client
        # sends the input schema to the model on every request and the titles only repeat the
        # names, so they go (the SDK keeps no other copy of the schema). This reaches into the
        # SDK's tool manager (no public way exists); if a later SDK moves it, the titles simply
        # stay (the snapshot test then shows the change).
        manager = getattr(server, "_tool_manager", None)
        registered = manager.get_tool(row.name) if manager is not None else None
        if registered is not None and isinstance(getattr(registered, "parameters", None), dict):
            registered.parameters = untitled(registered.parameters)
    return server
