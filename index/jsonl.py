"""A tolerant, incremental JSON Lines reader for session files that are still being written.

Rules (docs/sessions.md, "Reading a file that is still being written"):

* A last line without a newline is *pending*: the agent may still be writing it. If it parses to an
  object it is accepted; otherwise it is left for the next read, which starts at its byte offset.
* One line may hold several JSON objects glued together; every one of them is recovered.
* Text that is not valid UTF-8 is decoded with replacement characters; lone UTF-16 surrogates
  (``\\udXXX`` escapes) are replaced so that the values can be written anywhere later.
* Garbage becomes an :class:`Issue` with file, line and byte offset, never an exception.

:class:`FileCursor` makes reading incremental: reading a file again after it grew parses only the
new bytes; a file that shrank, was replaced, or whose first line changed is read from the start.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat as stat_module
from dataclasses import dataclass, field
from typing import IO, Any

from context_paging.index.canonical import ORJSON_MAX_STRING

try:
    import orjson
except ImportError:  # optional speed-up: the json module writes an equivalent line
    orjson = None  # type: ignore[assignment]

_CHUNK = 8 << 20
_HEAD_BYTES = 4096
_decoder = json.JSONDecoder()
_SURROGATE = re.compile("[\ud800-\udfff]")
# Only a \uD800–\uDFFF escape can put a surrogate into a parsed string that the reader cleans;
# valid pairs are joined by the parser, so a line that has such an escape gets the (costly) deep
# clean, no other line does. A surrogate written as its own three bytes (the ledger writes a
# host's lone surrogate so: dump_line) is read back as that surrogate, exactly.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB]")
# What orjson reads otherwise than the json module (and the MCP SDK's parser, which reads numbers
# as json does), among what it accepts: an integer beyond 64 bits comes out a float (of
# magnitude 2**63 or more), and a number of more than 768 digits can be rounded the other way
# at a halfway point (a review's differential fuzz: about 1.75 million lines). Such a number has
# a run of at least 385 digits; runs of _LONG_RUN are looked for, sampled every _STRIDE bytes
# first (a run that long covers two adjacent samples) and confirmed on the whole line only
# then. No JSON writer prints a float of more than 17 significant digits.
_BIG = float(1 << 63)
_STRIDE = 99
_LONG_RUN = 2 * _STRIDE
_DIGITS = bytes(1 if 0x30 <= b <= 0x39 else 0 for b in range(256))  # digits to 1, the rest 0


@dataclass(frozen=True, slots=True)
class Record:
    """One JSON value read from a session file: its 1-based line and the line's byte offset."""

    line: int
    offset: int
    value: Any


@dataclass(frozen=True, slots=True)
class Issue:
    """A warning about a session file: something was skipped, nothing was lost silently."""

    file: str
    line: int
    offset: int
    kind: str
    message: str

    def __str__(self) -> str:
        where = f" (byte {self.offset})" if self.offset >= 0 else ""
        return f"{self.file}:{self.line}{where}: {self.kind}: {self.message}"


@dataclass(slots=True)
class Chunk:
    """What one read produced, and where the next read starts."""

    records: list[Record]
    issues: list[Issue]
    end: int  # byte offset after the last consumed line
    next_line: int  # line number of the line that starts at ``end``
    bytes_parsed: int
    pending: bool  # an incomplete last line was left for the next read


