"""The recovery tools' terminal faces: ``show``, ``output``, ``recall`` and ``browse``.

Each command calls the same :class:`~index.service.History` operation as its MCP tool
(load_history, read_context_output, recall, browse_history) and renders the result for a person,
or with ``--json`` as the tool's structured content for a script. Errors that the index words for
the model (tool names, argument names) are reworded here for the terminal (commands and flags).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from context_paging.server.bounds import NUMBERS, at_most, number, span, text
from context_paging.server.config import Settings

if TYPE_CHECKING:
    from context_paging.index.service import History

SHOWN_RESULT_LINES = 40  # tool output lines ``show`` prints before pointing at ``recall``


def _history(settings: Settings) -> History:
    from context_paging.server.histories import make_history

    return make_history(settings)


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def print_json(value: Any) -> None:
    print(json_text(value))


def _session_flag(args: argparse.Namespace) -> str:
    return f" --session {args.session}" if args.session else ""


# --- errors ---------------------------------------------------------------------------------

# The index words its errors for a model calling tools; at the terminal the same advice names
# commands and flags. Only whole known phrases are replaced.
_TERMINAL_WORDING = [
    (re.compile(r"use search_history or browse_history to find valid ids"),
     "find valid ids with `context-paging search` or `context-paging browse`"),
    (re.compile(r"use the id named in the notice or a search_history reference"),
     "use a tool call id from `context-paging show` or the paging notice"),
    (re.compile(r"list sessions \(the list_sessions tool or `context-paging sessions`\)"),
     "run `context-paging sessions`"),
    (re.compile(r"give history_id or sequence, not both"),
     "give --history-id or --sequence, not both"),
    (re.compile(r"\bcontent_index (\d+)"), r"--content-index \1"),
    (re.compile(r"\bsequence (\d+) is outside"), r"--sequence \1 is outside"),
    (re.compile(r"\boffset (\d+) is (past|beyond) the end"), r"--offset \1 is \2 the end"),
]


def terminal_message(exc: Exception) -> str:
    """An error as a person at the terminal should read it."""
    from context_paging.index.service import NoSessionGiven  # not at import: --version stays quick

    if isinstance(exc, NoSessionGiven):
        return (f"no session given, none ran in {exc.cwd} and the proxy forwarded none in the "
                "last 6 hours: pass --session REF (see `context-paging sessions`)")
    message = str(exc)
    for pattern, replacement in _TERMINAL_WORDING:
        message = pattern.sub(replacement, message)
    return message


# --- rendering ------------------------------------------------------------------------------


def render_references(references: Sequence[dict[str, Any]]) -> str:
    """One reference per two lines: where it is, then its preview."""
    out = []
    for ref in references:
        flags = " failed" if ref["failed"] else ""
        tools = f" [{', '.join(ref['tools'][:4])}]" if ref["tools"] else ""
        out.append(f"{ref['session']}  {ref['history_id']}  #{ref['sequence']} {ref['kind']}"
                   f"{flags}{tools}\n    {ref['preview']}")
        out.extend(_match_line(m) for m in ref.get("matches") or ())
    return "\n".join(out)


def _match_line(match: dict[str, Any]) -> str:
    """Where a search hit matched and the line, its match in «…»."""
    from context_paging.index.search.query import marked

    if match["tool_call_id"] and match["source"] == "tool_result":
        tool = match["tool_name"] or "tool"
        where = f"{tool} output {match['tool_call_id']} line {match['line']}"
    elif match["tool_call_id"]:
        where = f"{match['tool_name']} call"
    else:
        where = f"{match['source']} block {match['content_index']} line {match['line']}"
    return f"    > {where}: {marked(match['text'], match['spans'])}"


def _block(index: int, block: dict[str, Any] | None) -> str:
    if block is None:
        return f"[{index}] (hidden: thinking or a block of unknown kind)"
    if block["type"] == "text":
        return f"[{index}] text\n" + textwrap.indent(block["text"], "    ")
    if block["type"] == "tool_call":
        arguments = json.dumps(block["arguments"], ensure_ascii=False)
        return f"[{index}] tool call {block['name']}  id={block['id']}\n    {arguments}"
    where = block.get("url") or f"{len(block.get('data') or '')} base64 characters"
    return f"[{index}] image {block.get('mime_type')} ({where})"


def _result(result: dict[str, Any], item: dict[str, Any], args: argparse.Namespace) -> str:
    state = "error" if result["is_error"] else "ok"
    head = f"result of {result['tool_name'] or 'tool'}  id={result['tool_call_id']}  ({state})"
    parts = []
    for block in result["content"]:
        if block is None:
            parts.append("(hidden block)")
        elif block["type"] == "text":
            parts.append(block["text"])
        else:
            parts.append(_block(0, block).split("] ", 1)[1])
    lines = "\n".join(parts).split("\n")
    if args.full or len(lines) <= SHOWN_RESULT_LINES:
        return head + "\n" + textwrap.indent("\n".join(lines), "    ")
    rest = len(lines) - SHOWN_RESULT_LINES
    more = (f"… {rest} more lines: context-paging recall {result['tool_call_id']}"
            f"{_session_flag(args)} (or show --full)")
    return head + "\n" + textwrap.indent("\n".join(lines[:SHOWN_RESULT_LINES] + [more]), "    ")


def render_item(item: dict[str, Any], session: str, args: argparse.Namespace) -> str:
    head = [session, item["history_id"], f"#{item['sequence']}", item["kind"]]
    if item.get("failed"):
        head.append("failed")
    if item.get("model"):
        head.append(f"model={item['model']}")
    lines = [f"── {'  '.join(head)}  {item['timestamp']}"]
    lines += [_block(i, b) for i, b in enumerate(item["content"])]
    lines += [_result(r, item, args) for r in item.get("tool_results", [])]
    return "\n".join(lines)


# --- commands -------------------------------------------------------------------------------


def _cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    try:
        session = history.navigator(args.session).session
        items = history.load(session, args.history_ids)
    finally:
        history.close()
    if args.json:
        from context_paging.server.mcp.tools import LoadResult

        print_json(LoadResult(items=items).model_dump())
        return 0
    print("\n\n".join(render_item(item, session, args) for item in items))
    return 0


def _cmd_output(args: argparse.Namespace, settings: Settings) -> int:
    source = "assistant" if args.content_index is not None else "tool_result"
    history = _history(settings)
    try:
        page = history.read_output(
            args.session, history_id=args.history_id, source=source,
            content_index=args.content_index, tool_call_id=args.tool_call_id,
            offset=args.offset, limit=args.limit,
        )
    finally:
        history.close()
    if args.json:
        from context_paging.server.mcp.tools import OutputPage

        print_json(OutputPage(**page).model_dump())
        return 0
    sys.stdout.write(page["text"] + "\n")
    sys.stdout.flush()
    end = page["offset"] + len(page["text"])
    where = f"[characters {page['offset']:,}–{end:,} of {page['total_characters']:,}"
    if page["next_offset"] is None:
        print(where + "]", file=sys.stderr)
    else:
        which = (f"--content-index {args.content_index}" if args.content_index is not None
                 else f"--tool-call-id {args.tool_call_id}")
        print(f"{where}; next: context-paging output {args.history_id} {which} "
              f"--offset {page['next_offset']}{_session_flag(args)}]", file=sys.stderr)
    return 0


_CONTINUE = re.compile(r"Use offset=(\d+) to continue\.\]$")


def _cmd_recall(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.index.navigator import NavigatorError

    history = _history(settings)
    options = {"pattern": args.pattern, "offset": args.offset, "limit": args.limit}
    try:
        try:
            recalled = history.recall(args.session, tool_call_id=args.id, **options)
        except NavigatorError as exc:
            if exc.code != "UNKNOWN_TOOL_CALL_ID":
                raise
            try:  # not a tool call id: an exchange's history id, then
                recalled = history.recall(args.session, history_id=args.id, **options)
            except NavigatorError as again:
                if again.code != "UNKNOWN_HISTORY_ID":
                    raise
                session = history.navigator(args.session).session
                raise NavigatorError("UNKNOWN_ID", (
                    f"{args.id!r} is neither a tool call id nor a history id in {session}; "
                    "find one with `context-paging search` or `context-paging show`")) from None
    finally:
        history.close()
    if args.json:
        print_json({"text": recalled.text, "images": len(recalled.images)})
        return 0
    # The continuation note is worded for the model (offset=N); here it is a flag.
    print(_CONTINUE.sub(r"Use --offset \1 to continue.]", recalled.text))
    if recalled.images:
        print(f"[{len(recalled.images)} image(s) not shown at the terminal; "
              f"`context-paging show --json` includes their data]", file=sys.stderr)
    return 0


def _cmd_browse(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    try:
        references, note = history.browse(
            args.session, direction=args.direction, history_id=args.history_id,
            sequence=args.sequence, count=args.count, stride=args.stride,
        )
    finally:
        history.close()
    if args.json:
        from context_paging.server.mcp.tools import browse_result

        print_json(browse_result(references, note).model_dump())
        return 0
    if not references:
        print("This session has no visible history yet.")
        return 0
    print(render_references(references))
    if note:
        print(note)
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """``show``, ``output``, ``recall`` and ``browse`` in the CLI's subcommand table."""
    def session_and_json(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--session", type=text("id"),
                            help="session reference (default: this directory's "
                            "newest; see `context-paging sessions`)")
        parser.add_argument("--json", action="store_true", help="the tool's reply as JSON")

    show = commands.add_parser("show", help="show history items exactly (≈ load_history)")
    show.add_argument("history_ids", nargs="+", metavar="HISTORY_ID", type=text("id"),
                      action=at_most("history_ids"),
                      help="one to three history ids, from search, browse or a paging notice")
    show.add_argument("--full", action="store_true",
                      help=f"print whole tool outputs (default: the first {SHOWN_RESULT_LINES} "
                      "lines of each)")
    session_and_json(show)
    show.set_defaults(run=_cmd_show)

    output = commands.add_parser(
        "output", help="page one tool output or assistant block as exact JSON "
        "(≈ read_context_output)")
    output.add_argument("history_id", metavar="HISTORY_ID", type=text("id"),
                        help="the history item that holds the output or block")
    which = output.add_mutually_exclusive_group(required=True)
    which.add_argument("--tool-call-id", type=text("id"), help="the tool output to read")
    which.add_argument("--content-index", type=number("output.content_index"),
                       help="the assistant block to read")
    output.add_argument("--offset", type=number("output.offset"), default=0,
                        help="first character (default 0)")
    output.add_argument("--limit", type=number("output.limit"), default=2000,
                        help="characters per page (default 2000)")
    session_and_json(output)
    output.set_defaults(run=_cmd_output)

    recall = commands.add_parser(
        "recall", help="the original of a tool output or an exchange (≈ recall)")
    recall.add_argument("id", metavar="TOOL_CALL_ID|HISTORY_ID", type=text("id"),
                        help="a tool call id (its output) or a history id (an omitted exchange)")
    recall.add_argument("--pattern", type=text("pattern"),
                        help="regular expression: only matching lines, numbered")
    recall.add_argument("--offset", type=number("recall.offset"),
                        help="first line (1-based); with --pattern "
                        "it counts matching lines")
    recall.add_argument("--limit", type=number("recall.limit"),
                        help=f"lines to print (at most {NUMBERS['recall.limit'].high})")
    session_and_json(recall)
    recall.set_defaults(run=_cmd_recall)

    browse = commands.add_parser("browse", help="walk a session's history (≈ browse_history)")
    browse.add_argument("--direction", choices=("backward", "forward", "around"),
                        default="backward", help="backward: older items (default); forward: "
                        "newer; around: both sides")
    anchor = browse.add_mutually_exclusive_group()
    anchor.add_argument("--history-id", type=text("id"),
                        help="anchor item (default: the newest or oldest end)")
    anchor.add_argument("--sequence", type=number("browse.sequence"),
                        help="anchor by position (0 = oldest)")
    browse.add_argument("--count", type=number("browse.count"), default=5,
                        metavar=span("browse.count"),
                        help="references to return (default 5)")
    browse.add_argument("--stride", type=number("browse.stride"), default=1,
                        metavar=span("browse.stride"),
                        help="take every Nth item, to skim a long session (default 1: each)")
    session_and_json(browse)
    browse.set_defaults(run=_cmd_browse)
