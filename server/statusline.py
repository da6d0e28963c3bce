"""``context-paging statusline``: one short line for Claude Code's status bar (docs/live-view.md).

Claude Code runs its ``statusLine`` command often and passes it the session as JSON on stdin
(``session_id``, ``transcript_path``, ``cwd``, ``model``, …). This finds that session's
conversation among the proxy's tallies in the home (index/home/proxied.py writes them, one file per
ledger session named ``cc-<session id>-<opening>``; the largest of them is the main conversation,
the others are side calls and subagents) and prints the window against the budget, what was
saved against the full history, the last request's cache-read share and the cut's advances.

It must answer in well under 100 ms: it imports a few modules of the standard library only (no
index, no tokenizer, no HTTP stack, not even the settings or ``pathlib``), reads a handful of
small files and prints.
bench/statusline_bench.py measures it against ``python -c pass``.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from typing import Any

from context_paging.server.endpoints import DEFAULT_HOME, ENV_HOME, safe_name

NOT_PROXIED = "context-paging: not through the proxy"


def short(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 1_000:
        return f"{value / 1_000:.1f}k"
    return f"{value:.0f}"


def find_tally(home: str, session_id: str) -> dict[str, Any] | None:
    """The main conversation's tally for a Claude Code session: the one with the largest last
    request among the ledger sessions named after it (``proxy/cc-<session id>-*.json``)."""
    folder = os.path.join(home, "proxy")
    prefix = f"cc-{safe_name(session_id)}-"
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(".json")]
    except OSError:
        return None
    best, size = None, -1
    for name in names:
        try:
            with open(os.path.join(folder, name), "rb") as handle:
                # the proxy rewrites a tally in place under an exclusive lock (it loads no
                # index module to share index/home/overwrite.py's reader)
                fcntl.flock(handle, fcntl.LOCK_SH)
                value = json.loads(handle.read())
        except (OSError, ValueError):
            continue
        if not isinstance(value, dict):
            continue
        full = value.get("last_full_tokens")
        full = full if isinstance(full, int) else 0
        if full > size:
            best, size = value, full
    return best


def line(tally: dict[str, Any] | None) -> str:
    """The status line for a conversation's tally (None: the session is not proxied)."""
    if tally is None:
        return NOT_PROXIED
    sent, full = tally.get("last_sent_tokens"), tally.get("last_full_tokens")
    budget = tally.get("budget_tokens")
    if not isinstance(sent, int) or not isinstance(full, int):
        reason = str(tally.get("last_fail_open") or "no request paged yet")
        return f"context-paging: failed open ({reason[:60]})"
    parts = [f"window {short(sent)}" + (f"/{short(budget)}" if isinstance(budget, int | float)
                                        and budget else "")]
    if full > sent:
        parts.append(f"saved {(1 - sent / full) * 100:.0f}% of {short(full)}")
    else:
        parts.append("whole history sent")
    usage = tally.get("last_usage") or {}
    total = sum(int(usage.get(k) or 0) for k in
                ("input_tokens", "cache_read_tokens", "cache_write_tokens"))
    if total:
        parts.append(f"cache {int(usage.get('cache_read_tokens') or 0) / total * 100:.0f}%")
    advances = int(tally.get("cut_advances") or 0)
    parts.append(f"{advances} cut{'' if advances == 1 else 's'}")
    return "paging: " + " · ".join(parts)


def main(argv: list[str]) -> int:
    """Read Claude Code's JSON from stdin, print one line. Never fails: a bad input prints a
    short line saying so, and exits 0 (a status bar has no room for an error)."""
    home = None
    if "--home" in argv and argv.index("--home") + 1 < len(argv):
        home = argv[argv.index("--home") + 1]
    home_path = os.path.expanduser(home or os.environ.get(ENV_HOME) or DEFAULT_HOME)
    try:
        value = json.loads(sys.stdin.buffer.read() or b"{}")
    except (ValueError, OSError):
        value = None
    session = value.get("session_id") if isinstance(value, dict) else None
    if not isinstance(session, str) or not session:
        print("context-paging: no session id from Claude Code")
        return 0
    print(line(find_tally(home_path, session)))
    return 0