def clean_text(text: str) -> str:
    """Replace lone surrogates, which cannot be encoded as UTF-8, with U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


# Belt and braces with _orjson_alike: anything orjson would write that ``json.dumps`` does not
# (dataclasses, datetimes, subclasses) makes orjson raise, so the json module writes it.
_LINE_OPTIONS = 0 if orjson is None else (
    orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS)


def dump_line(value: Any) -> bytes:
    """One JSON Lines line for ``value``, its newline included, as UTF-8 bytes.

    Any reader gets the same value back as from ``json.dumps(value, ensure_ascii=False)``, the
    writer before orjson (the bytes differ: no spaces after separators, control characters
    escaped in their short forms); keys keep their order. orjson writes the ledger's 15 MiB
    first append in a third of the json module's time or less (bench/hash_bench.py). Where the
    two would not read back alike, the json module writes the line: orjson refuses lone
    surrogates, integers beyond 64 bits, non-str keys and nesting past 254 levels, and writes
    NaN and ±Infinity as ``null`` — so the value is walked for such floats first (a walk over
    the containers costs a fraction of a search of the written bytes for ``null``).
    """
    if orjson is not None and _orjson_alike(value):
        try:
            return orjson.dumps(value, option=_LINE_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError: one of the cases above
            pass
    return (json.dumps(value, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")


_JSON_LEAVES = (str, int, bool, type(None))


def _orjson_alike(value: Any) -> bool:
    """Only dicts, lists, tuples, str, int, bool, None and finite floats, of exactly those types
    (an enum, a subclass or any other object goes to the json module, which writes or refuses
    it as it always did), and no string longer than ``ORJSON_MAX_STRING`` (orjson's memory for
    it: index/canonical.py). Walks the containers only: long strings cost nothing here."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if len(item) > ORJSON_MAX_STRING:
                return False
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif kind not in _JSON_LEAVES:
            return False
    return True


