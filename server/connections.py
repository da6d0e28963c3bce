"""How the proxy's HTTP server treats connections: header deadline, idle timeout, a limit.

uvicorn closes a keep-alive connection that stays idle after a reply, but a connection that
opens and sends nothing, or half a request line, stays open for ever; a few hundred of them use
up the process's file descriptors and every agent request fails. :class:`HeaderDeadline` gives
each request's head (request line and headers) a fixed time to arrive from its first byte (or
from the connection's opening), however slowly it trickles in.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("context_paging")

HEADER_TIMEOUT = 10.0  # seconds for a request's head to arrive
KEEP_ALIVE_TIMEOUT = 15  # seconds an idle connection stays open after a reply
CONCURRENCY_LIMIT = 200  # connections at once; above it requests are answered 503
BACKLOG = 128


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for every request head."""

    header_timeout = HEADER_TIMEOUT

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm()  # the next request's head starts arriving
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

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


def deadline_protocol(seconds: float) -> type[HeaderDeadline]:
    """The protocol class with another header deadline (tests use a short one)."""
    if seconds == HEADER_TIMEOUT:
        return HeaderDeadline
    return type("HeaderDeadline", (HeaderDeadline,), {"header_timeout": seconds})


class _QuietBreaks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _is_break(record.exc_info[1]))


def _is_break(exc: BaseException | None) -> bool:
    from context_paging.server.proxy import UpstreamBroken

    if isinstance(exc, BaseExceptionGroup):
        return all(_is_break(e) for e in exc.exceptions)
    return isinstance(exc, UpstreamBroken)


_QUIET = _QuietBreaks()


def quiet_upstream_breaks() -> None:
    """Drop uvicorn's "Exception in ASGI application" record for a reply the provider broke
    off: the proxy has logged its one line, and the server closes the agent's connection."""
    logger = logging.getLogger("uvicorn.error")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)
