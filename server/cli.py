"""The ``context-paging`` command line: one settings value, one subcommand, output on stdout.

Only the CLI's own commands print to stdout; ``serve`` leaves stdout to the MCP protocol and
everything logs to stderr.

A command imports what it needs inside its own function: building the parser and printing
``--version`` or the settings loads no index, tokenizer, HTTP stack or MCP SDK
(docs/performance-history.md, "Start-up").
"""

from __future__ import annotations

import _thread
import os
import sys

from context_paging import __version__

# ``--version`` loads nothing but this module: every other import is inside the function that
# needs it, and typing's names are read by type checkers only (bench/version_bench.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    import threading
    from collections.abc import Callable, Sequence

    from context_paging.index.catalog import SessionSummary
    from context_paging.server.config import Settings

    Command = Callable[[argparse.Namespace, Settings], int]


def _cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.index.catalog import Catalog
    from context_paging.server.commands.recovery import print_json
    from context_paging.server.table import terminal_width

    catalog = Catalog(settings.roots, cache=settings.home / "catalog.json")
    summaries = catalog.summaries(args.source, args.project)[: args.limit]
    if args.json:
        print_json({"sessions": [s.model_dump() for s in summaries]})
        return 0
    if not summaries:
        roots = ", ".join(f"{k}={v}" for k, v in settings.roots.items())
        print(f"No sessions found in the configured session folders ({roots}).")
        return 0
    print(render_sessions(summaries, width=terminal_width()))
    return 0


def render_sessions(summaries: Sequence[SessionSummary], home: str | None = None,
                    width: int | None = None) -> str:
    """A readable table: reference, last update, size, project, title; a subagent's title
    says whose subagent it is. ``width``: the terminal's, which the rows fit (server/table.py;
    None: full width)."""
    from context_paging.server.table import fit

    home = home if home is not None else os.path.expanduser("~")
    rows = [("SESSION", "UPDATED (UTC)", "SIZE", "PROJECT", "TITLE")]
    for s in summaries:
        updated = (s.updated or "")[:19].replace("T", " ")
        title = (s.title or "(untitled)").replace("\n", " ")
        if s.parent:
            source, _, parent = s.parent.partition(":")
            title = f"[subagent of {source}:{parent[:8]}] {title}"
        rows.append((s.ref, updated, _size(s.size), _project(s.cwd, home), _cut(title, 60)))
    return fit(rows, width, keep=(0,))  # the reference is what one copies: never cut


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
    from context_paging.server.progress import progress_for

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
    from context_paging.server.commands.recovery import json_text, render_references

    if args.json:
        from context_paging.server.mcp.tools import search_result

        progress.emit(json_text(search_result(reply).model_dump()))
        return
    if not reply.references:
        progress.emit(reply.note or f"No match for {args.query!r}.")
        return
    progress.emit(reply.searched.describe() + ".")
    progress.emit(render_references(reply.references, commands=True))
    if reply.note:
        progress.emit(reply.note)
    if reply.next_offset is not None:
        progress.emit(f"More hits: add --offset {reply.next_offset}.")


def _cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.server.progress import progress_for

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
    from context_paging.server.setup import clients

    print(clients.render_config(settings))
    return 0


def _cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.index.stats import render
    from context_paging.server.commands.recovery import print_json

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
    from context_paging.server.progress import progress_for

    with progress_for(args) as progress:
        return run_demo(args, progress.emit, progress, settings)


def _parser_class() -> type[argparse.ArgumentParser]:
    import argparse

    class Parser(argparse.ArgumentParser):
        """argparse's parser whose usage errors are one line: what was wrong, where to look."""

        def error(self, message: str):  # argparse never returns from it
            self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")

    return Parser


