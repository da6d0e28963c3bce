"""What the proxy leaves in the home for other processes: the conversation it saw last and a
running tally per proxied conversation (requests by mode — paged, within budget, failed open
with the last reason — which ``doctor`` reports).

The proxy and the MCP server are separate processes (the agent starts one, the user the other),
so both facts are files: ``CONTEXT_PAGING_HOME/proxy/last.json`` (the recovery tools' default
session) and ``proxy/<ledger session>.json`` (``paging_stats`` / ``context-paging stats``, the
live view, the status line). Each is replaced atomically; a damaged or missing file only costs
the figure. Beside each tally, ``proxy/<ledger session>.requests.jsonl`` holds one line per
request (what was sent, the full history, the budget, the mode, whether the cut advanced, why it
failed open) and one line per provider reply that reported usage: the live view's per-request
series (docs/live-view.md), appended, so a restarted proxy keeps the history.

Token figures here are characters/4 of the request bodies (sent against received): the same
yardstick on both sides, cheap enough for every request. The prefix share is the part of a
request that repeats the previous request of the same conversation byte for byte — what a
provider's prompt cache can reuse.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from context_paging.index.home.overwrite import overwrite, read_whole
from context_paging.index.home.private import FILE_MODE, private_directory

if TYPE_CHECKING:  # loaded where used: doctor reads the tallies without the window
    from context_paging.index.stats import ProxyFigures

LAST = "last.json"
SERIES = ".requests.jsonl"
TOKEN = "view.token"
# The recovery tools default to the proxied conversation while it is in use; a proxy that last
# ran days ago should not shadow the session the user works in now.
FRESH_SECONDS = 6 * 3600


def proxy_directory(home: Path) -> Path:
    return home / "proxy"


def _write(path: Path, value: dict[str, Any]) -> None:
    private_directory(path.parent)
    overwrite(path, json.dumps(value).encode())  # in place: no rename on every request


def _read(path: Path) -> dict[str, Any] | None:
    try:  # the proxy rewrites a tally in place after each reply: never read half of it
        value = json.loads(read_whole(path).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def view_token(home: Path) -> str:
    """The live view's secret (docs/live-view.md): made once, kept in ``proxy/view.token``
    (0600, in the private home), so only this user can open the page."""
    path = proxy_directory(home) / TOKEN
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    if len(token) >= 32:
        return token
    private_directory(path.parent)
    if token or path.exists():  # damaged: made anew
        path.unlink(missing_ok=True)
    token = secrets.token_urlsafe(32)
    draft = path.with_name(f".{TOKEN}.{os.getpid()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)
    try:  # put in place whole; whoever does it first wins and the other reads theirs
        os.link(draft, path)
    except FileExistsError:
        token = path.read_text(encoding="ascii").strip()
    finally:
        draft.unlink(missing_ok=True)
    return token


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


def _name(ref: str) -> str | None:
    name = ref.removeprefix("ledger:")
    return None if not name or "/" in name or "\\" in name or name.startswith(".") else name


def conversation_stats(home: Path, ref: str) -> dict[str, Any] | None:
    """The proxy's tally for a ledger session, or None when the proxy never saw it."""
    name = _name(ref)
    return None if name is None else _read(proxy_directory(home) / f"{name}.json")


def request_series(home: Path, ref: str) -> list[dict[str, Any]]:
    """The conversation's requests in order, each with the provider's usage for its reply
    (``usage``) when the reply reported one. Unreadable lines are skipped."""
    name = _name(ref)
    if name is None:
        return []
    try:
        text = (proxy_directory(home) / f"{name}{SERIES}").read_bytes()
    except OSError:
        return []
    rows: dict[int, dict[str, Any]] = {}
    usage: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        n = value.get("n") if isinstance(value, dict) else None
        if not isinstance(n, int):
            continue
        if isinstance(value.get("usage"), dict) and len(value) == 2:
            usage[n] = value["usage"]
        else:
            rows[n] = value
    return [rows[n] | ({"usage": usage[n]} if n in usage else {}) for n in sorted(rows)]


