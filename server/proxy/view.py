"""The live view: a page and its JSON under ``/context-paging/`` on the proxy (docs/live-view.md).

Read-only. Every figure comes from what the proxy already writes for each request (the tallies
and the request series of index/home/proxied.py) and, for the turns out of the window and the
recovery calls, from the ledger, read by a History of the view's own (as another process would
read it), so nothing here runs on a request's path. Every path needs the view's token (kept in
the home, 0600): ``?token=``, ``Authorization: Bearer`` or the cookie the page sets. Who may
connect at all is server/proxy/guard.py's rule (a navigation and the page's own requests pass,
for GET only; no other page may read any of it).

Routes, all GET:

- ``/context-paging/``: the page (server/data/live-view.html, .css, .js; nothing loads from the
  network);
- ``/context-paging/api/conversations``: one object per conversation;
- ``/context-paging/api/conversations/<session>``: that row, its per-request series, the cut,
  the notice, distillation's edits and the fail-opens;
- ``/context-paging/api/conversations/<session>/turns``: the turns out of the window and the
  recovery calls the model made;
- ``/context-paging/api/conversations/<session>/turns/<history_id>``: one turn, exactly as
  stored (what ``load_history`` returns).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import anyio.to_thread
from context_paging.index.home.proxied import (
    SERIES,
    conversation_stats,
    proxy_directory,
    request_series,
    tallies,
    view_token,
)
from context_paging.paging.replay_cost import Compaction, Prices, compaction, sent_after, totals
from context_paging.server.chart import request_chart
from context_paging.server.endpoints import VIEW_PREFIX
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send

log = logging.getLogger("context_paging")

COOKIE = "context_paging_view"
STATIC = {"": ("live-view.html", "text/html; charset=utf-8"),
          "live-view.css": ("live-view.css", "text/css; charset=utf-8"),
          "live-view.js": ("live-view.js", "text/javascript; charset=utf-8")}
# The page's own rules: no script, style, image or connection from anywhere but the proxy.
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
NOT_PAGED = ("within_budget", "disabled")  # every other mode left something out (as doctor)
TURNS_SHOWN = 500  # turns out of the window listed, the newest first


class View:
    """The ASGI app for ``/context-paging/``. ``reader`` builds the History the view reads the
    ledger with (once, on the first request that needs it)."""

    def __init__(self, home: Path, reader: Callable[[], Any] | None = None) -> None:
        self.home = home
        self.token = view_token(home)
        self._reader = reader
        self._history: Any = None
        self._lock = threading.Lock()  # one ledger read at a time
        self._costs = Costs()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if scope["path"] == VIEW_PREFIX.rstrip("/"):  # the page's relative links need the "/"
            query = scope.get("query_string", b"").decode("latin-1")
            target = VIEW_PREFIX + (f"?{query}" if query else "")
            await RedirectResponse(target, status_code=307)(scope, receive, send)
            return
        if request.method not in ("GET", "HEAD"):
            await _error(405, "the live view is read-only")(scope, receive, send)
            return
        given = _given_token(request)
        if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
            await _error(403, "the live view needs its token: open the URL that "
                         "`context-paging view` prints")(scope, receive, send)
            return
        path = scope["path"][len(VIEW_PREFIX):] if scope["path"].startswith(VIEW_PREFIX) else ""
        try:
            response = await self._route(path, request)
        except Exception as exc:  # the view never takes the proxy down
            log.warning("proxy: live view failed on %s: %s: %s", path[:100],
                        type(exc).__name__, exc)
            response = _error(500, f"{type(exc).__name__}")
        if request.query_params.get("token") and path == "":
            response.set_cookie(COOKIE, self.token, path=VIEW_PREFIX, httponly=True,
                                samesite="strict")
        await response(scope, receive, send)

    async def _route(self, path: str, request: Request) -> Response:
        if path in STATIC:
            name, media = STATIC[path]
            data = resources.files("context_paging.server").joinpath("data", name).read_bytes()
            return Response(data, media_type=media, headers={
                "content-security-policy": POLICY, "cache-control": "no-store",
                "referrer-policy": "no-referrer", "x-content-type-options": "nosniff"})
        parts = path.split("/")  # the server decoded the path once already
        if parts[:2] != ["api", "conversations"]:
            return _error(404, "no such page")
        if len(parts) == 2:
            rows = await anyio.to_thread.run_sync(conversations, self.home, self._costs)
            return _json({"conversations": rows})
        ref = _ref(parts[2])
        if ref is None:
            return _error(404, "no such conversation")
        if len(parts) == 3:
            found = await anyio.to_thread.run_sync(conversation, self.home, ref)
            return _json(found) if found else _error(404, "no such conversation")
        if parts[3] == "turns" and len(parts) == 4:
            found = await anyio.to_thread.run_sync(self._turns, ref)
            return _json(found) if found else _error(404, "no such conversation")
        if parts[3] == "turns" and len(parts) == 5:
            found = await anyio.to_thread.run_sync(self._turn, ref, parts[4])
            return _json(found) if found else _error(404, "no such turn")
        return _error(404, "no such page")

    def _history_of(self) -> Any:
        if self._history is None and self._reader is not None:
            self._history = self._reader()
        return self._history

    def _turns(self, ref: str) -> dict[str, Any] | None:
        tally = conversation_stats(self.home, ref)
        if tally is None:
            return None
        with self._lock:
            history = self._history_of()
            if history is None:
                return {"session": ref, "out": [], "recovery_calls": [], "readable": False}
            try:
                navigator = history.navigator(ref)
            except Exception as exc:  # an unknown or unreadable ledger session
                log.warning("proxy: live view cannot read %s: %s", ref, exc)
                return {"session": ref, "out": [], "recovery_calls": [], "readable": False}
            return {"session": ref, "readable": True,
                    "out": turns_out(navigator, tally.get("frontier")),
                    "recovery_calls": recovery_calls(navigator)}

    def _turn(self, ref: str, history_id: str) -> dict[str, Any] | None:
        if conversation_stats(self.home, ref) is None:
            return None
        with self._lock:
            history = self._history_of()
            if history is None:
                return None
            try:
                items = history.load(ref, [history_id])
            except Exception:
                return None
        return {"session": ref, "item": items[0]} if items else None

    def close(self) -> None:
        with self._lock:
            if self._history is not None:
                self._history.close()
                self._history = None


def _given_token(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.query_params.get("token") or request.cookies.get(COOKIE)


def _ref(name: str) -> str | None:
    name = name.removeprefix("ledger:")
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    return f"ledger:{name}"


def _json(value: Any) -> Response:
    return JSONResponse(value, headers={"cache-control": "no-store"})


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status,
                        headers={"cache-control": "no-store"})


# --- the figures ---------------------------------------------------------------------------------


class Costs:
    """Each conversation's estimated costs, computed again only when its series file changed
    (the list is asked for twice a second, and most conversations are long finished)."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}

    def of(self, home: Path, ref: str) -> dict[str, Any]:
        path = proxy_directory(home) / f"{ref.removeprefix('ledger:')}{SERIES}"
        try:
            found = path.stat()
            stamp = (found.st_size, found.st_mtime_ns)
        except OSError:
            stamp = (-1, -1)
        known = self.known.get(ref)
        if known is None or known[0] != stamp:
            known = self.known[ref] = (stamp, costs(request_series(home, ref)))
        return known[1]


