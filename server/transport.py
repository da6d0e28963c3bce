"""``serve`` over stdio, with an answer for every request line.

The SDK's stdio transport validates each line with pydantic. A line it cannot read — a lone
UTF-16 surrogate escape (``"\\ud800"``, a JavaScript host cutting text inside an emoji), arguments
nested deeper than the JSON parser allows, or no JSON at all — becomes an exception that the
server logs at debug level and otherwise drops, so the client waits forever. Two layers around
the SDK's own transport close that gap:

* :class:`_Stdin` hands the SDK one line at a time and remembers it. A line with a lone
  surrogate escape is repaired first (each lone surrogate becomes U+FFFD, as session files are
  read), so the request is served; that costs a substring search per line, a regex scan only
  for a line with a surrogate escape, and a re-parse only for one with a lone surrogate.
* :class:`_Answering` sits on the SDK's read stream. When the SDK reports a line it could not
  read, it answers that line's request id (found with Python's parser, or by a scan of the
  line's start) with a JSON-RPC error, and logs one warning line.
* A line over ``paging.max_request_bytes`` is never given to the SDK (parsing and validating
  it would cost several times its size): it is answered ``REQUEST_TOO_LARGE`` (a tool error
  for ``tools/call``, else a JSON-RPC error), its id found at the line's start or end.

The SDK reads the next line only after the previous item was taken from the stream, so "the
line that failed" is always the last one :class:`_Stdin` handed out.

A response is written to JSON by :class:`_Predumping` as it is sent, through orjson where that
gives the SDK's very bytes (the SDK's pydantic dump took 2.2 ms of a select_context reply).

Replies go out through :class:`_Stdout`: one worker-thread hop per message (write and flush
together), into a pipe widened to 1 MiB so a select_context window of a few hundred KB does
not cross in 64 KiB pieces, each waiting for the client (bench/stdio_trace.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import TextIOWrapper
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: the SDK's own stdout handling
    fcntl = None  # type: ignore[assignment]

import anyio
import mcp_types as types
from context_paging.index.canonical import orjson
from context_paging.index.jsonl import clean_text
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

log = logging.getLogger("context_paging")

# A lone surrogate escape: a high one not followed by a low one, or a low one not preceded by
# a high one. Valid pairs (every emoji from a client writing ASCII JSON) do not match, so only
# the rare damaged line pays for a second parse.
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD]")
_ID = re.compile(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
# Where a request's own id sits in a line too large to parse: first after "jsonrpc" (Python
# clients) or last before the closing brace (TypeScript clients spread the request first).
_HEAD_ID = re.compile(r'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"[^"\\]*")')
_TAIL_ID = re.compile(r'"id"\s*:\s*(-?\d+|"[^"\\]*")\s*\}\s*$')
_TOOLS_CALL = re.compile(r'"method"\s*:\s*"tools/call"')
_EDGE = 4096


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _clean(v) for k, v in value.items()}
    return value


def repair_line(line: str) -> tuple[str, bool]:
    """The line with lone surrogates replaced by U+FFFD, and whether anything was replaced."""
    # Every surrogate escape starts "\ud" or "\uD": a search for just that rules out almost
    # every line (7 ms on 15 MB), where the full pattern (its lookbehind tried at each position)
    # took 0.44–0.8 s on a 15 MB request and 1.4 ms on a 52 KB one (bench/stdio_cost.py).
    if not _SURROGATE_ESCAPE.search(line) or not _LONE_SURROGATE.search(line):
        return line, False
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return line, False  # the SDK reports it, and _Answering answers it
    repaired = _clean(value)
    if repaired == value:
        return line, False  # only valid pairs
    return json.dumps(repaired, ensure_ascii=False) + "\n", True


def request_id(line: str) -> tuple[bool, int | str | None]:
    """Whether the line is a request (it has an id), and the id."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        ident = value.get("id")
        if isinstance(ident, int | str) and not isinstance(ident, bool):
            return True, ident
        return "id" in value, None
    # Too deep for Python's parser too, or not JSON: look for a top-level-looking id. A wrong
    # guess only answers an id the client is not waiting for.
    match = _ID.search(line[:4096])
    if match is None:
        return value is None, None
    try:
        return True, json.loads(match.group(1))
    except ValueError:
        return True, None


@dataclass(frozen=True, slots=True)
class Oversize:
    """A request line over the size limit, as much as can be told without parsing it."""

    size: int
    ident: int | str | None
    tool_call: bool


