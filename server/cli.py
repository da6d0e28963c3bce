"""The ``context-paging`` command line: one settings value, one subcommand, output on stdout.

Only the CLI's own commands print to stdout; ``serve`` leaves stdout to the MCP protocol and
everything logs to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from context_paging.index.catalog import Catalog, SessionSummary
from context_paging.index.discovery import SessionRefError
from context_paging.index.navigator import NavigatorError
from context_paging.server import clients
from context_paging.server.config import Settings, load_settings

Command = Callable[[argparse.Namespace, Settings], int]


def _cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    catalog = Catalog(settings.roots, cache=settings.home / "catalog.json")
    summaries = catalog.summaries(args.source, args.project)[: args.limit]
    if not summaries:
        roots = ", ".join(f"{k}={v}" for k, v in settings.roots.items())
        print(f"No sessions found under the configured roots ({roots}).")
        return 0
    print(render_sessions(summaries))
    return 0


def render_sessions(summaries: Sequence[SessionSummary]) -> str:
    """A readable table: reference, last update, size, title."""
    rows = [("SESSION", "UPDATED (UTC)", "SIZE", "TITLE")]
    for s in summaries:
        updated = (s.updated or "")[:19].replace("T", " ")
        title = (s.title or "(untitled)").replace("\n", " ")
        if len(title) > 60:
            title = title[:59] + "…"
        rows.append((s.ref, updated, _size(s.size), title))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3]
        for row in rows
    )


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1 << 20:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1 << 20):.1f} MiB"


def _history(settings: Settings):
    from context_paging.server.mcp_server import make_history

    return make_history(settings)


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.server.mcp_server import create_server

    create_server(settings).run()
    return 0


def _cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    try:
        reply = history.search(
            args.query, args.session, args.scope, args.file or (), args.tool or (),
            args.failed, args.limit, progress=_progress_bar(), directory=args.project,
        )
    finally:
        history.close()
    if not reply.references:
        print(f"No match for {args.query!r}.")
        return 1
    for ref in reply.references:
        flags = " failed" if ref["failed"] else ""
        tools = f" [{', '.join(ref['tools'][:4])}]" if ref["tools"] else ""
        print(f"{ref['session']}  {ref['history_id']}  #{ref['sequence']} {ref['kind']}{flags}"
              f"{tools}\n    {ref['preview']}")
    if reply.note:
        print(reply.note)
    return 0


def _cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    try:
        if args.all:
            changed = history.index_all(_progress_bar())
            print(f"Index up to date: {changed} session(s) added or updated.")
        else:
            ref = history.resolve_default(args.session)
            result = history.ensure_indexed(ref)
            print(f"{ref}: " + ("already up to date." if result is None else
                                f"{result.added} added, {result.updated} updated, "
                                f"{result.removed} removed."))
    finally:
        history.close()
    return 0


def _progress_bar():
    """A one-line progress bar on stderr; when stderr is not a terminal, a plain line every
    5 seconds (a long ``index --all`` is never silent)."""
    if not sys.stderr.isatty():
        return _progress_lines()

    def show(done: float, total: float | None, message: str) -> None:
        if not total:
            return
        width = 30
        filled = int(width * done / total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {int(done)}/{int(total)} "
                         f"{message[:50]:<50}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _progress_lines(every: float = 5.0):
    import time

    last = [time.monotonic()]

    def show(done: float, total: float | None, message: str) -> None:
        now = time.monotonic()
        if total and (now - last[0] >= every or done >= total):
            last[0] = now
            print(f"context-paging: {int(done)}/{int(total)} {message}", file=sys.stderr)

    return show


def _cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    print(clients.render_config(settings))
    return 0


def _cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.index.stats import render

    history = _history(settings)
    try:
        print(render(history.stats(args.session, settings.paging_enabled)))
    finally:
        history.close()
    return 0


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.server.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="context-paging",
        description="A rolling context window for coding agents, "
        "with exact recovery of old history.",
    )
    parser.add_argument("--home", help="data directory (default: $CONTEXT_PAGING_HOME or "
                        "~/.local/share/context-paging)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a setting for this run, "
                        "e.g. --set paging.token_budget=64000")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sessions = commands.add_parser("sessions", help="list Pi, Claude Code and Codex sessions")
    sessions.add_argument("--source", choices=("pi", "claude", "codex"))
    sessions.add_argument("--project", help="only sessions whose working directory is this path")
    sessions.add_argument("--limit", type=int, default=50)
    sessions.set_defaults(run=_cmd_sessions)

    serve = commands.add_parser("serve", help="run the MCP server over stdio")
    serve.set_defaults(run=_cmd_serve)

    search = commands.add_parser("search", help="search session history")
    search.add_argument("query")
    search.add_argument("--session", help="session reference (default: this directory's newest)")
    search.add_argument("--scope", choices=("session", "project", "all"), default="session")
    search.add_argument("--project", help="with --scope project: this directory "
                        "(default: the session's, else the current directory)")
    search.add_argument("--file", action="append", help="only turns that touched this path")
    search.add_argument("--tool", action="append", help="only turns that called this tool")
    search.add_argument("--failed", action=argparse.BooleanOptionalAction, default=None)
    search.add_argument("--limit", type=int, default=5, choices=range(1, 11), metavar="1-10")
    search.set_defaults(run=_cmd_search)

    index = commands.add_parser("index", help="bring the search index up to date")
    index.add_argument("--session", help="session reference (default: this directory's newest)")
    index.add_argument("--all", action="store_true", help="every session under the roots")
    index.set_defaults(run=_cmd_index)

    config = commands.add_parser("config", help="show the resolved settings and their sources")
    config.set_defaults(run=_cmd_config)

    install = commands.add_parser(
        "install-config", help="print (or --write) an MCP client's configuration for this server")
    clients.add_arguments(install)
    install.set_defaults(run=clients.run)

    stats = commands.add_parser("stats", help="saved history, latest request and cache totals")
    stats.add_argument("--session", help="session reference, e.g. ledger:<id> or claude:<id>")
    stats.set_defaults(run=_cmd_stats)

    demo = commands.add_parser("demo", help="run the main job on bundled sample data")
    demo.set_defaults(run=_cmd_demo)
    return parser


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
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="context-paging: %(message)s",
    )
    settings = load_settings(home=args.home, overrides=_overrides(args.set))
    run: Command = args.run
    try:
        return run(args, settings)
    except (SessionRefError, NavigatorError) as exc:
        print(f"context-paging: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head(1) or a pager that quit: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