def conversations(home: Path, cached: Costs | None = None) -> list[dict[str, Any]]:
    """One row per conversation the proxy saw, the most recently active first."""
    cached = cached or Costs()
    return [row(tally, cost=cached.of(home, ref)) for tally in tallies(home)
            if (ref := str(tally.get("session", ""))).startswith("ledger:")]


def conversation(home: Path, ref: str) -> dict[str, Any] | None:
    """A conversation's row, its per-request series and where its window stands now."""
    tally = conversation_stats(home, ref)
    if tally is None:
        return None
    series = request_series(home, ref)
    points = [_point(r) for r in series]
    return {**row(tally, series), "series": points, "chart": request_chart(points),
            "frontier": tally.get("frontier"), "evicted_messages": tally.get("evicted_messages"),
            "budget_tokens": tally.get("budget_tokens"), "notice": tally.get("notice"),
            "distilled": tally.get("distilled") or [],
            "fail_opens": [{"n": r["n"], "t": r.get("t"), "reason": r["failed"]}
                           for r in series if r.get("failed")]}


def row(tally: dict[str, Any], series: list[dict[str, Any]] | None = None,
        cost: dict[str, Any] | None = None) -> dict[str, Any]:
    """The conversation's figures: the tally's (the same ones ``stats`` reports) and the
    provider's usage summed, with the costs estimated from the series (or given)."""
    modes = tally.get("modes") or {}
    read = int(tally.get("cache_read_tokens", 0))
    written = int(tally.get("cache_write_tokens", 0))
    uncached = int(tally.get("input_tokens", 0))
    last = tally.get("last_usage") or {}
    last_total = sum(int(last.get(k, 0)) for k in
                     ("input_tokens", "cache_read_tokens", "cache_write_tokens"))
    compared = tally.get("compared_bytes", 0)
    return {
        "session": tally.get("session"), "agent": tally.get("agent") or tally.get("api"),
        "api": tally.get("api"), "model": tally.get("model"),
        "first_seen": tally.get("first_seen"), "last_request": tally.get("updated"),
        "requests": int(tally.get("requests", 0)),
        "paged": sum(int(n) for m, n in modes.items() if m not in NOT_PAGED),
        "within_budget": int(modes.get("within_budget", 0)),
        "failed_open": int(tally.get("failed_open", 0)),
        "last_fail_open": tally.get("last_fail_open"),
        "cut_advances": int(tally.get("cut_advances", 0)),
        "tokens_sent": int(tally.get("sent_tokens", 0)),
        "tokens_full": int(tally.get("full_tokens", 0)),
        "last_tokens_sent": tally.get("last_sent_tokens"),
        "last_tokens_full": tally.get("last_full_tokens"),
        "budget_tokens": tally.get("budget_tokens"),
        "prefix_share": round(tally.get("prefix_bytes", 0) / compared, 4) if compared else None,
        "input_tokens": uncached, "cache_read_tokens": read, "cache_write_tokens": written,
        "cache_read_share": round(read / (uncached + read + written), 4)
        if uncached + read + written else None,
        "last_cache_read_share": round(int(last.get("cache_read_tokens", 0)) / last_total, 4)
        if last_total else None,
        "cost": cost if cost is not None else costs(series or []),
    }


