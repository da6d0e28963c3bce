"""Texts the selector puts in front of a paged window (docs/selection.md,
"The notice").

The project's own wording of upstream's notices: the same facts, the same line structure and
the same length (the plain notice is 278 characters for a 128,000-token budget and 274 for a
350-token one: 70 and 69 tokens, upstream's figures). Tools are named by their bare names and
with this server's argument names (``history_id``, ``tool_call_id``,
``source: "tool_result"``).
Numbers use fixed en-US grouping, never the process locale (weakness W13).

A normal notice is frozen into the cut state and re-sent byte-identically until the cut
advances, so nothing here may depend on anything but its arguments.
"""

from __future__ import annotations

from context_paging.paging.estimate import js_json

HEADER = "[Context paging notice — added by the paging server]"
RECOVERY_HEADER = "[Context paging recovery — added by the paging server]"
READ_LIMIT = 2_000


def format_tokens(value: float) -> str:
    """``toLocaleString("en-US")``: grouped thousands, at most three decimals."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{round(value, 3):,}"


def read_call(history_id: str, tool_call_id: str) -> str:
    """The exact ``read_context_output`` call that pages a stored tool result back in."""
    arguments = {
        "history_id": history_id,
        "source": "tool_result",
        "tool_call_id": tool_call_id,
        "offset": 0,
        "limit": READ_LIMIT,
    }
    return f"read_context_output({js_json(arguments)})"


def paging_notice(
    budget_tokens: float,
    history_id: str | None = None,
    tool: tuple[str, str, str] | None = None,
) -> str:
    """The normal notice; ``tool`` is (owning turn history_id, tool_call_id, tool name)."""
    lines = [
        HEADER,
        f"Earlier messages left the {format_tokens(budget_tokens)}-token rolling window;"
        " stored history is unchanged.",
        "Find stored items with search_history or browse_history.",
        "Fetch exact items with load_history or exact output pages with read_context_output.",
    ]
    if history_id is not None:
        lines.append(f"Most recently evicted history_id: {js_json(history_id)}.")
    if tool is not None:
        turn_id, call_id, name = tool
        lines.append(f"Its tool: {name}.")
        lines.append(f"Read that evicted tool output with {read_call(turn_id, call_id)}.")
    return "\n".join(lines)


def overflow_notice(budget_tokens: float) -> str:
    """Protected-overflow notice: the newest unread exchange is sent whole this once."""
    return "\n".join(
        [
            HEADER,
            "The newest tool-result exchange is sent in full for this follow-up call only.",
            f"The normal rolling budget is {format_tokens(budget_tokens)} estimated tokens.",
            "This exchange can leave the context after this call.",
            "To get it back, use search_history or browse_history, then load_history or"
            " read_context_output.",
        ]
    )


def recovery_notice() -> str:
    """Recovery notice: the newest tool results were replaced by exact read calls."""
    return "\n".join(
        [
            HEADER,
            "The newest tool-result payloads exceeded the model's context window, so each was"
            " replaced with a recovery reference.",
            "Call read_context_output with the exact arguments in each replacement to read the"
            " stored results.",
        ]
    )


def recovery_replacement(history_id: str, tool_call_id: str) -> str:
    """Text that stands in for one tool result larger than the model window."""
    return "\n".join(
        [
            RECOVERY_HEADER,
            "This tool result did not fit in the model's context window.",
            f"Read the exact stored result with {read_call(history_id, tool_call_id)}.",
        ]
    )


# The notice for an agent without the recovery tools (Pi has no MCP client): the same facts,
# with the CLI commands that do what each tool does, run in the agent's shell. ``{cli}`` is a
# command that runs from any shell (an agent's login shell may not have the virtualenv on PATH):
# the absolute path of the console script, or this Python running the module.
_SHELL_LINES = {
    "Find stored items with search_history or browse_history.":
        'Find stored items with the shell command: {cli} search "<words>" '
        "--session {session} (or {cli} browse --session {session}).",
    "Fetch exact items with load_history or exact output pages with read_context_output.":
        "Show exact items with: {cli} show <history_id> --session {session}; "
        "a whole tool output with: {cli} recall <tool_call_id> --session {session}.",
    "To get it back, use search_history or browse_history, then load_history or"
    " read_context_output.":
        'To get it back, run: {cli} search "<words>" --session {session}, then '
        "{cli} recall <tool_call_id> --session {session}.",
}
_READ_PREFIX = "Read that evicted tool output with read_context_output("


def shell_notice(notice: str, session: str, cli: str = "context-paging") -> str:
    """``notice`` with each tool named replaced by the CLI command for ``session``, run as
    ``cli``; the same notice in gives the same text out."""
    lines = []
    for line in notice.split("\n"):
        if line in _SHELL_LINES:
            line = _SHELL_LINES[line].format(session=session, cli=cli)
        elif line.startswith(_READ_PREFIX):
            line = _shell_read(line, session, cli)
        lines.append(line)
    return "\n".join(lines)


def _shell_read(line: str, session: str, cli: str) -> str:
    import json

    try:
        arguments = json.loads(line[len(_READ_PREFIX):].removesuffix(".").removesuffix(")"))
        history_id, call_id = arguments["history_id"], arguments["tool_call_id"]
    except (ValueError, KeyError, TypeError):
        return line
    return (f"Read that evicted tool output with: {cli} output {history_id} "
            f"--tool-call-id {call_id} --session {session}.")


# The notice for an agent the proxy offers its own recovery tools to (in band): the same facts,
# naming the three tools offered (search_history, read_context_output, recall), which take no
# session (the proxy answers them for the conversation they are called in).
_INBAND_LINES = {
    "Find stored items with search_history or browse_history.":
        "Find stored items with search_history.",
    "Fetch exact items with load_history or exact output pages with read_context_output.":
        "Fetch exact output pages with read_context_output, or a whole original with recall.",
    "To get it back, use search_history or browse_history, then load_history or"
    " read_context_output.":
        "To get it back, use search_history, then recall or read_context_output.",
}


def inband_notice(notice: str) -> str:
    """``notice`` naming only the tools the proxy offers in band; the same notice in gives the
    same text out."""
    return "\n".join(_INBAND_LINES.get(line, line) for line in notice.split("\n"))
