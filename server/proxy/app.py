"""``context-paging proxy``: a local model-API gateway that sends the provider the window.

Agents that cannot call ``select_context`` (Claude Code, Codex, Pi, Gemini CLI, OpenCode) point
their model API at this server. For a conversation request (Anthropic ``POST /v1/messages``,
OpenAI ``POST /v1/responses`` and ``POST /v1/chat/completions``, Gemini ``generateContent`` and
``streamGenerateContent``, its turns read by server/proxy/gemini.py; server/proxy/wire.py) the
proxy runs the request's conversation through the same pipeline as the ``select_context`` tool —
the ledger records it under a session per conversation, the window replaces the conversation
array — and forwards the rest as received: other fields byte for byte, every header
(authentication included), the query string. Every other path (``count_tokens``, model lists,
telemetry) is forwarded untouched.

Replies stream back as they arrive, raw bytes, whatever the status: a provider's 429 or 529 and
its body reach the agent as the provider sent them. The exception is a conversation the proxy
offers its own recovery tools to (the agent has none; server/proxy/inband.py): its replies are
read as they pass, and calls of those tools are answered in band (server/proxy/answer.py).

It fails open: an unknown body shape, a compressed body, disabled paging or any internal error
sends the original bytes and logs one line on stderr. Headers are never logged or stored.

Limits and concurrency (docs/proxy.md, "Limits, concurrency and large bodies"): a body over
``paging.max_request_bytes`` is streamed to the provider as it arrives, unpaged and unrecorded;
with paging disabled every body is. Paging runs on a worker thread; requests of different
conversations are paged at once (``History.select_context`` serializes each conversation's own),
and a body that resends an earlier one is read from where it differs (server/proxy/resent.py).
"""

from __future__ import annotations

import functools
import logging
import shlex
import socket
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import httpx2 as httpx
from context_paging.index.home.proxied import ProxyLog
from context_paging.paging.notice import inband_notice, shell_notice
from context_paging.paging.resident import is_resident
from context_paging.server.endpoints import (
    DEFAULT_ANTHROPIC,
    DEFAULT_GEMINI,
    DEFAULT_OPENAI,
    HEALTH_PATH,
    VIEW_PREFIX,
)
from context_paging.server.errors import failure
from context_paging.server.idle import Idler
from context_paging.server.proxy import answer, gemini, inband, wire
from context_paging.server.proxy.conversations import Chains
from context_paging.server.proxy.resent import Resent, same_objects
from context_paging.server.setup import clients
from starlette.background import BackgroundTask, BackgroundTasks
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

log = logging.getLogger("context_paging")

# Hop-by-hop headers (RFC 9110, section 7.6.1) and the ones the HTTP client recomputes.
_HOP = frozenset({b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding",
                  b"te", b"trailer", b"upgrade", b"proxy-connection", b"proxy-authorization"})
_HOP_REPLY = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer",
                        b"upgrade", b"proxy-connection"})
PREVIOUS_BODIES = 32
MAX_BODY = 32 * 1024 * 1024  # paging.max_request_bytes' default (server/config.py)


@dataclass(frozen=True)
class Upstreams:
    anthropic: str = DEFAULT_ANTHROPIC
    openai: str = DEFAULT_OPENAI
    gemini: str = DEFAULT_GEMINI

    def for_request(self, path: str, headers: Mapping[str, str]) -> str:
        """Anthropic for its paths and its headers, Gemini for its paths (``/v1beta/…``) and
        its key header, OpenAI otherwise."""
        if (path.startswith(("/v1/messages", "/v1/complete", "/api/"))
                or "anthropic-version" in headers or "x-api-key" in headers):
            return self.anthropic.rstrip("/")
        if (path.startswith(("/v1beta/", "/upload/v1beta/")) or "x-goog-api-key" in headers
                or ("/models/" in path and ":" in path.rsplit("/", 1)[-1])):
            return self.gemini.rstrip("/")
        return self.openai.rstrip("/")


Select = Callable[..., dict[str, Any]]


