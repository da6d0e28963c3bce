"""Cutting a tool output into chunks that are judged one by one (docs/distillation.md,
"Chunking").

Lines are ``text.split("\\n")``; line indexes are 0-based and ``end`` is exclusive; a line costs
its length + 1. Chunks are contiguous, cover every line exactly once, and ``chunk.text`` is their
lines joined with ``"\\n"``, so joining all chunk texts with ``"\\n"`` gives the output back.

grep-like output (``path:12:match``, ``path-13-context``, ``--``) is grouped by file, so a chunk
is "the matches in one file": big groups are cut into windows, runs of tiny groups are merged.
Anything else is cut into windows of about the target size that prefer to end after a blank
line.

Changed from upstream (timestamped logs looked like grep output): a line only counts as a
grep line when its file part is path-like — it ends in a known file extension, or it has no
whitespace and is not made only of digits, dashes, dots and ``T`` (``2024-05-01 12``,
``2024-05-01T12``, ``12`` are timestamps, not files).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int  # position in the whole output, 0-based; the chunk id judges answer with
    start: int
    end: int
    text: str
    files: tuple[str, ...] = ()  # files whose grep lines are in the chunk (grep output only)


@dataclass(frozen=True, slots=True)
class ChunkOptions:
    max_chunks: int = 120  # the target grows so that an output has about this many chunks
    min_target_chars: int = 800
    max_target_chars: int = 4_000


DEFAULT_CHUNK_OPTIONS = ChunkOptions()

_MATCH_LINE = re.compile(r"^([^\s:][^:\n]*):\d+:")
_CONTEXT_LINE = re.compile(r"^([^\s:][^:\n]*?)-\d+-")
_CONTEXT_TAIL = re.compile(r"-\d+-")
_TIMESTAMPISH = re.compile(r"[\d.T-]+")
KNOWN_EXTENSION = re.compile(
    r"\.(?:c|cc|cpp|cs|css|go|h|hpp|html?|java|jsx?|json|kt|lock|lua|md|mjs|cjs|php|py|rb|rs"
    r"|scss|sh|sql|svelte|swift|toml|tsx?|txt|vue|xml|ya?ml|zig|ex|exs|erl|hs|ml|scala|r|pl"
    r"|ini|cfg|conf|env|gradle|proto|graphql|tf|dart|jl|nim|clj|m|mm|ipynb|rst|adoc|csv)$",
    re.IGNORECASE,
)


def path_like(file: str) -> bool:
    """Could this be the file part of a grep line (and not a timestamp or a phrase)?"""
    if KNOWN_EXTENSION.search(file):
        return True
    return not any(c.isspace() for c in file) and not _TIMESTAMPISH.fullmatch(file)


def grep_file(line: str, known_files: Collection[str] = ()) -> str | None:
    """The file of a grep match or context line, ``""`` for a ``--`` separator, else None.

    ``path-13-`` is ambiguous when the path itself holds ``-digits-`` (``2024-05-01-post.md``),
    so a context line resolves to the longest known file (from match lines) it starts with.
    """
    if line == "--":
        return ""
    match = _MATCH_LINE.match(line)
    if match and path_like(match.group(1)):
        return match.group(1)
    best: str | None = None
    for file in known_files:
        if (
            (best is None or len(file) > len(best))
            and line.startswith(file)
            and _CONTEXT_TAIL.match(line, len(file))
        ):
            best = file
    if best is not None:
        return best
    context = _CONTEXT_LINE.match(line)
    if context and path_like(context.group(1)):
        return context.group(1)
    return None


def is_grep_like(lines: Sequence[str]) -> bool:
    """At least 3 lines (blank lines and ``--`` aside), and at least 60% of them name a file."""
    counted = [line for line in lines if line.strip() and line != "--"]
    total = len(counted)
    if total < 3:
        return False
    # Stop once the share is decided either way (hits only grow): a long output that is no
    # grep result is told after about 40% of its lines, not all of them.
    hits = 0
    for seen, line in enumerate(counted, 1):
        if grep_file(line):
            hits += 1
            if hits / total >= 0.6:
                return True
        elif (hits + total - seen) / total < 0.6:
            return False
    return hits / total >= 0.6


def target_size(total_chars: int, options: ChunkOptions = DEFAULT_CHUNK_OPTIONS) -> int:
    wanted = math.ceil(total_chars / max(1, options.max_chunks))
    return min(max(wanted, options.min_target_chars), max(options.max_target_chars, wanted))


def _chars(lines: Sequence[str], start: int, end: int) -> int:
    return sum(len(lines[i]) + 1 for i in range(start, end))


def windows(lines: Sequence[str], start: int, end: int, target: int) -> list[tuple[int, int]]:
    """Cut lines [start, end) into windows of about ``target`` chars.

    A window takes lines while it is empty or stays within the target (a longer single line is
    a window of its own). If it stops before ``end`` and a blank line lies in its last 40%, it
    ends right after the latest such blank line.
    """
    out: list[tuple[int, int]] = []
    while start < end:
        size, stop = 0, start
        while stop < end and (stop == start or size + len(lines[stop]) + 1 <= target):
            size += len(lines[stop]) + 1
            stop += 1
        if stop < end:
            floor = start + max(1, math.floor((stop - start) * 0.6))
            for k in range(stop, floor, -1):
                if not lines[k - 1].strip():
                    stop = k
                    break
        out.append((start, stop))
        start = stop
    return out


def _grep_groups(lines: Sequence[str]) -> list[tuple[int, int, str]]:
    """Runs of lines of one file; separators, blank and other lines join the current run."""
    known = set()
    for line in lines:
        match = _MATCH_LINE.match(line)
        if match and path_like(match.group(1)):
            known.add(match.group(1))
    groups: list[list] = []
    for i, line in enumerate(lines):
        file = grep_file(line, known)
        if file and (not groups or groups[-1][2] != file):
            groups.append([i, i + 1, file])
        elif groups:
            groups[-1][1] = i + 1
        else:
            groups.append([i, i + 1, ""])
    return [(start, end, file) for start, end, file in groups]


def _grep_ranges(lines: Sequence[str], target: int) -> list[tuple[int, int, list[str]]]:
    ranges: list[tuple[int, int, list[str]]] = []
    pending: list | None = None  # [start, end, files] of merged tiny groups

    def flush() -> None:
        nonlocal pending
        if pending is not None:
            ranges.append((pending[0], pending[1], pending[2]))
        pending = None

    for start, end, file in _grep_groups(lines):
        size = _chars(lines, start, end)
        files = [file] if file else []
        if size > target * 1.5:
            flush()
            ranges.extend((a, b, files) for a, b in windows(lines, start, end, target))
        elif size < target / 4:
            if pending is not None and _chars(lines, pending[0], end) <= target / 2:
                pending[1] = end
                pending[2].extend(files)
            else:
                flush()
                pending = [start, end, list(files)]
        else:
            flush()
            ranges.append((start, end, files))
    flush()
    return ranges


def chunk_output(text: str, options: ChunkOptions = DEFAULT_CHUNK_OPTIONS) -> list[Chunk]:
    lines = text.split("\n")
    target = target_size(len(text), options)
    if is_grep_like(lines):
        ranges = _grep_ranges(lines, target)
    else:
        ranges = [(a, b, []) for a, b in windows(lines, 0, len(lines), target)]
    return [
        Chunk(i, start, end, "\n".join(lines[start:end]), tuple(dict.fromkeys(files)))
        for i, (start, end, files) in enumerate(ranges)
    ]


def segment_chunks(
    chunks: Sequence[Chunk], max_chars: int, max_chunks: int
) -> list[tuple[Chunk, ...]]:
    """Consecutive chunks grouped into judge requests within both limits (a chunk costs
    its length + 1). A single chunk over ``max_chars`` gets a segment of its own."""
    segments: list[tuple[Chunk, ...]] = []
    current: list[Chunk] = []
    size = 0
    for chunk in chunks:
        cost = len(chunk.text) + 1
        if current and (size + cost > max_chars or len(current) >= max_chunks):
            segments.append(tuple(current))
            current, size = [], 0
        current.append(chunk)
        size += cost
    if current:
        segments.append(tuple(current))
    return segments


def segment_chars(segment: Sequence[Chunk]) -> int:
    return sum(len(c.text) + 1 for c in segment)