def _point(r: dict[str, Any]) -> dict[str, Any]:
    usage = r.get("usage") or {}
    return {"n": r["n"], "t": r.get("t"), "mode": r.get("mode"), "sent": r.get("sent"),
            "full": r.get("full"), "budget": r.get("budget"),
            "advanced": bool(r.get("advanced")), "evicted": r.get("evicted"),
            "distilled": r.get("distilled", 0), "failed": r.get("failed"),
            "input_tokens": usage.get("input_tokens"),
            "cache_read_tokens": usage.get("cache_read_tokens"),
            "cache_write_tokens": usage.get("cache_write_tokens")}


PRICES = Prices()


def costs(series: list[dict[str, Any]], prices: Prices = PRICES) -> dict[str, Any]:
    """Estimated input cost, in uncached-token units (characters/4 of the bodies, a prompt
    cache at Anthropic's list-price ratios): what was sent, sending the full history every
    time, and Claude Code's compaction (paging/replay_cost.py, as ``replay`` costs it). Each
    request of the window reuses the previous one as a prefix unless the cut advanced or it
    failed open; the full history always extends the previous request."""
    window, full = [], []
    grown = []
    before = 0.0
    for r in series:
        sent, whole = float(r.get("sent") or 0), float(r.get("full") or 0)
        previous = window[-1] if window else None
        reused = previous is not None and not r.get("advanced") and not r.get("failed") \
            and sent >= previous.tokens
        window.append(sent_after(previous, sent, previous.tokens if reused else 0.0,
                                 None if reused else "cut"))
        full.append(sent_after(full[-1] if full else None, whole,
                               min(full[-1].tokens, whole) if full else 0.0))
        grown.append(max(0.0, whole - before))
        before = max(before, whole)
    compacted = compaction(grown, list(range(1, len(grown) + 1)), lambda i: True, Compaction())
    out = {name: round(totals(sent, prices).cost)
           for name, sent in (("sent", window), ("full", full), ("compaction", compacted))}
    return out


# --- the ledger: turns out of the window, recovery calls ----------------------------------------

SHELL_WORDS = ("context-paging search", "context-paging browse", "context-paging show",
               "context-paging output", "context-paging recall")


def turns_out(navigator: Any, frontier: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The visible turns up to and including the cut's last evicted one, the newest first."""
    key = ((frontier or {}).get("last_evicted") or {}).get("history_id")
    last = navigator.position.get(key) if key else None
    if last is None:
        return []
    first = max(0, last + 1 - TURNS_SHOWN)
    return [navigator.reference(i) for i in range(last, first - 1, -1)]


def recovery_calls(navigator: Any) -> list[dict[str, Any]]:
    """Every recovery call the model made (a tool of this server, or its command in a shell),
    with whether it returned something."""
    from context_paging.index.history import content_text, is_recovery_tool

    found = []
    for item in navigator.raw:
        if item.kind != "model_turn":
            continue
        for call in item.message.tool_calls:
            arguments = call.arguments
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            shell = any(word in text for word in SHELL_WORDS)
            if not (is_recovery_tool(call.name) or shell):
                continue
            result = item.result_for(call.id)
            output = content_text(result.content) if result is not None else ""
            found.append({
                "history_id": item.history_id, "timestamp": item.timestamp,
                "tool": call.name, "arguments": text[:500],
                "answered": result is not None,
                "returned": bool(output.strip()) and not (result and result.is_error),
                "error": bool(result and result.is_error),
                "result_preview": output[:300]})
    return found