def oversize(line: str, limit: int) -> Oversize | None:
    """The line's facts when it is over ``limit`` bytes of UTF-8, else None."""
    if len(line) <= limit // 4:
        return None  # no line this short can reach the limit (4 bytes per character at most)
    size = len(line) if line.isascii() else len(line.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return None
    head, tail = line[:_EDGE], line[-_EDGE:]
    found = _HEAD_ID.search(head) or _TAIL_ID.search(tail)
    ident = json.loads(found.group(1)) if found else None
    return Oversize(size, ident, bool(_TOOLS_CALL.search(head) or _TOOLS_CALL.search(tail)))


class _Stdin:
    """The process's stdin as text lines, the last line remembered, surrogates repaired, a line
    over the size limit withheld (the SDK gets an empty line instead, which it reports as
    unreadable, and :class:`_Answering` answers from :attr:`oversize`)."""

    def __init__(self, limit: int) -> None:
        self._file = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8",
                                                   errors="replace"))
        self.limit = limit
        self.last = ""
        self.oversize: Oversize | None = None
        self.on_line: Callable[[], None] | None = None  # a request is in: idle work stops

    def __aiter__(self) -> _Stdin:
        return self

    async def __anext__(self) -> str:
        line = await self._file.readline()
        if not line:
            raise StopAsyncIteration
        if self.on_line is not None:
            self.on_line()
        self.oversize = oversize(line, self.limit)
        if self.oversize is not None:
            self.last = ""
            return "\n"  # parsing it would cost many times its size; never read
        line, repaired = repair_line(line)
        if repaired:
            log.warning("request held lone UTF-16 surrogates; they were replaced by U+FFFD")
        self.last = line
        return line


class _Wrapped:
    """A stream of the SDK's wrapped by one of ours: opening and closing go to the inner one."""

    _inner: Any

    async def __aenter__(self) -> Any:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._inner.__aexit__(*exc_info)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()


class _Answering(_Wrapped):
    """The SDK's read stream, with an error reply for every line it could not read."""

    def __init__(self, inner: Any, write_stream: Any, stdin: _Stdin) -> None:
        self._inner, self._write, self._stdin = inner, write_stream, stdin

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    def __aiter__(self) -> _Answering:
        return self

    async def __anext__(self) -> Any:
        while True:
            item = await self._inner.__anext__()
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    async def _answer(self, exc: Exception) -> None:
        if self._stdin.oversize is not None:
            await self._refuse(self._stdin.oversize)
            return
        line = self._stdin.last
        is_request, ident = request_id(line)
        parsed = _parses(line)
        reason = ("not a valid JSON-RPC message (nested too deeply, or a wrong field)" if parsed
                  else "not valid JSON, or nested too deeply to read")
        log.warning("could not read a request line (%d characters, id %r): %s; answered with "
                    "an error", len(line), ident, reason)
        if not is_request:
            return  # a notification or garbage without an id: nothing to answer
        code = types.INVALID_REQUEST if parsed else types.PARSE_ERROR
        error = types.JSONRPCError(jsonrpc="2.0", id=ident, error=types.ErrorData(
            code=code, message=f"request could not be read: {reason} ({str(exc)[:200]})"))
        await self._write.send(SessionMessage(error))

    async def _refuse(self, big: Oversize) -> None:
        limit = self._stdin.limit
        text = (f"REQUEST_TOO_LARGE: the request is {big.size:,} bytes; the limit is {limit:,} "
                "(paging.max_request_bytes: config.toml [paging], "
                "CONTEXT_PAGING_PAGING_MAX_REQUEST_BYTES or --set paging.max_request_bytes=N). "
                "Send the conversation without what the model no longer needs (old images, "
                "long outputs), or raise the limit.")
        log.warning("refused a request line of %d bytes (id %r): over max_request_bytes %d",
                    big.size, big.ident, limit)
        message: types.JSONRPCResponse | types.JSONRPCError
        if big.tool_call and big.ident is not None:
            result = types.CallToolResult(is_error=True,
                                          content=[types.TextContent(type="text", text=text)])
            message = types.JSONRPCResponse(jsonrpc="2.0", id=big.ident,
                                            result=result.model_dump(by_alias=True,
                                                                     exclude_none=True))
        else:
            message = types.JSONRPCError(jsonrpc="2.0", id=big.ident, error=types.ErrorData(
                code=types.INVALID_REQUEST, message=text))
        await self._write.send(SessionMessage(message))


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


# Linux's F_SETPIPE_SZ (not in Python's fcntl before 3.10 on every build): a pipe of 64 KiB
# makes a reply of a few hundred KB (a select_context window, with its text copy) go out 64 KiB
# at a time, the writer waiting for the client to read each piece. 1 MiB is the default
# /proc/sys/fs/pipe-max-size, so no privilege is needed.
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031) if fcntl is not None else None
PIPE_BYTES = 1 << 20


