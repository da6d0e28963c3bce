"""How the proxy's HTTP server treats connections: header deadline, idle timeout, a limit.

uvicorn closes a keep-alive connection that stays idle after a reply, but a connection that
opens and sends nothing, or half a request line, stays open for ever; a few hundred of them use
up the process's file descriptors and every agent request fails. :class:`HeaderDeadline` gives
each request's head (request line and headers) a fixed time to arrive from its first byte (or
from the connection's opening), however slowly it trickles in, and closes a connection whose
request body stops arriving for ``BODY_IDLE_TIMEOUT`` (unless the server itself paused reading).
It also reads the socket in larger pieces than asyncio's default (``READ_SIZE``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("context_paging")

HEADER_TIMEOUT = 10.0  # seconds for a request's head to arrive
BODY_IDLE_TIMEOUT = 30.0  # seconds without a byte of a request body still due
KEEP_ALIVE_TIMEOUT = 15  # seconds an idle connection stays open after a reply
CONCURRENCY_LIMIT = 200  # connections at once; above it requests are answered 503
BACKLOG = 128
# Bytes asked of the socket per read; asyncio's own transport asks for 256 KiB. An agent's
# request body is megabytes (the whole conversation, every request), and each piece it arrives
# in is one pass through the parser, the server's flow control and the app: a 15 MB body took
# about 60 of them and 0.9 ms per MB to receive, in 4 MiB reads 5 to 8 and 0.6 ms per MB
# (docs/performance-history.md, "The proxy"). A read takes what has arrived, up to this.
READ_SIZE = 4 << 20


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for every request head."""

    header_timeout = HEADER_TIMEOUT
    body_idle_timeout = BODY_IDLE_TIMEOUT

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        if isinstance(getattr(transport, "max_size", None), int):  # asyncio's socket transport
            transport.max_size = READ_SIZE  # (another event loop's reads as it reads)
        self._deadline: asyncio.TimerHandle | None = None
        self._body_idle: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm()  # the next request's head starts arriving
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()
        self._watch_body()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._watch_body(stop=True)
        super().connection_lost(exc)

    def _watch_body(self, stop: bool = False) -> None:
        if self._body_idle is not None:
            self._body_idle.cancel()
            self._body_idle = None
        if not stop and self.conn.their_state is h11.SEND_BODY:
            self._body_idle = self.loop.call_later(self.body_idle_timeout, self._body_stalled)

    def _body_stalled(self) -> None:
        self._body_idle = None
        if self.flow.read_paused:  # the server is not reading: not the client's stall
            self._watch_body()
        elif self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            log.warning("proxy: closed a connection whose request body stopped arriving for "
                        "%ss", self.body_idle_timeout)
            self.transport.close()

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.debug("proxy: closed a connection whose request head did not arrive in %ss",
                      self.header_timeout)
            self.transport.close()


def deadline_protocol(seconds: float, body_idle: float = BODY_IDLE_TIMEOUT) -> type[HeaderDeadline]:
    """The protocol class with other timeouts (tests use short ones)."""
    if seconds == HEADER_TIMEOUT and body_idle == BODY_IDLE_TIMEOUT:
        return HeaderDeadline
    return type("HeaderDeadline", (HeaderDeadline,),
                {"header_timeout": seconds, "body_idle_timeout": body_idle})


class _QuietBreaks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _is_break(record.exc_info[1]))


def _is_break(exc: BaseException | None) -> bool:
    """A provider's reply broken off (logged where it happened), or an agent gone before its
    request body arrived (closed above, or the agent's own choice): no traceback for either."""
    from context_paging.server.proxy.app import UpstreamBroken
    from starlette.requests import ClientDisconnect

    if isinstance(exc, BaseExceptionGroup):
        return all(_is_break(e) for e in exc.exceptions)
    return isinstance(exc, UpstreamBroken | ClientDisconnect)


_QUIET = _QuietBreaks()


def quiet_upstream_breaks() -> None:
    """Drop uvicorn's "Exception in ASGI application" record for a reply the provider broke
    off: the proxy has logged its one line, and the server closes the agent's connection."""
    logger = logging.getLogger("uvicorn.error")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)
