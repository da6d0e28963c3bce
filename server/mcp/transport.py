"""``serve`` over stdio, with an answer for every request line.

The SDK's stdio transport validates each line with pydantic. A line it cannot read — a lone
UTF-16 surrogate escape (``"\\ud800"``, a JavaScript host cutting text inside an emoji), arguments
nested deeper than the JSON parser allows, or no JSON at all — becomes an exception that the
server logs at debug level and otherwise drops, so the client waits forever. Two layers around
the SDK's own transport close that gap:

* :class:`_Stdin` reads stdin's bytes in pipe-sized pieces into one buffer it reuses
  (:class:`_Lines`: no decoding, and a 16 MB request lands in memory the previous one used) and
  parses each line once, with orjson, in the reading thread (:func:`parse_message`). A line
  orjson takes whole (strict UTF-8 JSON, no lone surrogate, no integer beyond 64 bits) is
  validated as the SDK would from the parsed value and handed on parsed; the SDK's own parse of
  the line took 25–45 ms of a 16 MB request, its decoding and the surrogate scan 20 ms more.
  Any other line goes to the SDK as text, as before: a line with a lone surrogate escape is
  repaired first (each lone surrogate becomes U+FFFD, as session files are read), so the
  request is served; invalid UTF-8 becomes U+FFFD; anything else the SDK cannot read is
  answered by :class:`_Answering`.
* :class:`_Answering` sits on the SDK's read stream. When the SDK reports a line it could not
  read, it answers that line's request id (found with Python's parser, or by a scan of the
  line's start) with a JSON-RPC error, and logs one warning line.
* A line over ``paging.max_request_bytes`` is never given to the SDK (parsing and validating
  it would cost several times its size): it is answered ``REQUEST_TOO_LARGE`` (a tool error
  for ``tools/call``, else a JSON-RPC error), its id found at the line's start or end. Once
  a line is past the limit it is no longer kept, only counted, its edges kept for the id, so
  a line of gigabytes, or one that never ends, holds no more memory than the limit.
* Lines end where the SDK's text reader ends them: at a line feed, a carriage return or CRLF.

A line handed on parsed reaches the SDK as an empty line, which it reports as unreadable;
:class:`_Answering` then passes the parsed message on in its place. The SDK reads the next line
only after the previous item was taken from the stream, and :class:`_Stdin` records what it
read only back on the event loop, so "the line that failed" is always the last one it handed
out.

A response is written to JSON by :class:`_Predumping` as it is sent, through orjson where that
gives the SDK's very bytes (the SDK's pydantic dump took 2.2 ms of a select_context reply).

Replies go out through :class:`_Stdout`: one worker-thread hop per message (write and flush
together), into a pipe widened to 1 MiB so a select_context window of a few hundred KB does
not cross in 64 KiB pieces, each waiting for the client (bench/stdio_trace.py).
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: the SDK's own stdout handling
    fcntl = None  # type: ignore[assignment]

import anyio
import mcp_types as types
from context_paging.index.canonical import orjson
from context_paging.index.jsonl import clean_text, numbers_unlike_json
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


def oversize(line: bytes | memoryview | Skipped, limit: int) -> Oversize | None:
    """The line's facts when it is over ``limit`` bytes, else None."""
    if isinstance(line, Skipped):
        size, head_bytes, tail_bytes = line.size, line.head, line.tail
    else:
        size, head_bytes, tail_bytes = len(line), line[:_EDGE], line[-_EDGE:]
    if size <= limit:
        return None
    head = bytes(head_bytes).decode("utf-8", "replace")
    tail = bytes(tail_bytes).decode("utf-8", "replace")
    found = _HEAD_ID.search(head) or _TAIL_ID.search(tail)
    ident = json.loads(found.group(1)) if found else None
    return Oversize(size, ident, bool(_TOOLS_CALL.search(head) or _TOOLS_CALL.search(tail)))