def _clean_value(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_value(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _clean_value(v) for k, v in value.items()}
    return value


_REFUSED = object()


def _through_orjson(raw: bytes) -> Any:
    """orjson's value of ``raw`` (about half the json module's time: 7.6 against 17.1 ms for the
    benchmark's 16 MB ledger), or ``_REFUSED`` where the json module must read it because the
    two could differ. orjson refuses a lone surrogate (escaped or as its own bytes), NaN and
    infinities, out-of-range numbers, a byte order mark, nesting past 1,024 levels and glued
    objects. Of what it reads, a line is refused when a number may have come out otherwise
    (:func:`numbers_unlike_json`)."""
    if orjson is None:
        return _REFUSED
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _REFUSED
    return _REFUSED if numbers_unlike_json(value, raw) else value


def numbers_unlike_json(value: Any, raw: bytes | memoryview, max_depth: int | None = None
                        ) -> bool:
    """Whether orjson's ``value`` of ``raw`` may differ from what the json module reads there:
    a float of magnitude 2**63 or more, or any float on a line with a long run of digits (see
    :data:`_BIG`); also whether containers nest deeper than ``max_depth`` (the SDK's parser
    refuses what nests past 200, orjson reads up to 1,024). Only the containers are walked in
    Python; the line's bytes are looked at only when it holds a float."""
    floats = False
    if type(value) is float:
        floats = True
        if not -_BIG < value < _BIG:
            return True
    elif type(value) is dict or type(value) is list:
        stack = [(value, 1)]
        while stack:
            node, depth = stack.pop()
            if max_depth is not None and depth > max_depth:
                return True
            for item in node.values() if type(node) is dict else node:
                kind = type(item)
                if kind is dict or kind is list:
                    stack.append((item, depth + 1))
                elif kind is float:
                    floats = True
                    if not -_BIG < item < _BIG:
                        return True
    return floats and _long_digit_run(raw)


def _long_digit_run(raw: bytes | memoryview) -> bool:
    """Whether ``raw`` holds :data:`_LONG_RUN` digits in a row: a sample of every
    :data:`_STRIDE`-th byte first (0.2 ms for 16 MB), the whole line (14 ms) only when two
    adjacent samples are digits."""
    if b"\x01\x01" not in bytes(raw[::_STRIDE]).translate(_DIGITS):
        return False
    return b"\x01" * _LONG_RUN in bytes(raw).translate(_DIGITS)


def parse_line(raw: bytes, path: str, line: int, offset: int) -> tuple[list[Any], list[Issue]]:
    """Every JSON value on one line; glued objects are split, garbage becomes issues. The
    values are the json module's (read by orjson where it gives the same), with escaped lone
    surrogates read as U+FFFD; a line nested too deep for the json module to read (past about
    990 levels, where orjson did not read it) is an issue too."""
    value = _through_orjson(raw)
    if value is not _REFUSED:  # no surrogate in it: orjson refuses those
        return [value], []
    try:
        try:
            value = json.loads(raw)
        except ValueError:
            values, issues = _parse_glued(raw, path, line, offset)
        else:
            values, issues = [value], []
    except RecursionError:
        return [], [Issue(path, line, offset, "bad_json",
                          "nested too deeply to read; the line is skipped")]
    if _SURROGATE_ESCAPE.search(raw):
        values = [_clean_value(v) for v in values]
    return values, issues


def _parse_glued(raw: bytes, path: str, line: int, offset: int) -> tuple[list[Any], list[Issue]]:
    text = raw.decode("utf-8", "replace")
    values: list[Any] = []
    issues: list[Issue] = []
    pos, end = 0, len(text)
    while pos < end:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            break
        try:
            value, pos = _decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            byte_at = offset + len(text[: exc.pos].encode("utf-8", "surrogatepass"))
            issues.append(
                Issue(path, line, byte_at, "bad_json", f"{exc.msg}; rest of the line skipped")
            )
            break
        values.append(value)
    if len(values) > 1:
        issues.append(
            Issue(path, line, offset, "glued_objects", f"{len(values)} JSON objects on one line")
        )
    return values, issues


class OutsideRoot(PermissionError):
    """A file that resolves (or was swapped to resolve) outside the directory it must be in."""

    code = "STORAGE_ERROR"


_NO_FOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def open_inside(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None,
                buffering: int = -1) -> IO[bytes]:
    """Open a regular file for reading so that what is read is what was checked.

    Checking a path and then opening it is a race: a symlink swapped in between makes the open
    read a file outside the roots. So the path is resolved, the resolved name is opened without
    following a final symlink (``O_NOFOLLOW``), and the open file itself is verified: its
    ``/proc/self/fd`` name must lie under ``root`` (Linux), or else its device and inode must be
    those of the checked path. Raises :class:`OutsideRoot` (an ``OSError``) when it is not.
    """
    real = os.path.realpath(path)
    real_root = os.path.realpath(root) if root is not None else None
    if real_root is not None and not _under(real, real_root):
        raise OutsideRoot(errno.EACCES, "the file resolves outside its root directory", str(path))
    fd = os.open(real, _NO_FOLLOW)
    try:
        opened = os.fstat(fd)
        if not stat_module.S_ISREG(opened.st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", str(path))
        if real_root is not None:
            where = _fd_name(fd)
            if where is not None:
                inside = _under(where, real_root)
            else:
                checked = os.stat(real, follow_symlinks=False)
                inside = (checked.st_dev, checked.st_ino) == (opened.st_dev, opened.st_ino)
            if not inside:
                raise OutsideRoot(errno.EACCES, "the file changed to one outside its root "
                                  "directory while it was opened", str(path))
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _fd_name(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def read_jsonl(path: str, start: int = 0, first_line: int = 1,
               handle: IO[bytes] | None = None) -> Chunk:
    """Read the complete lines of ``path`` from byte ``start`` (which must begin a line), from
    ``handle`` when the caller has opened it already (see :func:`open_inside`)."""
    if handle is None:
        with open_inside(path, buffering=_CHUNK) as opened:
            return read_jsonl(path, start, first_line, opened)
    records: list[Record] = []
    issues: list[Issue] = []
    line, offset = first_line, start
    pending = False
    handle.seek(start)
    for raw in handle:
        if raw[-1:] != b"\n":  # the last line, still being written or just unterminated
            if raw.isspace():
                offset += len(raw)
                break
            tail = _parse_tail(raw)
            if tail is None:
                pending = True
            else:
                records.append(Record(line, offset, tail))
                offset += len(raw)
            break
        _consume(raw, path, line, offset, records, issues)
        offset += len(raw)
        line += 1
    return Chunk(records, issues, offset, line, offset - start, pending)


def _consume(
    raw: bytes, path: str, line: int, offset: int, records: list[Record], issues: list[Issue]
) -> None:
    if not raw or raw.isspace():
        return
    values, line_issues = parse_line(raw, path, line, offset)
    issues.extend(line_issues)
    for value in values:
        if isinstance(value, dict):
            records.append(Record(line, offset, value))
        else:
            issues.append(
                Issue(path, line, offset, "not_an_object", f"a JSON {type(value).__name__}")
            )


def _parse_tail(raw: bytes) -> Any | None:
    # A pending line counts only if it is one whole object; a half-written one waits. It is
    # read as a complete line is (parse_line), surrogate escapes included.
    values, issues = parse_line(raw, "", 0, 0)
    if issues or len(values) != 1:
        return None
    return values[0] if isinstance(values[0], dict) else None


def _head_hash(path: str, handle: IO[bytes] | None = None) -> str:
    if handle is None:
        with open_inside(path) as opened:
            return _head_hash(path, opened)
    head = os.pread(handle.fileno(), _HEAD_BYTES, 0)
    first = head.split(b"\n", 1)[0]
    return hashlib.blake2b(first, digest_size=12).hexdigest()


def file_identity(path: str) -> dict[str, object]:
    """What a cursor remembers of a file: enough to tell, without reading it, that it changed."""
    with open_inside(path) as handle:
        stat = os.fstat(handle.fileno())
        return {"path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                "inode": stat.st_ino, "head": _head_hash(path, handle)}


@dataclass(slots=True)
class FileCursor:
    """Where reading one file stopped, and how to recognise that it is still the same file."""

    path: str
    root: str | None = None  # the directory the file must stay inside (see open_inside)
    offset: int = 0
    next_line: int = 1
    inode: int = -1
    head: str = ""
    size: int = 0
    mtime_ns: int = 0
    bytes_parsed_total: int = field(default=0)

    def read(self) -> tuple[Chunk, bool]:
        """Read what is new. Returns the chunk and whether the file was read from the start."""
        with open_inside(self.path, self.root, buffering=_CHUNK) as handle:
            return self._read(handle)

    def _read(self, handle: IO[bytes]) -> tuple[Chunk, bool]:
        stat = os.fstat(handle.fileno())
        head = _head_hash(self.path, handle)
        restart = (
            stat.st_ino != self.inode
            or stat.st_size < self.offset
            or (self.offset > 0 and head != self.head)
        )
        if restart:
            self.offset, self.next_line = 0, 1
        chunk = read_jsonl(self.path, self.offset, self.next_line, handle)
        self.offset, self.next_line = chunk.end, chunk.next_line
        self.inode, self.head = stat.st_ino, head
        self.size, self.mtime_ns = stat.st_size, stat.st_mtime_ns
        self.bytes_parsed_total += chunk.bytes_parsed
        return chunk, restart

    def unchanged(self) -> bool:
        """True when the file's size and mtime are what the last read saw (no bytes to read)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return False
        return stat.st_size == self.size and stat.st_mtime_ns == self.mtime_ns and (
            stat.st_ino == self.inode
        )


def parse_records(data: bytes, path: str, start: int, at_end: bool) -> list[Record]:
    """The JSON objects of the whole lines in ``data``, the bytes of ``path`` from ``start``.

    For a piece read from the middle of a file: when ``start`` is not 0 the first line is
    dropped up to its newline (``data`` may begin inside a line; read from the byte before a
    line to keep it). A last line without a newline is taken only when ``at_end`` says the
    piece ends the file and it parses as one object, as :func:`read_jsonl` takes a pending
    line. Line numbers are not known here (0); bad lines are skipped without issues.
    """
    begin = data.index(b"\n") + 1 if start and b"\n" in data else (len(data) if start else 0)
    stop = data.rfind(b"\n") + 1
    records: list[Record] = []
    issues: list[Issue] = []
    offset = start + begin
    while offset - start < stop:
        end = data.index(b"\n", offset - start) + 1
        _consume(data[offset - start:end], path, 0, offset, records, issues)
        offset = start + end
    if at_end and stop < len(data) and stop >= begin:
        tail = _parse_tail(data[stop:])
        if tail is not None:
            records.append(Record(0, start + stop, tail))
    return records
