"""What can be distilled: large and small tool outputs, old exchanges, old images
(docs/distillation.md, "What can be distilled").

Candidate rules shared by large and small outputs: a ``toolResult`` of a call made in the run,
made only of text (no images), not an error unless ``distill_errors``, a tool not in
``exclude_tools`` (compared case-insensitively, so hosts that capitalise tool names match), at
least the size floor, and not already a replacement (text starting with our marker or the
upstream extension's — the host or another tool already edited it).

Changed from upstream: outputs of this server's recovery tools (``recall``, ``load_history`` …)
are never candidates, not even at run end, because ``recall`` refuses to return them (it points
to the original instead), so a stub on one would name a recall call that fails.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from context_paging.paging.distill.config import DistillConfig
from context_paging.paging.distill.conversation import (
    EDITABLE_ROLES,
    Call,
    CallFacts,
    Message,
    Read,
    assistant_count,
    assistant_texts,
    blocks,
    call_facts,
    calls_of,
    content_chars,
    image_cost,
    images_of,
    later_calls_for,
    prompt_text,
    role,
    run_starts,
    superseded_by,
    text_of,
    tool_calls,
)
from context_paging.paging.distill.render import (
    Source,
    exchange_stub,
    image_stub,
    is_marked,
    small_stub,
    tool_label,
)
from context_paging.paging.distill.scan import Candidate, Scan

EXCHANGE_MIN_CHARS = 2_000
SMALL_ITEM_OUTPUT_CHARS = 4_000
RECOVERY_TOOLS = frozenset(
    {"search_history", "browse_history", "load_history", "read_context_output", "recall",
     "list_sessions"}
)


@functools.lru_cache(maxsize=1024)  # asked once per output of every pass; names repeat
def is_recovery_tool(name: str) -> bool:
    """This server's recovery tools, also under a host's namespaced name (``mcp__x__recall``)."""
    return name in RECOVERY_TOOLS or re.split(r"__|[./:]", name)[-1] in RECOVERY_TOOLS


@dataclass(frozen=True, slots=True)
class OutputItem:
    call_id: str
    index: int  # entry index of the tool result
    tool: str
    arguments: Mapping[str, Any]
    text: str
    turn: int
    is_error: bool = False
    superseded: str = ""
    later_calls: tuple[str, ...] = ()

    @property
    def source(self) -> Source:
        return Source(self.call_id, self.tool, self.arguments, self.text)

    @property
    def label(self) -> str:
        return tool_label(self.tool, self.arguments)


def collect_outputs(
    messages: Sequence[Message],
    start: int,
    end: int,
    config: DistillConfig,
    *,
    floor: int,
    ceiling: int | None = None,
    youngest: int | None = None,
    skip: Container[str] = frozenset(),
    reach: int = 0,
    calls: Sequence[Call] | None = None,
) -> list[OutputItem]:
    """Candidate outputs of the run [start, end) with ``floor ≤ len < ceiling``, made at a turn
    ≤ ``youngest`` (mid-run), whose call id is not in ``skip``. Those before entry ``reach``
    are only counted (their ``superseded`` and ``later_calls`` stay empty): the pass will not
    judge them (``plan_pass``'s ``reach``). ``calls``: ``calls_of(messages, start, end)``,
    when the caller has it."""
    if calls is None:
        calls = calls_of(messages, start, end)
    facts = _Facts(calls)
    return [facts.item(i, call, tool, text, is_error, i >= reach)
            for i, call, tool, text, is_error
            in _candidates(messages, start, end, config, floor, ceiling, youngest, skip, calls)]


def collect_sized(
    messages: Sequence[Message],
    start: int,
    end: int,
    config: DistillConfig,
    *,
    youngest: int | None = None,
    skip: Container[str] = frozenset(),
    reach: int = 0,
    calls: Sequence[Call] | None = None,
    reads: Sequence[Read] | None = None,
    candidates: Sequence[Candidate] | None = None,
    counted: dict[int, tuple[Candidate, str, OutputItem]] | None = None,
) -> tuple[list[OutputItem], list[OutputItem]]:
    """The large outputs (``collect_outputs`` from ``min_result_chars``, with ``reach``) and
    the small ones (``collect_small``) in one walk over the run: a pass asks for both, and the
    walk reads every output's text (from ``reads``, the messages' :class:`Read`, if given).
    ``candidates``: the run's outputs that pass the rules fixed by their content
    (``paging.distill.scan.RunMemo``), when the caller kept them: then only those are read;
    ``counted``: the items made of them before ``reach`` on an earlier pass, by position."""
    if calls is None:
        calls = calls_of(messages, start, end)
    large_floor, small_floor = config.min_result_chars, config.small_result_min_chars
    small_wanted = 0 < small_floor < large_floor
    floor = small_floor if small_wanted else large_floor
    facts = _Facts(calls)
    large: list[OutputItem] = []
    small: list[OutputItem] = []
    found = (((*found, None) for found in _candidates(messages, start, end, config, floor,
                                                       None, youngest, skip, calls, reads))
             if candidates is None else _kept(messages, candidates, config, youngest, skip))
    for i, call, tool, text, is_error, candidate in found:
        if len(text) >= large_floor:
            if i < reach and counted is not None:
                # counted only: the same item as long as the kept candidate is the same one
                kept = counted.get(i)
                if kept is None or kept[0] is not candidate or kept[1] != tool:
                    kept = counted[i] = (candidate, tool,
                                         facts.item(i, call, tool, text, is_error, False))
                large.append(kept[2])
                continue
            large.append(facts.item(i, call, tool, text, is_error, i >= reach))
        else:  # small_floor <= len < large_floor; small outputs are always judged in full
            item = facts.item(i, call, tool, text, is_error, True)
            if len(small_stub(item.source)) < len(item.text):
                small.append(item)
    return large, small


def with_facts(items: Sequence[OutputItem], calls: Sequence[Call],
               reach: int) -> list[OutputItem]:
    """``items`` (collected over ``calls``' span with ``reach``) as ``reach`` 0 gives them:
    the counted-only ones get their ``superseded`` and ``later_calls``. Which outputs are
    candidates does not depend on ``reach``, so this is the full collection without a second
    walk over the run."""
    facts = _Facts(calls)
    by_id = {c.id: c for c in calls}
    return [facts.item(item.index, by_id[item.call_id], item.tool, item.text, item.is_error,
                       True) if item.index < reach else item for item in items]


def _candidates(
    messages: Sequence[Message], start: int, end: int, config: DistillConfig, floor: int,
    ceiling: int | None, youngest: int | None, skip: Container[str], calls: Sequence[Call],
    reads: Sequence[Read] | None = None,
):
    """(entry index, call, tool, text, is_error) of each output of [start, end) that passes
    the candidate rules (module docstring) and ``floor ≤ len < ceiling``."""
    by_id = {c.id: c for c in calls}
    excluded = {t.lower() for t in config.exclude_tools}
    for i in range(start, end):
        message = messages[i]
        call = by_id.get(message.get("toolCallId")) if role(message) == "toolResult" else None
        if call is None or call.id in skip or (
                reads[i].images if reads is not None else images_of(message)):
            continue
        if youngest is not None and call.turn > youngest:
            continue
        is_error = message.get("isError") is True
        tool = message.get("toolName") or call.name or "tool"
        text = reads[i].text if reads is not None else text_of(message)
        if (
            (is_error and not config.distill_errors)
            or not isinstance(tool, str)
            or tool.lower() in excluded
            or is_recovery_tool(tool)
            or len(text) < floor
            or (ceiling is not None and len(text) >= ceiling)
            or is_marked(text)
        ):
            continue
        yield i, call, tool, text, is_error


def _kept(messages: Sequence[Message], candidates: Sequence[Candidate], config: DistillConfig,
          youngest: int | None, skip: Container[str]):
    """``_candidates`` of a run from its kept candidates: the rules that can change between
    passes (``skip``, age) and those that read the tool's name (a view's name can come from
    elsewhere than its own content) are checked here."""
    excluded = {t.lower() for t in config.exclude_tools}
    for candidate in candidates:
        i, call, text, is_error = candidate
        if call.id in skip or (youngest is not None and call.turn > youngest):
            continue
        tool = messages[i].get("toolName") or call.name or "tool"
        if not isinstance(tool, str) or tool.lower() in excluded or is_recovery_tool(tool):
            continue
        yield i, call, tool, text, is_error, candidate


class _Facts:
    """Builds output items. An output's facts read only the calls of later turns, so the
    calls' labels and comparison facts are worked out on demand, from the first later call
    on (calls are in turn order): a pass that judges the newest outputs of a long run reads
    the tail of its calls, not all of them."""

    def __init__(self, calls: Sequence[Call]) -> None:
        self.calls = calls
        self.turns = [c.turn for c in calls]
        self.labels: list[str | None] = [None] * len(calls)
        self.facts: list[CallFacts | None] = [None] * len(calls)
        self.ready = len(calls)  # labels and facts are known from this call index on

    def item(self, i: int, call: Call, tool: str, text: str, is_error: bool,
             full: bool) -> OutputItem:
        if not full:
            return OutputItem(call.id, i, tool, call.arguments, text, call.turn, is_error)
        first = bisect.bisect_right(self.turns, call.turn)  # the first call of a later turn
        if first < self.ready:
            more = self.calls[first:self.ready]
            self.labels[first:self.ready] = [c.label for c in more]
            self.facts[first:self.ready] = call_facts(more)
            self.ready = first
        later = self.calls[first:]
        labels = cast(list[str], self.labels[first:])  # all filled from self.ready on
        facts = cast(list[CallFacts], self.facts[first:])
        superseded = superseded_by(tool, call.arguments, call.turn, later, facts) or ""
        return OutputItem(call.id, i, tool, call.arguments, text, call.turn, is_error,
                          superseded, later_calls_for(call.turn, later, labels=labels))


def collect_small(
    messages: Sequence[Message],
    start: int,
    end: int,
    config: DistillConfig,
    *,
    youngest: int | None = None,
    skip: Container[str] = frozenset(),
    calls: Sequence[Call] | None = None,
) -> list[OutputItem]:
    """Outputs from ``small_result_min_chars`` up to ``min_result_chars``, judged whole; only
    those whose stub would be shorter than the output."""
    if config.small_result_min_chars <= 0:
        return []
    items = collect_outputs(
        messages, start, end, config, floor=config.small_result_min_chars,
        ceiling=config.min_result_chars, youngest=youngest, skip=skip, calls=calls,
    )
    return [item for item in items if len(small_stub(item.source)) < len(item.text)]


@dataclass(frozen=True, slots=True)
class Exchange:
    history_id: str  # of the prompt
    index: int
    end: int  # exclusive
    prompt: str
    answer: str
    tool_calls: tuple[str, ...]
    messages: int
    chars: int
    omitted: tuple[str, ...]  # history ids of the editable entries after the prompt

    @property
    def stub(self) -> str:
        return exchange_stub(self.history_id, self.prompt, self.messages, self.chars)


def collect_exchanges(
    ids: Sequence[str],
    messages: Sequence[Message],
    run_start: int,
    keep_recent: int,
    skip: Container[str] = frozenset(),
    starts: Sequence[int] | None = None,
    sizes: Sequence[int] | None = None,
    memo: dict[tuple[int, int], Exchange | None] | None = None,
) -> list[Exchange]:
    """Earlier, finished exchanges before ``run_start``, without the last ``keep_recent``.

    Skipped: a prompt without an id, judged already (``skip``) or already a replacement; a span
    with an editable entry that has no id (it could not be left out by id); no assistant
    message; a last assistant message with tool calls (unfinished); under 2,000 chars of
    editable content, or a stub that would not be shorter. System messages, bash executions and
    summaries are not editable: they stay where they are. ``starts``: ``run_starts(messages)``,
    and ``sizes``: ``content_chars`` of each message, when the caller has them. ``memo``: the
    exchanges already read, by span, judged without ``skip`` (a caller that keeps it for an
    unchanged conversation start: ``paging.distill.scan.Scan.exchanges``).
    """
    if starts is None:
        starts = run_starts(messages)
    bounds = [i for i in starts if i < run_start] + [run_start]
    judged = max(0, len(bounds) - 1 - keep_recent)
    items: list[Exchange] = []
    for start, end in zip(bounds[:judged], bounds[1 : judged + 1], strict=True):
        if memo is None:
            exchange = _exchange(ids, messages, start, end, skip, sizes)
        else:
            if (start, end) not in memo:
                memo[start, end] = _exchange(ids, messages, start, end, (), sizes)
            exchange = memo[start, end]
            if exchange is not None and exchange.history_id in skip:
                exchange = None
        if exchange is not None:
            items.append(exchange)
    return items


def _exchange(
    ids: Sequence[str], messages: Sequence[Message], start: int, end: int, skip: Container[str],
    sizes: Sequence[int] | None = None,
) -> Exchange | None:
    prompt_id = ids[start]
    prompt = prompt_text(messages[start])
    if not prompt_id or prompt_id in skip or is_marked(text_of(messages[start])):
        return None
    editable = [i for i in range(start, end) if role(messages[i]) in EDITABLE_ROLES]
    if any(not ids[i] for i in editable):
        return None
    assistants = [i for i in editable if role(messages[i]) == "assistant"]
    if not assistants or tool_calls(messages[assistants[-1]]):
        return None
    chars = sum(content_chars(messages[i]) if sizes is None else sizes[i] for i in editable)
    omitted = tuple(dict.fromkeys(ids[i] for i in editable[1:] if ids[i] != prompt_id))
    answers = assistant_texts(messages, start, end)
    calls = tuple(c.label for c in calls_of(messages, start, end))
    item = Exchange(prompt_id, start, end, prompt, answers[-1] if answers else "", calls,
                    end - start, chars, omitted)
    if chars < EXCHANGE_MIN_CHARS or len(item.stub) >= chars:
        return None
    return item


@dataclass(frozen=True, slots=True)
class ImageItem:
    call_id: str
    index: int
    count: int
    tokens: int
    age: int
    label: str
    stub: str
    before: int
    after: int


def collect_images(
    messages: Sequence[Message],
    keep_turns: int,
    skip: Container[str] = frozenset(),
    turns: int | None = None,
    reads: Sequence[Read] | None = None,
    scan: Scan | None = None,
) -> list[ImageItem]:
    """Tool outputs with images that ``keep_turns`` or more assistant messages follow.

    Age alone decides; user images are always kept; an output already marked (our image stub
    leads it, or someone else edited it) is left alone. ``turns``: ``assistant_count(messages)``,
    and ``reads``: the messages' :class:`Read`, when the caller has them; ``scan``: their
    :class:`~paging.distill.scan.Scan`, which lists the outputs with images (no walk).
    """
    if keep_turns <= 0:
        return []
    if scan is not None:
        total = scan.assistant_count()
        return [item for i in scan.images
                if (item := _image(messages[i], i, total - scan.counts[i + 1], keep_turns, skip,
                                   scan.call_names.get)) is not None]
    calls: dict[str, Call] | None = None  # made when the first image output needs a label

    def call_of(call_id: str) -> tuple[str, Mapping[str, Any]] | None:
        nonlocal calls
        if calls is None:
            calls = {c.id: c for c in calls_of(messages, 0, len(messages), reads)}
        call = calls.get(call_id)
        return None if call is None else (call.name, call.arguments)

    items: list[ImageItem] = []
    after = assistant_count(messages) if turns is None else turns
    for i, message in enumerate(messages):
        if role(message) == "assistant":
            after -= 1
        if role(message) != "toolResult" or (reads is not None and not reads[i].images):
            continue  # images_of would find none
        item = _image(message, i, after, keep_turns, skip, call_of)
        if item is not None:
            items.append(item)
    return items


def _image(message: Message, i: int, after: int, keep_turns: int, skip: Container[str],
           call_of: Callable[[str], tuple[str, Mapping[str, Any]] | None]) -> ImageItem | None:
    """The image item of a tool result ``after`` assistant messages old, or None;
    ``call_of``: a call id's tool name and arguments."""
    call_id = message.get("toolCallId")
    if not isinstance(call_id, str) or call_id in skip:
        return None
    images = images_of(message)
    if not images or after < keep_turns or is_marked(text_of(message)):
        return None
    costs = [image_cost(b) for b in images]
    tokens = sum(t for t, _ in costs)
    sizes = [s for _, s in costs if s is not None]
    stub = image_stub(call_id, len(images), sizes, tokens, after)
    texts = sum(len(str(b.get("text", ""))) for b in blocks(message) if b.get("type") == "text")
    call = call_of(call_id)
    tool = message.get("toolName") or (call[0] if call else "tool")
    label = tool_label(str(tool), call[1] if call else {})
    return ImageItem(call_id, i, len(images), tokens, after,
                     f"{label} ({len(images)} image{'s' if len(images) > 1 else ''})",
                     stub, content_chars(message), len(stub) + texts)


def cited_files(answer: str, files: Sequence[str]) -> set[str]:
    """Files the answer names: the full path, or the basename when it has ≥ 4 chars, with no
    word char, ``.`` or ``-`` before it and no word char or ``-`` after it."""
    cited: set[str] = set()
    for file in files:
        names = [file]
        base = file.rsplit("/", 1)[-1]
        if base != file and len(base) >= 4:
            names.append(base)
        for name in names:
            if name and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", answer):
                cited.add(file)
                break
    return cited


def batch_items(sizes: Sequence[int], max_chars: int, max_items: int) -> list[list[int]]:
    """Consecutive item indexes grouped within ``max_chars`` and ``max_items`` per batch."""
    batches: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, size in enumerate(sizes):
        if current and (total + size > max_chars or len(current) >= max_items):
            batches.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        batches.append(current)
    return batches


def small_item_size(item: OutputItem) -> int:
    return min(len(item.text), SMALL_ITEM_OUTPUT_CHARS) + 200


def exchange_item_size(item: Exchange) -> int:
    return min(len(item.prompt), 600) + min(len(item.answer), 800) + 60 * len(item.tool_calls) + 200