def _widen_pipe(fd: int) -> None:
    """Best effort: a file, a terminal or an old kernel keeps what it has."""
    if _F_SETPIPE_SZ is None:
        return
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass


class _Stdout:
    """The wire's end of stdout for the SDK's writer. Each message is encoded, written and
    flushed in one worker-thread hop (the SDK's file wrapper takes two: write, then flush), on
    a private duplicate of fd 1. While serving, fd 1 itself points at stderr, so a stray print
    (ours, a library's, a child process's) cannot corrupt the stream, as the SDK's
    ``stdio_server`` arranges when it opens stdout itself."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "wb", closefd=False)
        self.after_write: Callable[[], None] | None = None  # the server's spare-time kick

    async def write(self, text: str) -> None:
        await anyio.to_thread.run_sync(self._send, text)

    def _send(self, text: str) -> None:
        self._file.write(text.encode("utf-8"))
        self._file.flush()
        if self.after_write is not None:
            self.after_write()  # the reply is out: idle work may start (server/idle.py)

    async def flush(self) -> None:
        return None  # every write flushed already


@contextmanager
def _wire_stdout() -> Iterator[_Stdout | None]:
    """A :class:`_Stdout` on a private duplicate of fd 1, fd 1 diverted to stderr meanwhile;
    None where descriptors cannot be moved (then the SDK opens stdout its own way)."""
    if fcntl is None:
        yield None
        return
    try:
        sys.stdout.flush()
        private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    except (OSError, ValueError):
        yield None
        return
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(private)
        yield None
        return
    _widen_pipe(private)
    try:
        yield _Stdout(private)
    finally:
        try:
            os.dup2(private, 1)
        finally:
            os.close(private)


class _Dumped:
    """A JSON-RPC message already written as JSON: all the SDK's stdout writer asks of it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def model_dump_json(self, **_: Any) -> str:
        return self.text


_RESPONSE_FIELDS = frozenset({"jsonrpc", "id", "result"})
# Anything orjson writes its own way (dates, dataclasses, subclasses of str, int, dict, list)
# goes to ``_refuse`` and so to the SDK's dump. What is left is what a ``mode="json"`` dump
# holds, which orjson writes as pydantic does, floats included (shortest round trip, NaN and
# infinities as null; tests/test_transport_dump.py); it raises on the rest (a non-str key, an
# integer beyond 64 bits, a lone surrogate). No walk of the value first: that took as long
# as the dump.
_PASS_THROUGH = (0 if orjson is None else orjson.OPT_PASSTHROUGH_DATETIME
                 | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS)


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def dump_response(message: Any) -> str | None:
    """A response's JSON text, the same bytes as the SDK's
    ``model_dump_json(by_alias=True, exclude_unset=True)``, or None where orjson might differ
    (a non-str key, an integer beyond 64 bits, a lone surrogate, an object that is not plain
    JSON, a message that is not a response)."""
    if orjson is None or type(message) is not types.JSONRPCResponse:
        return None
    if message.model_fields_set != _RESPONSE_FIELDS or type(message.id) not in (int, str):
        return None
    try:
        return orjson.dumps({"jsonrpc": message.jsonrpc, "id": message.id,
                             "result": message.result},
                            default=_refuse, option=_PASS_THROUGH).decode()
    except TypeError:
        return None


class _Predumping(_Wrapped):
    """The server's write stream, each response handed on as its JSON text (:func:`dump_response`);
    anything else goes as it is, for the SDK to dump."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: SessionMessage) -> None:
        text = dump_response(item.message)
        if text is not None:
            item = SessionMessage(_Dumped(text), metadata=item.metadata)  # type: ignore[arg-type]
        await self._inner.send(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def serve_stdio(server: MCPServer, max_request_bytes: int) -> None:
    """Run ``server`` on stdin/stdout (what ``MCPServer.run()`` does, with the layers above)."""
    stdin = _Stdin(max_request_bytes)
    _widen_pipe(0)  # a large request comes in with fewer wake-ups of the reading thread
    with _wire_stdout() as stdout:
        idler = getattr(server, "idler", None)
        if stdout is not None and idler is not None:
            stdout.after_write = idler.kick
            stdin.on_line = idler.arrived
            idler.hooked = True
        async with stdio_server(stdin=stdin, stdout=stdout) as (  # type: ignore[arg-type]
                read_stream, write_stream):
            lowlevel = server._lowlevel_server  # the SDK's own run_stdio_async does the same
            await lowlevel.run(_Answering(read_stream, write_stream, stdin),
                               _Predumping(write_stream),  # type: ignore[arg-type]
                               lowlevel.create_initialization_options())
