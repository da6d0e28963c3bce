"""Replacement texts: distilled outputs, removal stubs, exchange and image stubs
(docs/distillation.md, "Replacement texts").

Same information as upstream's templates, in this project's own words. Every replacement starts
with :data:`MARKER` (which also tells later passes "already distilled") and names the exact
``recall`` call of this server that returns the original: ``recall({"tool_call_id":"…"})`` for a
tool output, ``recall({"history_id":"…"})`` for an omitted exchange.

Kept chunks are copied verbatim. Each run of removed chunks becomes one omission line: for grep
output the files it held, for a ``read`` the file line range (mapped through the call's
``offset``; Pi's trailing continuation note is not a file line), otherwise the 1-based output
line range. The image stub says "1 turn" rather than upstream's "1 turns".
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from context_paging.paging.distill.chunk import Chunk

MARKER = "[distilled]"
UPSTREAM_MARKER = "[context-guard]"  # outputs edited by the Pi extension are left alone
EXCHANGE_PROMPT_CHARS = 120


def is_marked(text: str) -> bool:
    """Already a replacement: ours, or one written by the upstream extension in the host."""
    return text.startswith(MARKER) or text.startswith(UPSTREAM_MARKER)


def format_chars(n: int | float) -> str:
    """``999``, ``1.5k``, ``2.3M`` (one decimal, half-up like JavaScript's ``toFixed``)."""
    def one_decimal(value: Decimal) -> str:
        return str(value.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))

    if n >= 1_000_000:
        return one_decimal(Decimal(n) / 1_000_000) + "M"
    if n >= 1_000:
        return one_decimal(Decimal(n) / 1_000) + "k"
    return str(int(n))


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def clip(text: str, limit: int) -> str:
    """At most ``limit`` chars kept: the first 70% and the end, joined by a ``[…]`` line."""
    if len(text) <= limit:
        return text
    head = math.floor(limit * 0.7)
    return f"{text[:head]}\n[…]\n{text[len(text) - (limit - head):]}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _string_arg(arguments: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def tool_label(tool: str, arguments: Mapping[str, Any] | None) -> str:
    """``bash `rg -n foo src` ``, ``read src/a.ts``, ``grep `foo|bar` `` or just the name."""
    arguments = arguments if isinstance(arguments, Mapping) else {}
    command = _string_arg(arguments, "command", "cmd")
    if command is not None:
        return f"{tool} `{_short(' '.join(command.split()))}`"
    path = _string_arg(arguments, "path", "file_path", "file")
    if path is not None:
        return f"{tool} {_short(path)}"
    pattern = _string_arg(arguments, "pattern", "query")
    if pattern is not None:
        return f"{tool} `{_short(pattern)}`"
    return tool


def _recall(key: str, value: str) -> str:
    return "recall(" + json.dumps({key: value}, ensure_ascii=False, separators=(",", ":")) + ")"


def output_recall(call_id: str) -> str:
    return _recall("tool_call_id", call_id)


def exchange_recall(history_id: str) -> str:
    return _recall("history_id", history_id)


# Pi's read appends a blank line and a continuation note; it is not a line of the file.
_READ_NOTE = re.compile(
    r"\n\n\[(?:Showing lines \d+-\d+ of \d+[^\]\n]*|\d+ more lines in file)\. "
    r"Use offset=\d+ to continue\.\]$"
)


@dataclass(frozen=True, slots=True)
class Source:
    """The output being rendered: its call, the tool's name and arguments, the text."""

    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    text: str

    @property
    def label(self) -> str:
        return tool_label(self.tool, self.arguments)


@dataclass(frozen=True, slots=True)
class Rendered:
    text: str
    kept_lines: int
    total_lines: int
    kept_chars: int  # kept chunk lengths, without the newlines between chunks