class Proxy:
    """The ASGI app. ``select`` is ``History.select_context`` (one pipeline for tool and proxy);
    it runs in a worker thread, calls of different conversations at once. ``paging`` false:
    every request passes through unread. ``max_body``: larger bodies are streamed through."""

    def __init__(self, select: Select, upstreams: Upstreams, proxy_log: ProxyLog | None = None,
                 client: httpx.AsyncClient | None = None,
                 idle: Callable[[float, Callable[[], bool]], bool] | None = None,
                 paging: bool = True, max_body: int = MAX_BODY,
                 recovery: inband.InBand | None = None) -> None:
        self.select = select
        # the recovery tools offered and answered in band (server/proxy/inband.py); without
        # them, nothing is offered and each conversation's notice is still worded once
        self.inband = recovery if recovery is not None else inband.InBand(None, None, "never")
        self.upstreams = upstreams
        self.log = proxy_log
        self.paging = paging
        self.max_body = max_body
        self.bodies = Resent()
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=30.0), follow_redirects=False, trust_env=False,
            transport=httpx.AsyncHTTPTransport(
                trust_env=False, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]))
        # ``History.idle``: spare-time counting after each paged request, while the provider
        # answers (server/idle.py); it stops at its next count when a request comes, and runs
        # only while no conversation is being paged (``History.idle`` asks its gate).
        self._idler = None if idle is None else Idler(idle, threading.Lock())
        self._log_lock = threading.Lock()
        self._previous: OrderedDict[str, bytes] = OrderedDict()
        # per conversation: the provider's usage for the latest reply, which the next request
        # contains; select_context calibrates its estimate with it
        self._usage: OrderedDict[str, dict[str, int]] = OrderedDict()
        # conversations that carry no session id (server/proxy/conversations.py)
        self._chains = Chains()
        # per conversation: its latest messages and which resident one names the recovery tools
        self._marks: OrderedDict[str, Marks] = OrderedDict()
        self._marks_lock = threading.Lock()
        # the live view's routes (server/proxy/view.py); read-only, over the home's files
        self.view: Any = _no_view

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send, self.client)
            return
        if scope["type"] == "websocket":  # a server with a WebSocket library hands it over
            await _refuse_upgrade(send, scope)
            return
        if scope["type"] != "http":
            return
        if _websocket_upgrade(scope):
            await _refuse_upgrade(send)
            return
        if scope["path"].startswith(VIEW_PREFIX) or scope["path"] == VIEW_PREFIX.rstrip("/"):
            await self.view(scope, receive, send)  # the live view (server/proxy/view.py)
            return
        request = Request(scope, receive)
        if request.url.path == HEALTH_PATH:  # the one path the proxy answers itself (doctor)
            await Response(wire.dumps({"service": "context-paging proxy"}).encode(),
                           media_type="application/json")(scope, receive, send)
            return
        api = wire.route(request.method, request.url.path) if self.paging else None
        body = await self._body(request, api)
        note, session, turn = None, None, None
        if api is not None and isinstance(body, bytes):
            body, note, session, turn = await anyio.to_thread.run_sync(
                self._page, api, body, request.headers, request.url.path)
        numbered: list[int] = []  # the request's number in its conversation's series
        async with anyio.create_task_group() as group:
            if note is not None:  # the tally is written while the provider thinks
                group.start_soon(anyio.to_thread.run_sync, note, numbered)
            tap = (session, api, numbered) if api is not None and session is not None else None
            response = await self._forward(request, body, tap, turn)
        await response(scope, receive, send)

    async def _body(self, request: Request,
                    api: wire.Api | None) -> bytes | AsyncIterator[bytes]:
        """The body read whole when it is to be paged and within ``max_body``; else the body
        as it arrives (read no further than ``max_body``: what was read goes first)."""
        if api is None:
            bodiless = not ({"content-length", "transfer-encoding"} & set(request.headers))
            return b"" if bodiless else request.stream()
        declared = request.headers.get("content-length", "")
        chunks: list[bytes] = []
        stream = request.stream()
        if not (declared.isdigit() and int(declared) > self.max_body):
            size = 0
            async for chunk in stream:
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_body:
                    break
            else:
                return b"".join(chunks)
        log.warning("proxy: %s body over paging.max_request_bytes (%d bytes); streamed through "
                    "unpaged and unrecorded", api.name, self.max_body)
        return _joined(chunks, stream)

    # --- the conversation -------------------------------------------------------------------

    def _page(self, api: wire.Api, raw: bytes, headers: Mapping[str, str], path: str = ""
              ) -> tuple[bytes, Callable[[], None] | None, str | None, answer.Turn | None]:
        """The body to send (the window in place of the conversation, or the original bytes),
        the stats note to write for it, the conversation's ledger session, and the turn whose
        reply the proxy answers in band (None: the reply is relayed as it comes)."""
        if headers.get("content-encoding", "identity") != "identity":
            log.warning("proxy: %s body is %s-encoded; forwarded unchanged", api.name,
                        headers.get("content-encoding"))
            return raw, None, None, None
        try:
            if self._idler is not None:
                self._idler.enter()  # idle work under way stops at its next count
            try:
                paged = self._paged(api, raw, headers, path)
            finally:
                if self._idler is not None:
                    self._idler.leave()
            if self._idler is not None:
                self._idler.due()
            return paged
        except Exception as exc:  # fail open: the agent must never fail because of the proxy
            failed = failure(exc)  # the tools' translation (server/errors.py)
            if failed is not None and failed.code == wire.ShapeError.code:
                log.warning("proxy: %s request of an unknown shape (%s); forwarded unchanged",
                            api.name, exc)
            else:
                log.warning("proxy: %s request forwarded unchanged after an internal error: "
                            "%s: %s", api.name, failed.code if failed else type(exc).__name__,
                            (failed.message if failed else str(exc))[:200])
        return raw, None, None, None

    def _paged(self, api: wire.Api, raw: bytes, headers: Mapping[str, str], path: str = ""
               ) -> tuple[bytes, Callable[[], None] | None, str, answer.Turn | None]:
        body = self.bodies.read(raw, api.field)  # only what follows an earlier body's bytes
        value = body.value
        received = conversation = value[api.field]
        session = self._conversation(api, body, headers)
        self.bodies.remember(session, body)  # the next body of it is read from where it differs
        system = value.get("system") if api is wire.ANTHROPIC else value.get("instructions")
        tools = value.get("tools") if isinstance(value.get("tools"), list) else None
        recovery = self._recovery_tools(session, api, body)
        offered = self.inband.offers(session, api, value, recovery)
        conversation = self.inband.expand(session, api, received)  # hidden exchanges in place
        if offered:  # the offered tools count as resident input
            tools = [*(tools or ()), *inband.offered_values(api.name)]
        model = value.get("model") if isinstance(value.get("model"), str) else None
        pinned = _pinned_context(conversation) if api is wire.ANTHROPIC else []
        turns = None
        if api is wire.GEMINI:  # paged in the Anthropic shape, written back as turns
            turns = gemini.Turns(conversation)
            conversation, pinned = turns.messages, turns.pinned()
            system, tools = gemini.system_of(value), gemini.tools_of(value)
            if offered:
                offer = gemini.tools_of({"tools": list(inband.offered_values(api.name))})
                tools = [*(tools or ()), *(offer or ())]
            model = gemini.model_of(path)
        if pinned:  # counted as resident input: it stays in every window
            system = ([{"type": "text", "text": system}] if isinstance(system, str)
                      else list(system or [])) + pinned
        agent = wire.agent_name(api, headers)
        try:
            reply = self.select(session, conversation, fmt=api.fmt, system=system, tools=tools,
                                model=model, usage=self._usage.get(session))
        except Exception as exc:
            self._failed_open(session, api, exc, raw, agent, model)
            raise  # forwarded unchanged by the caller, with its log line
        window = reply["messages"]
        read = received if turns is None else turns.messages  # what a kept window holds
        unchanged = ((turns is None or turns.contents == received)  # no exchange put back
                     and len(window) == len(read)
                     and all(a is b for a, b in zip(window, read, strict=True)))
        if pinned and _holds(window, pinned[0]):
            pinned = []  # the first message is still in the window, context and all
        notice = reply.get("notice")
        # worded once per conversation, at its first notice (docs/proxy.md, "The notice's
        # wording"): tools that show up or go away later never re-word a cached notice
        wording = self.inband.worded(session, offered, recovery) if notice else None
        text = notice
        if wording == "inband":  # the tools the proxy answers, for this conversation
            text = inband_notice(notice)
        elif wording == "shell":  # Pi, or no MCP server
            text = shell_notice(notice, f"ledger:{session}", shell_command())
        named = None  # the notice as the model reads it (the live view shows it)
        if notice:  # the proxy's own tools need no session; the MCP server's and the CLI's do
            named = (text if wording == "inband"
                     else f"{text}\nSession for those tools: \"ledger:{session}\".")
        spliced = None if unchanged else _name_session(window, notice, named, pinned)
        if spliced is not None and turns is not None:
            spliced = turns.back(spliced)
        out, bracket = wire.splice_at(
            body, api.field, spliced, inband.offered_bytes(api.name) if offered else b"")
        turn = None
        if offered:
            turn = answer.Turn(self.inband, session, api, out, bracket, len(received),
                               inband.anchor(received[-1]) if received else "",
                               inband.tool_names(api, value))
        if self.log is None:
            return out, None, session, turn
        previous = self._previous.pop(session, None)
        self._previous[session] = out
        while len(self._previous) > PREVIOUS_BODIES:
            self._previous.popitem(last=False)
        proxy_log = self.log

        def note(numbered: list[int]) -> None:
            try:
                with self._log_lock:
                    number = proxy_log.record(session, api.name, reply, sent=out, full=raw,
                                              previous=previous, agent=agent, model=model,
                                              notice=named)
                numbered.append(number)  # the reply's usage is kept under this number
            except Exception as exc:  # stats are best effort; the request goes on
                log.warning("proxy: stats not written: %s: %s", type(exc).__name__, exc)

        return out, note, session, turn

    def _recovery_tools(self, session: str, api: wire.Api, body: wire.Body) -> bool:
        """:func:`has_recovery_tools`, looking only at the resident items that are new since
        the conversation's previous request."""
        if _tools_marked(body):
            return True
        with self._marks_lock:
            known = self._marks.get(session, ([], None))
        found = marked_resident(api, body, known)
        with self._marks_lock:
            self._marks.pop(session, None)
            self._marks[session] = found
            while len(self._marks) > PREVIOUS_BODIES:
                self._marks.popitem(last=False)
        return found[1] is not None

    def _failed_open(self, session: str, api: wire.Api, exc: Exception, raw: bytes,
                     agent: str | None = None, model: str | None = None) -> None:
        """Count a request the window could not be made for, with why (``doctor``)."""
        if self.log is None:
            return
        failed = failure(exc)
        reason = f"{failed.code}: {failed.message}" if failed else f"{type(exc).__name__}: {exc}"
        try:
            with self._log_lock:
                self.log.record_failure(session, api.name, reason, raw, agent, model)
        except Exception as error:  # stats are best effort
            log.warning("proxy: stats not written: %s: %s", type(error).__name__, error)

    def _conversation(self, api: wire.Api, body: wire.Body, headers: Mapping[str, str]) -> str:
        """The ledger session: the conversation whose chain of messages this request extends,
        among those of its key (the agent's session id and the opening)."""
        key = wire.conversation_key(api, body.value, headers)
        identified = wire.agent_session(api, body.value, headers) is not None
        return self._chains.key(body, key, api.field, api.fmt, identified)

    # --- forwarding -------------------------------------------------------------------------

    async def _forward(self, request: Request, body: bytes | AsyncIterator[bytes],
                       tap: tuple[str, wire.Api, list[int]] | None = None,
                       turn: answer.Turn | None = None) -> Response:
        base = self.upstreams.for_request(request.url.path, request.headers)
        headers = _forwarded_headers(request.headers.raw)
        if turn is not None:  # a reply the proxy may answer in band must be readable
            headers = answer.readable(headers)
        if not isinstance(body, bytes):  # streamed: the length it declared, else chunked
            headers += [(k, v) for k, v in request.headers.raw if k.lower() == b"content-length"]
        upstream = httpx.Request(request.method, base + _target(request.scope),
                                 headers=headers, content=body)
        try:  # sent as built: no client defaults (Accept, Accept-Encoding, User-Agent) added
            reply = await self.client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            log.warning("proxy: upstream %s unreachable: %s", base, type(exc).__name__)
            return Response(
                wire.dumps({"type": "error", "error": {
                    "type": "api_error", "message": f"context-paging proxy could not reach "
                    f"{base}: {type(exc).__name__}"}}).encode(),
                status_code=502, media_type="application/json")
        if turn is not None and reply.status_code == 200 and reply.headers.get(
                "content-encoding", "").lower() in answer.READABLE:
            return await self._answered(request, reply, turn, base, headers, tap)
        chunks = _relayed(reply.aiter_raw(), base)
        after = BackgroundTasks([BackgroundTask(reply.aclose)])
        if tap is not None and reply.status_code == 200 and not reply.headers.get(
                "content-encoding"):
            streaming = reply.headers.get("content-type", "").startswith("text/event-stream")
            usage_tap = wire.UsageTap(tap[1], streaming)
            chunks = self._tapped(chunks, tap[0], usage_tap)
            if self.log is not None:  # kept once the agent has the whole reply
                after.add_task(anyio.to_thread.run_sync, self._note_usage, tap, usage_tap)
        response = StreamingResponse(chunks, status_code=reply.status_code, background=after)
        # Raw bytes go back, so the provider's own headers (content-encoding and length
        # included) describe them exactly; only hop-by-hop headers stop here.
        response.raw_headers = [(k, v) for k, v in reply.headers.raw
                                if k.lower() not in _HOP_REPLY]
        return response

    async def _answered(self, request: Request, reply: httpx.Response, turn: answer.Turn,
                        base: str, headers: list[tuple[bytes, bytes]],
                        tap: tuple[str, wire.Api, list[int]] | None) -> Response:
        """The reply with the offered tools' calls answered in band (server/proxy/answer.py):
        read decoded, so its length and encoding headers no longer describe what goes back."""
        url = base + _target(request.scope)

        async def send(body: bytes) -> httpx.Response:
            again = httpx.Request(request.method, url, headers=headers, content=body)
            return await self.client.send(again, stream=True)

        def usage(found: dict[str, int]) -> None:
            self._remember_usage(turn.session, found)
            if tap is not None and self.log is not None:  # the request series, all rounds
                self._note_usage(tap, found)

        kept = [(k, v) for k, v in reply.headers.raw if k.lower() not in _HOP_REPLY
                and k.lower() not in (b"content-length", b"content-encoding")]
        if reply.headers.get("content-type", "").startswith("text/event-stream"):
            chunks = answer.answer_stream(turn, _relayed(reply.aiter_bytes(), base), send, usage)
            response: Response = StreamingResponse(
                self._counted(chunks, turn), status_code=200,
                background=BackgroundTask(reply.aclose))
        else:
            try:
                first = await reply.aread()
            except httpx.HTTPError as exc:
                await reply.aclose()
                raise UpstreamBroken(type(exc).__name__) from None
            await reply.aclose()
            status, body, found = await answer.answer_json(turn, first, send)
            if found:
                usage(found)
            await anyio.to_thread.run_sync(self._note_calls, turn)
            response = Response(body, status_code=status)
            if status != 200:
                kept = [(k, v) for k, v in kept if k.lower() != b"content-type"] + [
                    (b"content-type", b"application/json")]
            kept.append((b"content-length", str(len(body)).encode()))
        response.raw_headers = kept
        return response

    async def _counted(self, chunks: AsyncIterator[bytes], turn: answer.Turn
                       ) -> AsyncIterator[bytes]:
        async for chunk in chunks:
            yield chunk
        await anyio.to_thread.run_sync(self._note_calls, turn)

    def _note_calls(self, turn: answer.Turn) -> None:
        """The in-band calls of this reply in the conversation's tally (``stats``, ``doctor``)."""
        if self.log is None or not turn.calls:
            return
        try:
            with self._log_lock:
                self.log.record_inband(turn.session, turn.api.name, turn.calls)
        except Exception as exc:  # stats are best effort
            log.warning("proxy: stats not written: %s: %s", type(exc).__name__, exc)

    def _remember_usage(self, session: str, usage: dict[str, int]) -> None:
        self._usage.pop(session, None)
        self._usage[session] = usage
        while len(self._usage) > PREVIOUS_BODIES:
            self._usage.popitem(last=False)

    def _note_usage(self, tap: tuple[str, wire.Api, list[int]],
                    usage: wire.UsageTap | dict[str, int]) -> None:
        """The provider's usage for this reply, in the tally and the request series."""
        session, api, numbered = tap
        usage = usage.usage if isinstance(usage, wire.UsageTap) else usage
        if not usage or not numbered or self.log is None:
            return
        try:
            with self._log_lock:
                self.log.record_usage(session, api.name, dict(usage), numbered[0])
        except Exception as exc:  # stats are best effort
            log.warning("proxy: usage not written: %s: %s", type(exc).__name__, exc)

    async def _tapped(self, chunks: Any, session: str, tap: wire.UsageTap) -> Any:
        """The reply's chunks as they come, each forwarded before the usage tap reads it."""
        async for chunk in chunks:
            yield chunk
            try:
                tap.feed(chunk)
            except Exception:  # usage is best effort
                log.debug("usage tap failed", exc_info=True)
        usage = tap.result()
        if usage:
            self._remember_usage(session, usage)