class ProxyLog:
    """Counts per conversation, kept in memory and written after every request."""

    def __init__(self, home: Path) -> None:
        self.directory = proxy_directory(home)
        self.tallies: dict[str, dict[str, Any]] = {}
        self._last: str | None = None

    def _tally(self, session: str, api: str, agent: str | None = None,
               model: str | None = None) -> dict[str, Any]:
        tally = self.tallies.get(session)
        if tally is not None and not (self.directory / f"{session}.json").exists():
            # Written after every request, so gone means deleted (``forget``, or by hand):
            # the conversation is counted afresh, not written back from memory.
            tally = None
            if self._last == session:
                self._last = None  # last.json went with it: written again below
        now = datetime.now(UTC).isoformat(timespec="seconds")
        if tally is None:
            tally = _read(self.directory / f"{session}.json") or {}
            tally = self.tallies[session] = {
                "session": f"ledger:{session}", "api": api, "requests": 0,
                "sent_tokens": 0, "full_tokens": 0, "cut_advances": 0,
                "prefix_bytes": 0, "compared_bytes": 0, "modes": {}, "first_seen": now,
                **tally}
        if agent:
            tally["agent"] = agent
        if model:
            tally["model"] = model
        return tally

    def _append(self, session: str, row: dict[str, Any]) -> None:
        """One line of the conversation's request series (appended whole: one write)."""
        private_directory(self.directory)
        path = self.directory / f"{session}{SERIES}"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            os.write(fd, json.dumps(row, separators=(",", ":")).encode() + b"\n")
        finally:
            os.close(fd)

    def record_failure(self, session: str, api: str, reason: str, full: bytes,
                       agent: str | None = None, model: str | None = None) -> None:
        """A request of this conversation that failed open: forwarded as received, because
        of ``reason`` (what ``doctor`` shows)."""
        tally = self._tally(session, api, agent, model)
        tally["requests"] += 1
        self._append(session, {"n": tally["requests"], "t": round(time.time(), 3),
                               "mode": "failed_open", "sent": len(full) // 4,
                               "full": len(full) // 4, "failed": reason[:300]})
        tally["sent_tokens"] += len(full) // 4
        tally["full_tokens"] += len(full) // 4
        tally["failed_open"] = tally.get("failed_open", 0) + 1
        tally["last_fail_open"] = reason[:300]
        tally["last_mode"] = "failed_open"
        tally["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
        _write(self.directory / f"{session}.json", tally)

    def record(self, session: str, api: str, reply: dict[str, Any], sent: bytes, full: bytes,
               previous: bytes | None, agent: str | None = None, model: str | None = None,
               notice: str | None = None) -> int:
        """A paged (or within-budget) request: ``notice`` is the notice as the model saw it.
        Returns the request's number in the conversation."""
        tally = self._tally(session, api, agent, model)
        modes = tally.setdefault("modes", {})
        mode = str(reply.get("mode"))
        modes[mode] = modes.get(mode, 0) + 1
        frontier = reply.get("frontier")
        advanced = frontier is not None and frontier != tally.get("frontier")
        if advanced:
            tally["cut_advances"] += 1
        tally["frontier"] = frontier
        tally["requests"] += 1
        distilled = reply.get("distilled") or []
        row = {"n": tally["requests"], "t": round(time.time(), 3), "mode": mode,
               "sent": len(sent) // 4, "full": len(full) // 4,
               "budget": reply.get("budget_tokens"), "estimated": reply.get("estimated_tokens"),
               "evicted": reply.get("evicted_messages"), "advanced": advanced,
               "distilled": len(distilled)}
        self._append(session, row)
        tally["notice"] = notice[:4000] if notice else None
        tally["evicted_messages"] = reply.get("evicted_messages")
        tally["budget_tokens"] = reply.get("budget_tokens")
        tally["distilled"] = distilled[:50]
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
        return tally["requests"]

    def record_usage(self, session: str, api: str, usage: dict[str, int], number: int) -> None:
        """What the provider reported for the reply to request ``number`` of the conversation:
        its uncached input, cache reads and writes, summed into the tally and kept per
        request."""
        tally = self._tally(session, api)
        for key in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                tally[key] = tally.get(key, 0) + value
        tally["last_usage"] = usage
        self._append(session, {"n": number, "usage": usage})
        _write(self.directory / f"{session}.json", tally)


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