def _omission(source: Source, removed: Sequence[Chunk], total_lines: int) -> str | None:
    first, last = removed[0], removed[-1]
    files = list(dict.fromkeys(f for chunk in removed for f in chunk.files))
    if files:
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        lines = plural(last.end - first.start, "line")
        return f"[… {lines} not shown: matches in {', '.join(files[:5])}{more} …]"
    base, path, file_lines = 1, None, total_lines
    if source.tool.lower() == "read":
        offset = source.arguments.get("offset")
        if isinstance(offset, int | float) and not isinstance(offset, bool) and offset >= 1:
            base = math.floor(offset)
        path = _string_arg(source.arguments, "path", "file_path", "file")
        if _READ_NOTE.search(source.text):
            file_lines = max(0, total_lines - 2)
    end = min(last.end, file_lines)
    if end <= first.start:
        return None  # the run holds only the read note
    span = f"{first.start + base}–{end - 1 + base}"
    where = f"lines {span} of {path}" if path else f"output lines {span}"
    return f"[… {plural(end - first.start, 'line')} not shown: {where} …]"


def render_output(source: Source, chunks: Sequence[Chunk], keep: Collection) -> Rendered:
    """The replacement for a large output keeping the chunks whose index is in ``keep``."""
    total_lines = chunks[-1].end if chunks else 0
    size = format_chars(len(source.text))
    recall = output_recall(source.call_id)
    if not keep:
        text = (
            f"{MARKER} The output of {source.label} was left out: "
            f"{plural(total_lines, 'line')} ({size} chars), judged not needed for the work. "
            f"{recall} returns it."
        )
        return Rendered(text, 0, total_lines, 0)
    body: list[str] = []
    removed: list[Chunk] = []
    kept_lines = kept_chars = 0
    for chunk in chunks:
        if chunk.index in keep:
            line = _omission(source, removed, total_lines) if removed else None
            if line:
                body.append(line)
            removed = []
            body.append(chunk.text)
            kept_lines += chunk.end - chunk.start
            kept_chars += len(chunk.text)
        else:
            removed.append(chunk)
    line = _omission(source, removed, total_lines) if removed else None
    if line:
        body.append(line)
    header = (
        f"{MARKER} The output of {source.label}, shortened: {kept_lines} of "
        f"{plural(total_lines, 'line')} shown ({format_chars(kept_chars)} of {size} chars); "
        f"lines judged not needed were left out. {recall} returns the full output."
    )
    return Rendered(header + "\n" + "\n".join(body), kept_lines, total_lines, kept_chars)


def small_stub(source: Source) -> str:
    return (
        f"{MARKER} The output of {source.label} ({format_chars(len(source.text))} chars) was "
        f"left out: no longer needed. {output_recall(source.call_id)} returns it."
    )


def exchange_stub(history_id: str, prompt: str, messages: int, chars: int) -> str:
    quoted = " ".join(prompt.split())
    if len(quoted) > EXCHANGE_PROMPT_CHARS:
        quoted = quoted[: EXCHANGE_PROMPT_CHARS - 1] + "…"
    tokens = format_chars(round(chars / 4))
    return (
        f"{MARKER} An earlier exchange, judged unrelated to the current work, was left out: "
        f'"{quoted}" ({plural(messages, "message")}, ~{tokens} tokens). '
        f"{exchange_recall(history_id)} returns the whole exchange."
    )


def image_stub(
    call_id: str,
    count: int,
    sizes: Sequence[tuple[int, int]],
    tokens: int,
    age: int,
) -> str:
    """Leads an output whose images were dropped; ``sizes`` are the known ``(w, h)`` values."""
    dims = ""
    if sizes:
        shown = ", ".join(f"{w}×{h}" for w, h in sizes[:3])
        dims = shown + (", …" if len(sizes) > 3 else "") + "; "
    them = "it" if count == 1 else "them"
    return (
        f"{MARKER} {plural(count, 'image')} dropped from this output ({dims}"
        f"~{format_chars(tokens)} tokens), {plural(age, 'turn')} old. "
        f"{output_recall(call_id)} shows {them} again."
    )