@functools.cache
def shell_command() -> str:
    """The CLI as a command any shell runs: the console script's absolute path, or this Python
    running the module (the agent's login shell may not have the virtualenv on PATH)."""
    command, prefix = clients.server_command()
    return " ".join(shlex.quote(word) for word in (command, *prefix))


def _target(scope: Scope) -> str:
    """The request target as the agent sent it: the raw path (``%2F`` stays ``%2F``) and the
    raw query string. A target that does not start with ``/`` (``@evil.example/x``, an absolute
    URL) gets one, so what follows the provider's origin can never name another host."""
    path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    if not path.startswith("/"):
        path = "/" + path
    query = scope.get("query_string") or b""
    return path + ("?" + query.decode("latin-1") if query else "")


def _forwarded_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Every header as received, in order, duplicates kept; only hop-by-hop ones (and the
    length, which the client recomputes for a paged body) stop here."""
    return [(k, v) for k, v in raw if k.lower() not in _HOP]


class UpstreamBroken(Exception):
    """The provider's reply ended mid-body; logged once here, so the server only drops the
    agent's connection (server/proxy/connections.py keeps the server's traceback out of the log)."""


async def _relayed(chunks: Any, base: str) -> Any:
    try:
        async for chunk in chunks:
            yield chunk
    except httpx.HTTPError as exc:
        log.warning("proxy: %s broke off its reply mid-stream (%s); the agent's connection is "
                    "closed", base, type(exc).__name__)
        raise UpstreamBroken(type(exc).__name__) from None


async def _joined(first: list[bytes], rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in first:
        yield chunk
    async for chunk in rest:
        yield chunk


def _pinned_context(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code's project context: the ``<system-reminder>`` text blocks (CLAUDE.md, the
    date) that open the conversation's first user message. They are instructions, not history,
    so they travel with the notice once that message leaves the window."""
    first = conversation[0] if conversation else None
    content = first.get("content") if first and first.get("role") == "user" else None
    pinned = []
    for block in content if isinstance(content, list) else ():
        text = block.get("text") if isinstance(block, dict) else None
        if not (isinstance(text, str) and block.get("type") == "text"
                and text.lstrip().startswith("<system-reminder>")):
            break
        pinned.append(block)
    return pinned