# orjson reads some numbers otherwise than the SDK (which reads them as the json module does:
# index.jsonl.numbers_unlike_json), and deeper nesting than the SDK's parser, which refuses a
# line whose arrays and objects nest more than 200 deep. Such a line is left to the SDK, so it
# is served, or refused, as before.
SDK_DEPTH = 200


def parse_message(line: bytes | memoryview) -> types.JSONRPCMessage | None:
    """The JSON-RPC message of a line, the same value the SDK's ``validate_json`` gives, or None
    where orjson might read it differently or the SDK would refuse it (then the SDK reads the
    text, and reports what it cannot read)."""
    if orjson is None:
        return None
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:  # invalid UTF-8, a lone surrogate, NaN, too deep, not JSON
        return None
    if type(value) is not dict or numbers_unlike_json(value, line, SDK_DEPTH):
        return None
    try:
        return types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValueError:  # pydantic's ValidationError: the SDK's own text says what is wrong
        return None


# A read asks for this much at least: the pipe's size (widened to it at start), so a large
# request comes in with one read per pipe-full.
_READ = 1 << 20
# The buffer keeps what it grew to (twice the longest line at most) up to this size; a larger
# one (a line over the request size limit) is given back once its line was handed out.
_KEEP = 64 << 20


def _line_end(buf: bytearray, start: int, end: int) -> int:
    """Where the first line in ``buf[start:end]`` ends (past its line feed, carriage return,
    or CRLF: a text reader's universal newlines, as the SDK reads stdin), or -1 when none is
    there yet (a carriage return as the last byte may still begin a CRLF)."""
    found = buf.find(b"\n", start, end)
    cr = buf.find(b"\r", start, end if found < 0 else found)
    if cr < 0:
        return found + 1 if found >= 0 else -1
    if cr + 1 == found:
        return found + 1
    return cr + 1 if cr + 1 < end else -1


@dataclass(frozen=True, slots=True)
class Skipped:
    """A line longer than :attr:`_Lines.cap`, read past without being kept: its size (its
    newline included) and its first and last :data:`_EDGE` bytes."""

    size: int
    head: bytes
    tail: bytes


class _Lines:
    """A file descriptor's lines as views into one buffer, reused from line to line and grown to
    the longest. A view stays valid until the next :meth:`readline`. A line longer than
    :attr:`cap` is not kept: the buffer stops growing there, and the rest of the line is read
    and dropped (so a line without end, or of gigabytes, costs no more memory than one just
    over the cap)."""

    def __init__(self, fd: int, cap: int | None = None) -> None:
        self._file = io.FileIO(fd, "rb", closefd=False)
        self._buf = bytearray(_READ)
        self._start = self._end = 0  # the bytes read but not yet handed out: buf[start:end]
        self._view: memoryview | None = None
        self.on_bytes: Callable[[], None] | None = None  # the first bytes of a line came in
        self.cap = cap

    def readline(self) -> memoryview | Skipped:
        """The next line, its newline included; at the end of the input what is left without
        one, then an empty view. A line of more than :attr:`cap` bytes before its newline is
        a :class:`Skipped`."""
        if self._view is not None:
            self._view.release()
            self._view = None
        if len(self._buf) > _KEEP and self._start == self._end:
            self._buf, self._start, self._end = bytearray(_READ), 0, 0
        scanned = 0  # how far past the start no line end was found
        while True:
            found = _line_end(self._buf, self._start + scanned, self._end)
            if found >= 0:
                return self._take(found)
            # the last byte is looked at again: a carriage return there may begin a CRLF
            scanned = max(0, self._end - self._start - 1)
            if self.cap is not None and scanned > self.cap:
                return self._skip()
            if not self._fill():
                return self._take(self._end)

    def _skip(self) -> Skipped:
        """The line begun at the buffer's start, read to its end (or the end of the input) and
        dropped as it comes in, its edges kept. Its last byte read stays buffered, for a CRLF
        split between two reads. A buffer grown for the line is given back after it."""
        edges = [b"", b"", 0]  # head, tail, size

        def drop(stop: int) -> None:
            buf, start = self._buf, self._start
            head, tail, size = edges
            if len(head) < _EDGE:
                head += buf[start:min(stop, start + _EDGE - len(head))]
            tail = (tail + buf[max(start, stop - _EDGE):stop])[-_EDGE:]
            edges[:] = [head, tail, size + stop - start]
            self._start = stop

        hook, self.on_bytes = self.on_bytes, None  # the line's first bytes were reported
        try:
            while True:
                found = _line_end(self._buf, self._start, self._end)
                if found >= 0:
                    drop(found)
                    break
                drop(self._end - 1)
                if not self._fill():  # the input ends inside the line
                    drop(self._end)
                    break
        finally:
            self.on_bytes = hook
        if len(self._buf) > 2 * _READ:  # grown for this line only: given back
            rest = self._buf[self._start:self._end]
            self._buf = bytearray(len(rest) + _READ)
            self._buf[:len(rest)] = rest
            self._start, self._end = 0, len(rest)
        head, tail, size = edges
        return Skipped(size, head, tail)  # type: ignore[arg-type]

    def _take(self, end: int) -> memoryview:
        self._view = memoryview(self._buf)[self._start:end]
        self._start = end
        return self._view

    def _fill(self) -> bool:
        """Read more after what is buffered (moved to the front, into a larger buffer when it
        does not leave room for a whole read); False at the end of the input."""
        if self._start == self._end:
            self._start = self._end = 0
        buf = self._buf
        if len(buf) - self._end < _READ:
            size = self._end - self._start
            if size + _READ > len(buf):
                buf = bytearray(max(2 * len(buf), size + _READ))
            buf[:size] = self._buf[self._start:self._end]
            self._buf, self._start, self._end = buf, 0, size
        fresh = self._start == self._end
        tail = memoryview(buf)[self._end:]
        try:
            count = self._file.readinto(tail)
        finally:
            tail.release()
        if not count:
            return False
        self._end += count
        if fresh and self.on_bytes is not None:
            self.on_bytes()  # a request is coming in: idle work stops before it is whole
        return True


