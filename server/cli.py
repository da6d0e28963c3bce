"""The ``context-paging`` command line: one settings value, one subcommand, output on stdout.

Only the CLI's own commands print to stdout; ``serve`` leaves stdout to the MCP protocol and
everything logs to stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from index.catalog import Catalog, SessionSummary
from index.discovery import SessionRefError
from server.config import Settings, load_settings

Command = Callable[[argparse.Namespace, Settings], int]


def _cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    summaries = Catalog(settings.roots).summaries(args.source, args.project)[: args.limit]
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="context-paging",
        description="A rolling context window for coding agents, with exact recovery of old history.",
    )
    parser.add_argument("--home", help="data directory (default: $CONTEXT_PAGING_HOME or "
                        "~/.local/share/context-paging)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sessions = commands.add_parser("sessions", help="list Pi, Claude Code and Codex sessions")
    sessions.add_argument("--source", choices=("pi", "claude", "codex"))
    sessions.add_argument("--project", help="only sessions whose working directory is this path")
    sessions.add_argument("--limit", type=int, default=50)
    sessions.set_defaults(run=_cmd_sessions)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="context-paging: %(message)s",
    )
    settings = load_settings(home=args.home)
    run: Command = args.run
    try:
        return run(args, settings)
    except SessionRefError as exc:
        print(f"context-paging: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
