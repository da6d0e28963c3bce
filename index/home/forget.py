"""Deleting what the home holds about a conversation, and the ledger's retention.

A ledger session leaves six kinds of trace: its ledger file, its selection state (and a damaged
copy set aside), the proxy's tally and request series (and ``proxy/last.json`` when it names
the session), the recovery exchanges the proxy answered in band (``inband/<session>.jsonl``,
and the proxy's decision for the conversation, ``inband/<session>.json``), and its items in the
search index. :func:`forget` removes all of them; :func:`expired` names the ledger sessions
whose file was last written more than ``[ledger] keep_days`` days ago. The agents' own session
files are never touched: they are the agents' to delete (docs/security.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from context_paging.index.home.proxied import LAST, SERIES, last_proxied, proxy_directory
from context_paging.index.ledger import LedgerError, check_session_id

DAY = 86_400


@dataclass(frozen=True, slots=True)
class Forgotten:
    session: str  # ledger:<id>
    files: tuple[Path, ...]  # the files removed
    index_items: int  # search-index documents removed

    @property
    def anything(self) -> bool:
        return bool(self.files or self.index_items)


def _files(home: Path, name: str) -> list[Path]:
    return [home / "ledger" / f"{name}.jsonl", home / "state" / f"{name}.json",
            home / "state" / f"{name}.json.broken", proxy_directory(home) / f"{name}.json",
            home / "inband" / f"{name}.jsonl", home / "inband" / f"{name}.json",
            proxy_directory(home) / f"{name}{SERIES}"]


def forget(home: Path, ref: str, forget_indexed: Callable[[str], int] | None) -> Forgotten:
    """Remove every trace of ledger session ``ref`` from ``home``. ``forget_indexed`` removes
    one session's search-index items (``SearchIndex.forget``); None when there is no index.
    LedgerError for an id that is not a ledger session's."""
    if ":" in ref and not ref.startswith("ledger:"):
        raise LedgerError(
            f"{ref!r} is an agent's own session: its file belongs to the agent and is not "
            "deleted here (the index only mirrors it). Pass a ledger session, ledger:<id>")
    name = check_session_id(ref)
    session = f"ledger:{name}"
    removed = []
    if last_proxied(home) == session:
        removed += _unlink(proxy_directory(home) / LAST)
    for path in _files(home, name):
        removed += _unlink(path)
    items = forget_indexed(session) if forget_indexed is not None else 0
    return Forgotten(session, tuple(removed), items)


def _unlink(path: Path) -> list[Path]:
    try:
        path.unlink()
    except FileNotFoundError:
        return []
    return [path]


def expired(home: Path, keep_days: int | None, now: float | None = None) -> list[str]:
    """The ledger sessions not written for more than ``keep_days`` days (none when unset)."""
    folder = home / "ledger"
    if keep_days is None or not folder.is_dir():
        return []
    cutoff = (time.time() if now is None else now) - keep_days * DAY
    old = []
    for path in folder.glob("*.jsonl"):
        try:
            if path.lstat().st_mtime < cutoff:
                old.append(f"ledger:{path.stem}")
        except OSError:
            continue
    return sorted(old)
