"""What the proxy leaves in the home for other processes: the conversation it saw last and a
running tally per proxied conversation (requests by mode — paged, within budget, failed open
with the last reason — which ``doctor`` reports).

The proxy and the MCP server are separate processes (the agent starts one, the user the other),
so both facts are files: ``CONTEXT_PAGING_HOME/proxy/last.json`` (the recovery tools' default
session) and ``proxy/<ledger session>.json`` (``paging_stats`` / ``context-paging stats``).
Each is replaced atomically; a damaged or missing file only costs the figure.

Token figures here are characters/4 of the request bodies (sent against received): the same
yardstick on both sides, cheap enough for every request. The prefix share is the part of a
request that repeats the previous request of the same conversation byte for byte — what a
provider's prompt cache can reuse.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from context_paging.index.overwrite import overwrite
from context_paging.index.private import private_directory

if TYPE_CHECKING:  # loaded where used: doctor reads the tallies without the window
    from context_paging.index.stats import ProxyFigures

LAST = "last.json"
# The recovery tools default to the proxied conversation while it is in use; a proxy that last
# ran days ago should not shadow the session the user works in now.
FRESH_SECONDS = 6 * 3600


def proxy_directory(home: Path) -> Path:
    return home / "proxy"


def _write(path: Path, value: dict[str, Any]) -> None:
    private_directory(path.parent)
    overwrite(path, json.dumps(value).encode())  # in place: no rename on every request


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def last_proxied(home: Path, within: float | None = None) -> str | None:
    """``ledger:<id>`` of the conversation the proxy forwarded last, if any (and, with
    ``within``, only if that was at most so many seconds ago)."""
    path = proxy_directory(home) / LAST
    if within is not None:
        try:
            if time.time() - path.stat().st_mtime > within:
                return None
        except OSError:
            return None
    value = _read(path)
    ref = value.get("session") if value else None
    return ref if isinstance(ref, str) and ref.startswith("ledger:") else None


def conversation_stats(home: Path, ref: str) -> dict[str, Any] | None:
    """The proxy's tally for a ledger session, or None when the proxy never saw it."""
    name = ref.removeprefix("ledger:")
    if "/" in name or name.startswith("."):
        return None
    return _read(proxy_directory(home) / f"{name}.json")


class ProxyLog:
    """Counts per conversation, kept in memory and written after every request."""

    def __init__(self, home: Path) -> None:
        self.directory = proxy_directory(home)
        self.tallies: dict[str, dict[str, Any]] = {}
        self._last: str | None = None

    def _tally(self, session: str, api: str) -> dict[str, Any]:
        tally = self.tallies.get(session)
        if tally is None:
            tally = _read(self.directory / f"{session}.json") or {}
            tally = self.tallies[session] = {
                "session": f"ledger:{session}", "api": api, "requests": 0,
                "sent_tokens": 0, "full_tokens": 0, "cut_advances": 0,
                "prefix_bytes": 0, "compared_bytes": 0, "modes": {}, **tally}
        return tally

    def record_failure(self, session: str, api: str, reason: str, full: bytes) -> None:
        """A request of this conversation that failed open: forwarded as received, because
        of ``reason`` (what ``doctor`` shows)."""
        tally = self._tally(session, api)
        tally["requests"] += 1
        tally["sent_tokens"] += len(full) // 4
        tally["full_tokens"] += len(full) // 4
        tally["failed_open"] = tally.get("failed_open", 0) + 1
        tally["last_fail_open"] = reason[:300]
        tally["last_mode"] = "failed_open"
        tally["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
        _write(self.directory / f"{session}.json", tally)

    def record(self, session: str, api: str, reply: dict[str, Any], sent: bytes, full: bytes,
               previous: bytes | None) -> None:
        tally = self._tally(session, api)
        modes = tally.setdefault("modes", {})
        mode = str(reply.get("mode"))
        modes[mode] = modes.get(mode, 0) + 1
        frontier = reply.get("frontier")
        if frontier is not None and frontier != tally.get("frontier"):
            tally["cut_advances"] += 1
        tally["frontier"] = frontier
        tally["requests"] += 1
        tally["sent_tokens"] += len(sent) // 4
        tally["full_tokens"] += len(full) // 4
        if previous is not None:
            from context_paging.paging.request import common_start

            shared = common_start(previous, sent)
            tally["prefix_bytes"] += shared
            tally["compared_bytes"] += len(sent)
            tally["last_prefix_share"] = round(shared / len(sent), 4) if sent else 1.0
        tally["last_sent_tokens"] = len(sent) // 4
        tally["last_full_tokens"] = len(full) // 4
        tally["last_mode"] = reply.get("mode")
        tally["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
        _write(self.directory / f"{session}.json", tally)
        if session != self._last:
            self._last = session
            _write(self.directory / LAST, {"session": f"ledger:{session}"})


    def record_inband(self, session: str, api: str, calls: list[tuple[str, bool]]) -> None:
        """Recovery calls the proxy answered in band in this conversation: per tool, how many,
        and how many returned something."""
        tally = self._tally(session, api)
        counts = tally.setdefault("inband", {})
        for tool, found in calls:
            row = counts.setdefault(tool, {"calls": 0, "found": 0})
            row["calls"] += 1
            row["found"] += bool(found)
        tally["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
        _write(self.directory / f"{session}.json", tally)


def figures(tally: dict[str, Any]) -> ProxyFigures:
    from context_paging.index.stats import ProxyFigures

    compared = tally.get("compared_bytes", 0)
    return ProxyFigures(
        api=str(tally.get("api", "?")), requests=int(tally.get("requests", 0)),
        sent_tokens=int(tally.get("sent_tokens", 0)), full_tokens=int(tally.get("full_tokens", 0)),
        cut_advances=int(tally.get("cut_advances", 0)),
        prefix_share=round(tally.get("prefix_bytes", 0) / compared, 4) if compared else None,
        inband_calls=inband_counts(tally)[0], inband_found=inband_counts(tally)[1])


def inband_counts(tally: dict[str, Any]) -> tuple[int, int]:
    """(recovery calls answered in band, of them those that returned something)."""
    rows = tally.get("inband") if isinstance(tally.get("inband"), dict) else {}
    rows = [r for r in rows.values() if isinstance(r, dict)]
    return (sum(int(r.get("calls", 0)) for r in rows),
            sum(int(r.get("found", 0)) for r in rows))


def tallies(home: Path) -> list[dict[str, Any]]:
    """Every conversation's tally, the most recently updated first."""
    found = []
    for path in proxy_directory(home).glob("*.json"):
        if path.name != LAST and (value := _read(path)) is not None:
            found.append(value)
    return sorted(found, key=lambda t: str(t.get("updated", "")), reverse=True)