class _Stdin:
    """The process's stdin as lines for the SDK, each read and parsed in a worker thread. The
    SDK gets an empty line (which it reports as unreadable) for a line handed on parsed
    (:attr:`parsed`) and for one over the size limit (:attr:`oversize`, never parsed);
    :class:`_Answering` answers from those. Any other line goes as text, surrogates repaired,
    and is remembered (:attr:`last`)."""

    def __init__(self, limit: int, fd: int = 0) -> None:
        self._lines = _Lines(fd, cap=limit)
        self.limit = limit
        self.last = ""
        self.oversize: Oversize | None = None
        self.parsed: SessionMessage | None = None
        self.on_line: Callable[[], None] | None = None  # a request is in: idle work stops

    def __aiter__(self) -> _Stdin:
        return self

    async def __anext__(self) -> str:
        line, self.last, self.oversize, self.parsed = await anyio.to_thread.run_sync(self._read)
        if line is None:
            raise StopAsyncIteration
        return line

    def _read(self) -> tuple[str | None, str, Oversize | None, SessionMessage | None]:
        """(the line for the SDK, or None at the end; what :attr:`last`, :attr:`oversize` and
        :attr:`parsed` become once back on the event loop)."""
        self._lines.on_bytes = self.on_line
        view = self._lines.readline()
        if not isinstance(view, Skipped) and not view:
            return None, "", None, None
        if self.on_line is not None:
            self.on_line()
        big = oversize(view, self.limit)
        if big is not None:
            return "\n", "", big, None  # parsing it would cost many times its size; never read
        assert not isinstance(view, Skipped)  # a skipped line is over the limit
        message = parse_message(view)
        if message is not None:
            return "\n", "", None, SessionMessage(message)
        line, repaired = repair_line(bytes(view).decode("utf-8", "replace"))
        if repaired:
            log.warning("request held lone UTF-16 surrogates; they were replaced by U+FFFD")
        return line, line, None, None


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
            if self._stdin.parsed is not None:
                return self._stdin.parsed  # the empty line stood for a message read already
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
