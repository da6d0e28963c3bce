"""``context-paging forget``: delete a conversation the ledger holds, or every one older than
``[ledger] keep_days`` (index/home/forget.py says what is removed)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from context_paging.server.config import Settings

if TYPE_CHECKING:  # the index modules load only when the command runs (a fast CLI start)
    from context_paging.index.home.forget import Forgotten


def add_command(commands: Any) -> None:
    parser = commands.add_parser(
        "forget", help="delete a ledger session (its messages, cut, proxy tally and search "
        "index entries), or with --expired every one older than [ledger] keep_days")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", action="append", metavar="ledger:ID",
                       help="the ledger session to delete (repeatable); 'context-paging stats' "
                       "and the notice the model sees name it")
    which.add_argument("--expired", action="store_true",
                       help="delete the ledger sessions not written for [ledger] keep_days days")
    parser.set_defaults(run=cmd_forget)


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.index.home.forget import expired
    from context_paging.server.histories import forget_sessions

    if args.expired:
        keep = settings.get("ledger", "keep_days")
        if keep is None:
            print("context-paging: [ledger] keep_days is not set; nothing is old enough to "
                  "delete (set it in config.toml, e.g. keep_days = 30)", file=sys.stderr)
            return 2
        sessions = expired(settings.home, keep)
    else:
        sessions = args.session
    results = forget_sessions(settings, sessions)
    for result in results:
        print(_line(result))
    if not results:
        print(f"No ledger session older than {keep} days.")
    return 0 if all(r.anything for r in results) or args.expired else 1


def _line(result: Forgotten) -> str:
    if not result.anything:
        return f"{result.session}: nothing stored under this name."
    return (f"{result.session}: deleted {len(result.files)} file(s) and "
            f"{result.index_items} search-index item(s).")