def build_parser(grouped_help: bool = True) -> argparse.ArgumentParser:
    import argparse

    from context_paging.index.search.notes import DEFAULT_SESSION_RULE
    from context_paging.server.bounds import LENGTHS, at_most, number, span, text
    from context_paging.server.commands import forget as forget_cli
    from context_paging.server.commands import recovery as terminal_cli
    from context_paging.server.progress import add_quiet
    from context_paging.server.setup import agents, clients

    parser = _parser_class()(
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
    sessions.add_argument("--project", type=text("id"),
                          help="only sessions whose working directory is this path")
    sessions.add_argument("--limit", type=number("sessions.limit"), default=50,
                          help="at most this many, newest first (default 50)")
    sessions.add_argument("--json", action="store_true", help="the list as JSON")
    sessions.set_defaults(run=_cmd_sessions)

    serve = commands.add_parser("serve", help="run the MCP server over stdio")
    serve.add_argument("--tools", choices=("all", "recovery"), help="all tools, or only the "
                       "model's recovery tools (default: the [server] tools setting, 'all')")
    serve.set_defaults(run=_cmd_serve)

    search = commands.add_parser(
        "search", help="search session history",
        description='Items that match more of the words, and rarer ones, come first; "a '
        'phrase" in double quotes must stand as written; AND requires every word; -word leaves '
        "items out. " + DEFAULT_SESSION_RULE)
    search.add_argument("query", type=text("query"),
                        help="words, \"a phrase\", a path or an identifier; at "
                        f"most {LENGTHS['query']} characters")
    search.add_argument("--session", type=text("id"), help="session reference (default: see above)")
    search.add_argument("--scope", choices=("session", "project", "all"), default="session",
                        help="search one session (default), every session of a project "
                        "directory, or every session of every agent")
    search.add_argument("--project", type=text("id"), help="with --scope project: this directory "
                        "(default: the session's, else the current directory)")
    search.add_argument("--file", action=at_most("filters", append=True), type=text("id"),
                        help="only turns that touched this file (a "
                        "path, a suffix of one, or a file name)")
    search.add_argument("--tool", action=at_most("filters", append=True), type=text("id"),
                        help="only turns that called this tool")
    search.add_argument("--failed", action=argparse.BooleanOptionalAction, default=None,
                        help="only turns whose tool call failed (--no-failed: only turns "
                        "without a failure; default: both)")
    search.add_argument("--limit", type=number("search.limit"), default=5,
                        metavar=span("search.limit"),
                        help="references to return (default 5)")
    search.add_argument("--offset", type=number("search.offset"), default=0,
                        help="hits to skip (the next page)")
    search.add_argument("--json", action="store_true", help="the search_history reply as JSON")
    add_quiet(search)
    search.set_defaults(run=_cmd_search)

    index = commands.add_parser("index", help="bring the search index up to date")
    index.add_argument("--session", type=text("id"),
                       help="session reference (default: this directory's newest)")
    index.add_argument("--all", action="store_true",
                       help="every session of every agent (the folders `context-paging "
                       "config` lists under [sources])")
    add_quiet(index)
    index.set_defaults(run=_cmd_index)

    config = commands.add_parser("config", help="show the resolved settings and their sources")
    config.set_defaults(run=_cmd_config)

    install = commands.add_parser(
        "install-config", help="print (or --write) an MCP client's configuration for this server")
    clients.add_arguments(install)
    install.set_defaults(run=agents.install_config)
    uninstall = commands.add_parser(
        "uninstall-config", help="take back what install-config --write added: the file's "
        "original, or only the entry when the file changed since")
    clients.add_uninstall_arguments(uninstall)
    uninstall.set_defaults(run=agents.uninstall_config)

    stats = commands.add_parser("stats", help="saved history, latest request and cache totals")
    stats.add_argument("--session", type=text("id"),
                       help="session reference, e.g. ledger:<id> or claude:<id>")
    stats.add_argument("--json", action="store_true", help="the paging_stats reply as JSON")
    stats.set_defaults(run=_cmd_stats)
    statusline = commands.add_parser(
        "statusline", help="one line for Claude Code's status bar: the window against the "
        "budget, saved, cache reads, cut advances (reads Claude Code's JSON on stdin)")
    statusline.set_defaults(run=_cmd_statusline)
    terminal_cli.add_commands(commands)

    demo = commands.add_parser(
        "demo", help="a tour on a bundled sample session: the window request by request, then "
        "recovering what left it",
        description="A tour on a bundled sample session: the window request by request, then "
        "recovering what left it. It runs in a throwaway directory, then keeps its session in "
        "your data directory as ledger:demo-flaky-checkout (and the sample file in demo/), so "
        "the commands of docs/getting-started.md run on it; `context-paging forget --session "
        "ledger:demo-flaky-checkout` deletes it.")
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


def _cmd_statusline(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.server import statusline

    return statusline.main(["--home", str(settings.home)])


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


INTERRUPTED = "context-paging: interrupted"
STOP_WITHIN = 2.0  # seconds a Ctrl-C'd command has to let its clean-up finish


def _say_once() -> Callable[[], None]:
    """What prints the one line, once, whichever of the clean exit and the deadline comes
    first (one per run of :func:`main`)."""
    said = _thread.allocate_lock()  # held once the line is out

    def say() -> None:
        if said.acquire(blocking=False):
            try:  # on a terminal, over a progress bar the deadline left drawn
                clear = "\r\x1b[K" if sys.stderr.isatty() else ""
                print(clear + INTERRUPTED, file=sys.stderr, flush=True)
            except Exception:  # stderr closed: the status still says it
                pass

    return say


def _interruptible(say: Callable[[], None]) -> Callable[[], None]:
    """Ctrl-C ends a command with one line on stderr and status 130, never a traceback or a wait.

    The first SIGINT raises KeyboardInterrupt as usual, so ``finally`` blocks close the index
    and end a worker pool, and :func:`main` prints the line; if that clean-up has not finished
    within ``STOP_WITHIN`` seconds, or a second Ctrl-C comes, the process ends at once with the
    same line (an index commit cut short leaves the previous one intact: docs/reliability.md).
    ``serve`` puts its own handler in place of this one. Outside the main thread (a test calling
    :func:`main` from a thread) nothing changes. Returns what puts the old handler back.
    """
    import signal
    import threading
    import time

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def now(*_: object) -> None:
        try:
            sys.stdout.flush()
        except Exception:  # a closed or broken stdout: exiting anyway
            pass
        say()
        os._exit(130)

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, now)
        # A daemon: a clean exit within the time does not wait for it, a stuck one is ended.
        threading.Thread(target=lambda: time.sleep(STOP_WITHIN) or now(), daemon=True).start()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, first)

    def restore() -> None:
        if signal.getsignal(signal.SIGINT) is first:  # not interrupted: as it was
            signal.signal(signal.SIGINT, previous)

    return restore


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words == ["--version"]:  # no parser to build
        print(f"context-paging {__version__}")
        return 0
    command = words[2:] if words[:1] == ["--home"] else words
    if command[:1] == ["statusline"] and not {"-h", "--help"} & set(words):
        # Claude Code runs it often: no parser, settings or index (server/statusline.py)
        from context_paging.server import statusline

        return statusline.main(words)
    import logging

    from context_paging.index.home import private
    from context_paging.server.config import load_settings
    from context_paging.server.errors import failure

    parser = build_parser()
    if not list(sys.argv[1:] if argv is None else argv):  # a first try: what there is to run
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="context-paging: %(message)s",
    )
    settings = load_settings(home=args.home, overrides=_overrides(args.set))
    private.restrict_umask()  # the home's files are the user's alone (index/home/private.py)
    private.secure_home(settings.home)
    run: Command = args.run
    say = _say_once()
    restore = _interruptible(say)
    try:
        return run(args, settings)
    except KeyboardInterrupt:
        say()
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
        from context_paging.server.commands.recovery import terminal_message

        print(f"context-paging: {terminal_message(exc)}", file=sys.stderr)
        return 2
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
