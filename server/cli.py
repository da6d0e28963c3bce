"""The ``context-paging`` command line: one settings value, one subcommand, output on stdout.

Only the CLI's own commands print to stdout; ``serve`` leaves stdout to the MCP protocol and
everything logs to stderr.

A command imports what it needs inside its own function: building the parser and printing
``--version`` or the settings loads no index, tokenizer, HTTP stack or MCP SDK
(docs/performance-history.md, "Start-up").
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from context_paging.index import private
from context_paging.index.search.notes import DEFAULT_SESSION_RULE
from context_paging.server.commands import forget as forget_cli
from context_paging.server.commands import recovery as terminal_cli
from context_paging.server.commands.recovery import json_text, print_json, render_references
from context_paging.server.config import Settings, load_settings
from context_paging.server.errors import failure
from context_paging.server.progress import add_quiet, progress_for
from context_paging.server.setup import clients

from context_paging import __version__

if TYPE_CHECKING:
    import threading

    from context_paging.index.catalog import SessionSummary

Command = Callable[[argparse.Namespace, Settings], int]


def _cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.index.catalog import Catalog

    catalog = Catalog(settings.roots, cache=settings.home / "catalog.json")
    summaries = catalog.summaries(args.source, args.project)[: args.limit]
    if args.json:
        print_json({"sessions": [s.model_dump() for s in summaries]})
        return 0
    if not summaries:
        roots = ", ".join(f"{k}={v}" for k, v in settings.roots.items())
        print(f"No sessions found under the configured roots ({roots}).")
        return 0
    print(render_sessions(summaries))
    return 0


def render_sessions(summaries: Sequence[SessionSummary], home: str | None = None) -> str:
    """A readable table: reference, last update, size, project, title; a subagent's title
    says whose subagent it is."""
    home = home if home is not None else os.path.expanduser("~")
    rows = [("SESSION", "UPDATED (UTC)", "SIZE", "PROJECT", "TITLE")]
    for s in summaries:
        updated = (s.updated or "")[:19].replace("T", " ")
        title = (s.title or "(untitled)").replace("\n", " ")
        if s.parent:
            source, _, parent = s.parent.partition(":")
            title = f"[subagent of {source}:{parent[:8]}] {title}"
        rows.append((s.ref, updated, _size(s.size), _project(s.cwd, home), _cut(title, 60)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4]
        for row in rows
    )


def _project(cwd: str | None, home: str) -> str:
    """The working directory, ``~`` for the home, its last 30 characters when longer."""
    if not cwd:
        return "-"
    if home and (cwd == home or cwd.startswith(home.rstrip("/") + "/")):
        cwd = "~" + cwd[len(home.rstrip("/")):]
    return cwd if len(cwd) <= 30 else "…" + cwd[-29:]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1 << 20:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1 << 20):.1f} MiB"


def _history(settings: Settings):
    from context_paging.server.histories import make_history

    return make_history(settings)


SERVE_ON_A_TERMINAL = (
    "context-paging: this is an MCP server speaking JSON-RPC on stdin/stdout for an MCP client "
    "to start; register it with `context-paging install-config --client claude-code` (or "
    "claude-desktop, cursor, vscode). Ctrl-C stops it."
)


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import anyio
    from context_paging.server import heap
    from context_paging.server.histories import loading_history
    from context_paging.server.mcp.tools import create_server
    from context_paging.server.mcp.transport import serve_stdio

    # The collector is settled once the History has loaded: by then the SDK, the index and the
    # tokenizer are in (server/heap.py).
    server = create_server(settings, loading_history(settings, heap.settle), tools=args.tools)
    _stop_on_interrupt(server.history, server.history_lock)
    if sys.stdin.isatty():  # a person ran it by hand: say what it is instead of sitting silent
        print(SERVE_ON_A_TERMINAL, file=sys.stderr, flush=True)
    limit = settings.get("paging", "max_request_bytes")
    anyio.run(serve_stdio, server, limit)  # every request line gets an answer
    return 0


def _stop_on_interrupt(history, lock: threading.Lock) -> None:
    """Ctrl-C (SIGINT) ends ``serve`` at once, with status 130 and no traceback.

    The stdio transport reads stdin in a worker thread that no signal interrupts, so the default
    KeyboardInterrupt would wait for a line that never comes. Instead the handler lets a History
    call in progress finish (a ledger append, an index commit; at most 5 s), closes the index
    and exits. A second Ctrl-C during that wait exits immediately. EOF on stdin and SIGTERM are
    left as they were: the first ends the session cleanly, the second the process.
    """
    import signal

    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, lambda *_: os._exit(130))
        # A History still loading (server/warmup.py) has nothing to close yet, and waiting for
        # it here could wait for ever: this handler may have interrupted the main thread inside
        # an import that the loading thread needs next.
        if getattr(history, "ready", True) and lock.acquire(timeout=5):
            try:
                history.close()
            except Exception:  # exiting anyway; the index repairs itself on the next start
                pass
        sys.stderr.flush()
        os._exit(130)

    signal.signal(signal.SIGINT, stop)


def _cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    with progress_for(args, patient=True) as progress:
        progress.phase("reading the session and searching")
        history = _history(settings)
        try:
            reply = history.search(
                args.query, args.session, args.scope, args.file or (), args.tool or (),
                args.failed, args.limit, progress=progress, directory=args.project,
                offset=args.offset,
            )
            _print_search(args, reply, progress)
            progress.phase("bringing the search index up to date for the next search")
        finally:
            history.close()
    return 0 if reply.references else 1


def _print_search(args: argparse.Namespace, reply, progress) -> None:
    if args.json:
        from context_paging.server.mcp.tools import search_result

        progress.emit(json_text(search_result(reply).model_dump()))
        return
    if not reply.references:
        progress.emit(reply.note or f"No match for {args.query!r}.")
        return
    progress.emit(reply.searched.describe() + ".")
    progress.emit(render_references(reply.references))
    if reply.note:
        progress.emit(reply.note)
    if reply.next_offset is not None:
        progress.emit(f"More hits: add --offset {reply.next_offset}.")


def _cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    with progress_for(args) as progress:
        progress.phase("looking for changed sessions" if args.all else "starting")
        history = _history(settings)
        try:
            if args.all:
                changed = history.index_all(progress)
                message = f"Index up to date: {changed} session(s) added or updated."
            else:
                ref = history.resolve_default(args.session)
                progress.phase(f"indexing {ref}")
                result = history.ensure_indexed(ref)
                message = f"{ref}: " + ("already up to date." if result is None else
                                        f"{result.added} added, {result.updated} updated, "
                                        f"{result.removed} removed.")
        finally:
            history.close()
    print(message)
    return 0


def _cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    print(clients.render_config(settings))
    return 0


def _cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.index.stats import render

    history = _history(settings)
    try:
        stats = history.stats(args.session, settings.paging_enabled)
    finally:
        history.close()
    if args.json:
        from context_paging.server.mcp.tools import StatsResult

        print_json(StatsResult(text=render(stats), **stats.as_dict()).model_dump())
        return 0
    print(render(stats))
    return 0


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.server.commands.demo import run_demo

    with progress_for(args) as progress:
        return run_demo(args, progress.emit, progress)


def build_parser(grouped_help: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="context-paging",
        description="A rolling context window for coding agents, "
        "with exact recovery of old history.",
    )
    parser.add_argument("--home", help="data directory (default: $CONTEXT_PAGING_HOME or "
                        "~/.local/share/context-paging)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a setting for this run, "
                        "e.g. --set paging.token_budget=64000")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sessions = commands.add_parser("sessions", help="list the agents' sessions (Pi, Claude "
                                   "Code, Codex, Gemini CLI, OpenCode)")
    sessions.add_argument("--source", choices=("pi", "claude", "codex", "gemini", "opencode"),
                          help="only this agent's sessions (default: all)")
    sessions.add_argument("--project", help="only sessions whose working directory is this path")
    sessions.add_argument("--limit", type=int, default=50,
                          help="at most this many, newest first (default 50)")
    sessions.add_argument("--json", action="store_true", help="the list as JSON")
    sessions.set_defaults(run=_cmd_sessions)

    serve = commands.add_parser("serve", help="run the MCP server over stdio")
    serve.add_argument("--tools", choices=("all", "recovery"), help="all tools, or only the "
                       "model's recovery tools (default: the [server] tools setting, 'all')")
    serve.set_defaults(run=_cmd_serve)

    search = commands.add_parser(
        "search", help="search session history",
        description='Words rank by BM25; "a phrase" in double quotes must stand as written; '
        "AND requires every word; -word leaves items out. " + DEFAULT_SESSION_RULE)
    search.add_argument("query", help="words, \"a phrase\", a path or an identifier; at "
                        "most 200 characters")
    search.add_argument("--session", help="session reference (default: see above)")
    search.add_argument("--scope", choices=("session", "project", "all"), default="session",
                        help="search one session (default), every session of a project "
                        "directory, or every session under the roots")
    search.add_argument("--project", help="with --scope project: this directory "
                        "(default: the session's, else the current directory)")
    search.add_argument("--file", action="append", help="only turns that touched this file (a "
                        "path, a suffix of one, or a file name)")
    search.add_argument("--tool", action="append", help="only turns that called this tool")
    search.add_argument("--failed", action=argparse.BooleanOptionalAction, default=None,
                        help="only turns whose tool call failed (--no-failed: only turns "
                        "without a failure; default: both)")
    search.add_argument("--limit", type=int, default=5, choices=range(1, 51), metavar="1-50",
                        help="references to return (default 5)")
    search.add_argument("--offset", type=int, default=0, help="hits to skip (the next page)")
    search.add_argument("--json", action="store_true", help="the search_history reply as JSON")
    add_quiet(search)
    search.set_defaults(run=_cmd_search)

    index = commands.add_parser("index", help="bring the search index up to date")
    index.add_argument("--session", help="session reference (default: this directory's newest)")
    index.add_argument("--all", action="store_true", help="every session under the roots")
    add_quiet(index)
    index.set_defaults(run=_cmd_index)

    config = commands.add_parser("config", help="show the resolved settings and their sources")
    config.set_defaults(run=_cmd_config)

    install = commands.add_parser(
        "install-config", help="print (or --write) an MCP client's configuration for this server")
    clients.add_arguments(install)
    install.set_defaults(run=clients.run)

    stats = commands.add_parser("stats", help="saved history, latest request and cache totals")
    stats.add_argument("--session", help="session reference, e.g. ledger:<id> or claude:<id>")
    stats.add_argument("--json", action="store_true", help="the paging_stats reply as JSON")
    stats.set_defaults(run=_cmd_stats)
    terminal_cli.add_commands(commands)

    demo = commands.add_parser("demo", help="a tour on a bundled sample session: the window "
                               "request by request, then recovering what left it")
    add_quiet(demo)
    demo.set_defaults(run=_cmd_demo)

    from context_paging.server.replay import commands as replay_cli

    replay = commands.add_parser("replay", help="replay a recorded session through "
                                 "select_context: tokens, cache cost, recoverability")
    replay_cli.add_arguments(replay)
    replay.set_defaults(run=replay_cli.run)

    from context_paging.server.proxy.commands import add_commands as add_proxy_commands

    add_proxy_commands(commands)  # proxy, run, doctor, install-proxy, uninstall-proxy
    forget_cli.add_command(commands)
    from context_paging.server.commands import help as cli_help

    return cli_help.finish(parser) if grouped_help else cli_help.describe(parser)


def _overrides(pairs: Sequence[str]) -> dict[str, object]:
    """``section.key=value`` flags; values are TOML scalars when they parse as one."""
    from context_paging.server.config import _parse_env

    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or "." not in name:
            raise SystemExit(f"context-paging: --set needs SECTION.KEY=VALUE, not {pair!r}")
        out[name.strip()] = _parse_env(value.strip())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:  # no parser to build
        print(f"context-paging {__version__}")
        return 0
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="context-paging: %(message)s",
    )
    settings = load_settings(home=args.home, overrides=_overrides(args.set))
    private.restrict_umask()  # the home's files are the user's alone (index/private.py)
    private.secure_home(settings.home)
    run: Command = args.run
    try:
        return run(args, settings)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head(1) or a pager that quit: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        failed = failure(exc)  # the tools' translation; a plain OSError stays a traceback here
        if failed is None:
            raise
        if failed.code == "INDEX_BUSY":  # another process is indexing: a retry will do
            print(f"context-paging: {failed.message}; try again in a moment", file=sys.stderr)
            return 75  # EX_TEMPFAIL
        print(f"context-paging: {terminal_cli.terminal_message(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
