"""``recall``: the exact original of a tool output or an exchange (docs/distillation.md,
"Recall").

The text is line-numbered when filtered by ``pattern``; ``offset`` (1-based) and ``limit`` count
lines (matching lines with a pattern); at most 2,000 lines and 50 KB go out per call, and a cut
reply ends with the exact offset to continue from. Patterns come from the model, so they run
under a time limit (the ``regex`` module's per-call timeout, against one shared deadline) and are
refused when longer than 500 characters. The time limit covers matching only: the ``regex``
module expands counted repeats when it compiles, so ``(?:(?:a{1000}){1000}){1000}`` would build a
billion-node program before the first match. :func:`repeat_cost` bounds that expansion first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import regex
from context_paging.index.history import HistoryItem, is_recovery_tool
from context_paging.index.jsonl import clean_text
from context_paging.index.model import ImageBlock, Message, TextBlock
from context_paging.index.navigator import NavigatorError, dumps

MAX_LINES = 2_000
MAX_BYTES = 50 * 1024
MAX_PATTERN = 500
PATTERN_LINE_CHARS = 4_000
PATTERN_SECONDS = 1.0
# Compiling costs about 0.6 s per million expanded repeat copies (measured with ``regex``
# 2024.x): 100,000 keeps a compile near 0.07 s while leaving single repeats such as ``a{50000}``.
MAX_REPEAT_COST = 100_000
_COUNT = regex.compile(r"\{(\d*)(?:,(\d*))?\}")
MAX_IMAGES = 6


@dataclass(frozen=True, slots=True)
class Recalled:
    text: str
    images: tuple[ImageBlock, ...] = ()


def find_original(items: Sequence[HistoryItem], *, tool_call_id: str | None = None,
                  history_id: str | None = None) -> tuple[str, list[ImageBlock]]:
    """The original text (and images) of a tool output or of an exchange."""
    if (tool_call_id is None) == (history_id is None):
        raise NavigatorError("RECALL_ARGUMENTS", "give exactly one of tool_call_id or history_id")
    if tool_call_id is not None:
        for item in reversed(items):
            result = item.result_for(tool_call_id) if item.kind == "model_turn" else None
            if result is not None:
                call = item.call(tool_call_id)
                name = result.tool_name or (call.name if call else "")
                if is_recovery_tool(name) or (call and is_recovery_tool(call.name)):
                    raise NavigatorError(
                        "RECOVERY_TOOL_OUTPUT",
                        "that is the output of a recovery tool; recall the original instead",
                    )
                return _text_of(result), [b for b in result.content if isinstance(b, ImageBlock)]
        raise NavigatorError(
            "UNKNOWN_TOOL_CALL_ID",
            f"no tool output with tool_call_id {tool_call_id!r} in this session; use the id "
            "named in the notice or a search_history reference",
        )
    start = next((i for i, item in enumerate(items) if item.history_id == history_id), None)
    if start is None:
        raise NavigatorError(
            "UNKNOWN_HISTORY_ID", f"no history item {history_id!r} in this session"
        )
    end = start + 1
    if items[start].kind == "user":
        # An exchange runs to the next request. A user message typed while the agent worked
        # (steering) is part of it, as distillation counts it when it omits the exchange
        # (docs/distillation.md, "Recall"; upstream's case 42).
        while end < len(items) and not (items[end].kind == "user"
                                        and not _steers(items[end - 1])):
            end += 1
    return _transcript(items[start:end])


def _steers(before: HistoryItem) -> bool:
    """A user item after this one was steering: the agent had called tools and not stopped
    (paging.distill.conversation.is_steering, on history items)."""
    message = before.message
    return before.kind == "model_turn" and bool(message.tool_calls) and (
        bool(before.tool_results) or not message.interrupted
    )


def _text_of(message: Message) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))


def _transcript(items: Sequence[HistoryItem]) -> tuple[str, list[ImageBlock]]:
    sections: list[str] = []
    images: list[ImageBlock] = []
    for item in items:
        message = item.message
        role = "user" if item.kind == "user" else "assistant"
        text = _text_of(message)
        pictures = [b for b in message.content if isinstance(b, ImageBlock)]
        images.extend(pictures)
        lines = [f"## {role}"] + ([text] if text else [])
        lines += [f"[tool call] {c.name} {dumps(c.arguments)}" for c in message.tool_calls]
        if pictures:
            lines.append(f"[{len(pictures)} image(s), attached below]")
        sections.append("\n".join(lines))
        for result in item.tool_results:
            body = _text_of(result)
            shots = sum(isinstance(b, ImageBlock) for b in result.content)
            lines = [f"## tool result ({result.tool_name or 'tool'})"] + ([body] if body else [])
            if shots:
                lines.append(
                    f'[{shots} image(s): recall({{"tool_call_id":"{result.tool_call_id}"}}) '
                    "shows them]"
                )
            sections.append("\n".join(lines))
    return "\n\n".join(sections), images


def recall_text(
    text: str,
    images: Sequence[ImageBlock] = (),
    *,
    pattern: str | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> Recalled:
    # A ledger message from an in-process client may hold lone surrogates, which UTF-8 (the
    # byte cap, the reply) cannot encode: they come back as U+FFFD, as from session files.
    lines = clean_text(text).split("\n")
    numbered = list(enumerate(lines, 1))
    what = "lines"
    if pattern is not None:
        numbered = _matching(numbered, pattern)
        what = "matching lines"
        if not numbered:
            return Recalled(f"No line of the original output ({len(lines)} lines) matches "
                            f"/{pattern}/.")
    start = max(0, (offset or 1) - 1)
    count = min(limit, MAX_LINES) if limit and limit > 0 else MAX_LINES
    window = numbered[start : start + count]
    if not window:
        raise NavigatorError(
            "RECALL_OFFSET",
            f"offset {offset} is beyond the end ({len(numbered)} {what})",
        )
    out: list[str] = []
    used = 0
    cut_note = None
    for n, line in window:
        rendered = f"{n}: {line}" if pattern is not None else line
        size = len(rendered.encode("utf-8")) + 1
        if used + size > MAX_BYTES:
            if not out:
                rendered = rendered.encode("utf-8")[: MAX_BYTES - 1].decode("utf-8", "ignore")
                out.append(rendered)
                cut_note = f"[line {n} cut at 50KB]"
            break
        out.append(rendered)
        used += size
    shown = len(out)
    body = "\n".join(out)
    if cut_note:
        body += "\n" + cut_note
    first = start + 1
    last = start + shown
    if first > 1 or last < len(numbered) or cut_note:
        body += (
            f"\n\n[Showing {what} {first}–{last} of {len(numbered)}. "
            f"Use offset={last + 1} to continue.]"
            if last < len(numbered) else f"\n\n[Showing {what} {first}–{last} of {len(numbered)}.]"
        )
    attached: tuple[ImageBlock, ...] = ()
    if images:
        if pattern is None and (offset or 1) <= 1:
            attached = tuple(images[:MAX_IMAGES])
            if len(images) > len(attached):
                body += f"\n[{len(images)} image(s) in the original, {len(attached)} attached]"
        else:
            body += (
                f"\n[{len(images)} image(s) in the original; recall without pattern/offset "
                "to see them]"
            )
    return Recalled(body, attached)


def _matching(numbered: list[tuple[int, str]], pattern: str) -> list[tuple[int, str]]:
    if len(pattern) > MAX_PATTERN:
        raise NavigatorError(
            "RECALL_PATTERN", f"pattern is {len(pattern)} characters; the limit is {MAX_PATTERN}"
        )
    cost = repeat_cost(pattern)
    if cost > MAX_REPEAT_COST:
        raise NavigatorError(
            "RECALL_PATTERN",
            f"pattern /{pattern}/ nests counted repeats that expand to about {cost:,} copies "
            f"(the limit is {MAX_REPEAT_COST:,}); use a smaller count or '+' / '*'",
        )
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        raise NavigatorError("RECALL_PATTERN", f"invalid pattern /{pattern}/: {exc}") from None
    except (MemoryError, RecursionError, OverflowError):
        raise NavigatorError(
            "RECALL_PATTERN", f"pattern /{pattern}/ is too large to compile (out of memory); "
            "use a simpler one",
        ) from None
    deadline = time.monotonic() + PATTERN_SECONDS
    found = []
    for n, line in numbered:
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            if compiled.search(line[:PATTERN_LINE_CHARS], timeout=remaining):
                found.append((n, line))
        except TimeoutError:
            raise NavigatorError(
                "RECALL_PATTERN",
                f"pattern /{pattern}/ took longer than {PATTERN_SECONDS:g} s; use a simpler one",
            ) from None
    return found


def repeat_cost(pattern: str) -> int:
    """About how many items ``regex`` builds when it compiles ``pattern``, counted repeats expanded.

    ``regex`` copies an item ``m`` times for ``{m}`` / ``{m,n}`` / ``{m,}`` (the upper bound of a
    range costs nothing at compile time), so ``(?:(?:a{k}){k}){k}`` builds k³ items. Each group
    costs the sum of its items; a quantifier multiplies the item before it. A scan over the text,
    not a full parse: escapes and character classes count as one item so that their braces and
    parentheses do not count, and a ``{`` that is not a quantifier is a literal, as in ``regex``.
    """
    totals = [0]  # the cost of each open group so far, innermost last
    last = 0  # the cost of the item just read: what a quantifier would multiply
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "(":
            totals.append(0)
            last, i = 0, i + 1
            continue
        if ch == ")" and len(totals) > 1:
            last = max(totals.pop(), 1)
            totals[-1] += last
            i += 1
            continue
        match = _COUNT.match(pattern, i) if ch == "{" else None
        if match and (match.group(1) or match.group(2)) and last:
            copies = max(int(match.group(1) or 0), 1)
            totals[-1] += last * (copies - 1)
            last *= copies
            i = match.end()
            continue
        if ch == "\\":
            i += 2
            braced = pattern[i - 1 : i] in ("p", "P", "N", "x", "u", "U", "g")
            if braced and pattern[i : i + 1] == "{":
                close = pattern.find("}", i)
                i = n if close < 0 else close + 1
        elif ch == "[":
            i = _class_end(pattern, i)
        else:
            i += 1
        last = 1
        totals[-1] += 1
    return sum(totals)


def _class_end(pattern: str, start: int) -> int:
    """The index after the character class opening at ``start`` (nested ``regex`` V1 sets
    count as one class)."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    depth = 1
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i