def _holds(window: list[dict[str, Any]], block: dict[str, Any]) -> bool:
    """Whether a message near the window's start still carries this very block (the notice may
    have been put in front of the first message, which makes that message a new object)."""
    for message in window[:4]:
        content = message.get("content")
        if isinstance(content, list) and any(b is block for b in content):
            return True
    return False


# How the recovery tools show in a request: by name (Claude Code lists
# ``mcp__context-paging__search_history``), or as Codex's deferred namespace for the server
# (``mcp__context_paging``, its name normalized), listed without its tools.
_TOOL_MARKS = ("search_history", "mcp__context_paging", "mcp__context-paging")
_TOOL_BYTES = tuple(mark.encode() for mark in _TOOL_MARKS)


def has_recovery_tools(api: wire.Api, body: wire.Body) -> bool:
    """Whether the agent was given this project's recovery tools (an MCP client that has the
    server registered): in ``tools``, or in a resident item that carries tool lists (Codex's
    ``additional_tools``, its deferred tool namespaces)."""
    return _tools_marked(body) or marked_resident(api, body)[1] is not None


def _tools_marked(body: wire.Body) -> bool:
    span = body.spans.get("tools")
    return bool(span) and isinstance(body.value.get("tools"), list) and _marked(body.raw, *span)


