"""What a pass reads of a conversation's structure, kept from one call to the next.

A pass asks the same questions of the whole conversation on every call: where runs start, how
many assistant messages come before a position, which outputs hold images, which tool calls a
run made, what its question and notes are, which of its outputs could be candidates, and what
each earlier exchange is. Between two calls the conversation usually only grows, so the answers
for the shared start are the same: a :class:`Scan` holds them and reads only the new messages.

A scan is keyed per message by what names its content (the window passes its ledger key, which
chains every stored message before it, plus the applied replacement's read for a message an
earlier decision changed). When the keys of the scan are not all a prefix of the new ones, or
the configuration changed, the scan starts again from nothing: the answers are always those of
the full walk (tests/test_plan_cost.py compares the plans).

Mutable, owned by one caller (the window's ``Distiller``); nothing it hands out is changed
afterwards except by extending lists the caller copied or no longer holds.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from context_paging.paging.distill.config import DistillConfig
from context_paging.paging.distill.conversation import (
    Call,
    Message,
    Read,
    _steers,
    prompt_text,
    role,
)
from context_paging.paging.distill.render import is_marked
from context_paging.paging.request import common_start

Candidate = tuple[int, Call, str, bool]  # entry index, its call, text, is_error


@dataclass(slots=True)
class RunMemo:
    """One run's answers from its start up to ``stop`` (the scan's end, or the next run)."""

    start: int
    stop: int
    calls: list[Call] = field(default_factory=list)
    by_id: dict[str, Call] = field(default_factory=dict)
    results: list[tuple[int, str]] = field(default_factory=list)  # (position, call id named)
    result_ids: dict[str, int] = field(default_factory=dict)  # call id -> results naming it
    # "[added by the user during the run] …" of each steering message, in order
    steering: list[tuple[int, str]] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)  # assistant_texts
    # Outputs passing the rules that do not change between calls (a call of this run, no
    # images, not an excluded error, at least the floor, not already a replacement); the tool
    # rules, ``skip`` and age are checked per pass.
    candidates: list[Candidate] = field(default_factory=list)
    # Output items made of candidates before a pass's reach, by position (see collect_sized).
    counted: dict[int, Any] = field(default_factory=dict)

    def cut(self, end: int) -> bool:
        """Forget what was read from position ``end`` on; False when what is kept named a
        call made from there on (a repeated call id: the memo must be read again)."""
        gone: set[int] = set()
        while self.calls and self.calls[-1].index >= end:
            gone.add(id(self.calls.pop()))
        if gone:
            self.by_id = {call.id: call for call in self.calls}  # the last of each id again
        while self.results and self.results[-1][0] >= end:
            call_id = self.results.pop()[1]
            self.result_ids[call_id] -= 1
            if not self.result_ids[call_id]:
                del self.result_ids[call_id]
        for kept in (self.steering, self.notes, self.candidates):
            while kept and kept[-1][0] >= end:
                self.counted.pop(kept.pop()[0], None)
        self.stop = min(self.stop, end)
        return not gone or not any(id(call) in gone for _, call, _, _ in self.candidates)


class Scan:
    """Prefix answers about one conversation (module docstring)."""

    def __init__(self, config: DistillConfig) -> None:
        self.config = config
        large, small = config.min_result_chars, config.small_result_min_chars
        self.floor = small if 0 < small < large else large
        self.keys: list[Hashable] = []
        self.counts: list[int] = [0]  # assistant messages before each position
        self.assistants: list[int] = []
        self.users: list[int] = []
        self.starts: list[int] = []  # run_starts
        self.images: list[int] = []  # tool results holding images
        self.summaries: list[int] = []  # compaction summaries
        self.sizes: list[int] = []  # content_chars
        self.calls: list[tuple[int, str, str, Mapping[str, Any]]] = []  # (position, id, name, args)
        self.call_names: dict[str, tuple[str, Mapping[str, Any]]] = {}  # last call of each id
        # Per position: would a user message there steer (None: nothing non-custom before it)?
        self.earlier: list[bool | None] = [None]
        self.runs: dict[int, RunMemo] = {}
        self.exchanges: dict[tuple[int, int], Any] = {}  # (start, end) -> _exchange, no skip

    @classmethod
    def of(cls, previous: Scan | None, messages: Sequence[Message], reads: Sequence[Read],
           keys: Sequence[Hashable], config: DistillConfig) -> Scan:
        """The scan of ``messages``: ``previous`` cut back to the start its keys share with
        the new ones and extended (same configuration), else a new one."""
        scan = previous
        if scan is None or scan.config != config:
            scan = cls(config)
        shared = common_start(scan.keys, keys)
        if shared < len(scan.keys):
            scan._cut(shared)
        scan._extend(messages, reads, keys)
        return scan

    def _cut(self, end: int) -> None:
        """Forget what was read from position ``end`` on."""
        del self.keys[end:], self.counts[end + 1:], self.sizes[end:], self.earlier[end + 1:]
        for positions in (self.assistants, self.users, self.starts, self.images,
                          self.summaries):
            del positions[bisect.bisect_left(positions, end):]
        if self.calls and self.calls[-1][0] >= end:
            while self.calls and self.calls[-1][0] >= end:
                self.calls.pop()
            self.call_names = {call_id: (name, arguments)
                               for _, call_id, name, arguments in self.calls}
        for start in [start for start in self.runs if start >= end]:
            del self.runs[start]
        for start in [start for start, memo in self.runs.items() if not memo.cut(end)]:
            del self.runs[start]
        for span in [span for span in self.exchanges if span[1] > end]:
            del self.exchanges[span]

    def _extend(self, messages: Sequence[Message], reads: Sequence[Read],
                keys: Sequence[Hashable]) -> None:
        begin = len(self.keys)
        if begin == len(messages):
            return
        self.keys.extend(keys[begin:])
        # The run in progress at the old end goes on past it: its memo is extended below.
        last = self.starts[-1] if self.starts else None
        for i in range(begin, len(messages)):
            message, read = messages[i], reads[i]
            kind = role(message)
            self.sizes.append(read.chars)
            if kind == "assistant":
                self.assistants.append(i)
                for call_id, name, arguments in read.calls:
                    self.calls.append((i, call_id, name, arguments))
                    self.call_names[call_id] = (name, arguments)
            elif kind == "user":
                self.users.append(i)
                if not self.earlier[i]:  # nothing before it, or what is before it does not steer
                    self.starts.append(i)
            elif kind == "toolResult" and read.images:
                self.images.append(i)
            elif kind == "compactionSummary":
                self.summaries.append(i)
            self.counts.append(len(self.assistants))
            self.earlier.append(self.earlier[i] if kind == "custom" else _steers(message))
        memo = self.runs.get(last) if last is not None else None
        if memo is not None:
            at = bisect.bisect_right(self.starts, last)
            stop = self.starts[at] if at < len(self.starts) else len(messages)
            if not self._grow(memo, messages, reads, stop):
                del self.runs[last]

    def assistant_count(self, start: int = 0, end: int | None = None) -> int:
        return self.counts[len(self.keys) if end is None else end] - self.counts[start]

    def run(self, messages: Sequence[Message], reads: Sequence[Read], start: int,
            end: int) -> RunMemo | None:
        """The memo of the run starting at ``start`` up to ``end``, the run's extent in the
        scan; None when ``end`` is not that extent (the caller reads the span itself)."""
        at = bisect.bisect_right(self.starts, start)
        if at == 0 or self.starts[at - 1] != start:
            return None
        stop = self.starts[at] if at < len(self.starts) else len(self.keys)
        if end != stop:
            return None
        memo = self.runs.get(start)
        if memo is None:
            memo = RunMemo(start, start)
            if not self._grow(memo, messages, reads, stop):
                return None
            self.runs[start] = memo
        return memo

    def _grow(self, memo: RunMemo, messages: Sequence[Message], reads: Sequence[Read],
              stop: int) -> bool:
        """Extend ``memo`` to ``stop``; False when what it holds would change otherwise than
        by what is added (a call made after a result that names it, which the full walk's
        lookup by id would now find)."""
        config = self.config
        base = self.counts[memo.start]
        fresh: list[int] = []
        named: list[str] = []
        for i in range(memo.stop, stop):
            message, read = messages[i], reads[i]
            kind = role(message)
            if kind == "assistant":
                turn = self.counts[i] - base
                for call_id, name, arguments in read.calls:
                    call = Call(call_id, name, arguments, turn, i)
                    if call_id in memo.by_id:
                        # A repeated id: the full walk's lookup gives the last call, so the
                        # outputs already collected for this id now belong to this one.
                        # (the others stay the very same tuples: see collect_sized's counted)
                        memo.candidates = [(k, call, text, error) if c.id == call_id else kept
                                           for kept in memo.candidates
                                           for k, c, text, error in (kept,)]
                    elif call_id in memo.result_ids:
                        return False
                    memo.calls.append(call)
                    memo.by_id[call_id] = call
                if read.text.strip():
                    memo.notes.append((i, read.text))
            elif kind == "user" and i > memo.start:
                memo.steering.append(
                    (i, f"[added by the user during the run] {prompt_text(message)}"))
            elif kind == "toolResult":
                call_id = message.get("toolCallId")
                if isinstance(call_id, str):
                    memo.results.append((i, call_id))
                    named.append(call_id)
                fresh.append(i)
        for call_id in named:  # after the calls: a result before its call in one read is fine
            memo.result_ids[call_id] = memo.result_ids.get(call_id, 0) + 1
        for i in fresh:
            message, read = messages[i], reads[i]
            call = memo.by_id.get(message.get("toolCallId"))
            if call is None or read.images:
                continue
            is_error = message.get("isError") is True
            text = read.text
            if ((is_error and not config.distill_errors) or len(text) < self.floor
                    or is_marked(text)):
                continue
            memo.candidates.append((i, call, text, is_error))
        memo.stop = stop
        return True