Marks = tuple[list, int | None]


def marked_resident(api: wire.Api, body: wire.Body, known: Marks = ([], None)) -> Marks:
    """The conversation array and the index of its first resident item that names the recovery
    tools (None: no such item). ``known``: the same pair for an earlier body. While this body's
    items are that body's very objects (server/proxy/resent.py takes the values of the bytes two
    bodies share), they are those bytes, so the earlier answer holds for them and only the
    items after them are looked at."""
    items = body.value[api.field]
    objects, first = known
    same = same_objects(items, objects)
    if first is not None and first < same:
        return items, first
    for index in range(same, len(items)):
        if is_resident(items[index], api.fmt) and _marked(body.raw, *body.items[index]):
            return items, index
    return items, None


def _marked(raw: bytes, start: int, end: int) -> bool:
    part = raw[start:end]
    return any(mark in part for mark in _TOOL_BYTES)


def _name_session(window: list[dict[str, Any]], notice: str | None, named: str | None,
                  pinned: list[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The notice in the window replaced by ``named``: worded for the tools or the CLI
    commands, naming the ledger session the recovery tools take (the proxy's conversation is
    not the one the MCP server would guess), followed by the pinned context blocks. Same
    notice in, same bytes out."""
    if not notice or not named:
        return window
    out = list(window)
    for index, message in enumerate(out[:NOTICE_REACH]):
        content = message.get("content")
        if content == notice:
            if not pinned:
                out[index] = {**message, "content": named}
                return out
            content = [{"type": "text", "text": notice}]
        if isinstance(content, list):
            for k, block in enumerate(content):
                if isinstance(block, dict) and block.get("text") == notice:
                    blocks = [*content[:k], {**block, "text": named}, *pinned, *content[k + 1:]]
                    out[index] = {**message, "content": blocks}
                    return out
    return window


# The notice comes after the resident items that precede the kept messages (Codex sends a
# dozen: its tool list, developer messages, environment).
NOTICE_REACH = 64


async def _no_view(scope: Scope, receive: Receive, send: Send) -> None:
    """Where no live view is mounted (a proxy built without a home): 404."""
    await Response(b"", status_code=404)(scope, receive, send)


def _websocket_upgrade(scope: Scope) -> bool:
    return any(k == b"upgrade" and v.lower() == b"websocket" for k, v in scope["headers"])


async def _refuse_upgrade(send: Send, scope: Scope | None = None) -> None:
    """Codex tries a WebSocket before HTTP and retries a refusal for about six seconds, except
    426 Upgrade Required, after which it posts at once (measured with Codex CLI 0.171.0). The
    proxy pages HTTP requests only, so every upgrade gets that answer, without going upstream.
    ``scope``: a WebSocket scope (the server has a WebSocket library), answered through the
    ASGI denial response where the server offers it, else closed (403)."""
    body = wire.dumps({"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "context-paging proxy: WebSocket is not supported; use HTTP"}}).encode()
    kind = "http.response"
    if scope is not None:
        if "websocket.http.response" not in (scope.get("extensions") or {}):
            await send({"type": "websocket.close", "code": 1008})
            return
        kind = "websocket.http.response"
    await send({"type": f"{kind}.start", "status": 426, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": f"{kind}.body", "body": body})


async def _lifespan(receive: Receive, send: Send, client: httpx.AsyncClient) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
