"""The window's token estimates per view, cached by content and counted only where needed.

A view's estimate is cached under its host message's fingerprint and part (plus the decision's
key when distillation replaced it), so a call pays counting only for messages it has not seen.
Counting runs from the newest view back and, given a ``reach``, stops once the counted views
exceed it: older views the cache does not hold get 0, a lower bound, and are reported as
uncounted (``index.window.pipeline`` selects on these figures and recounts everything when the
window kept an uncounted view). With a counter that says its longest token, uncounted views can
carry a floor instead of 0 (``paging.tokens.token_floor``, a lower bound just the same). Idle time
between calls counts some of them ahead (``ahead``, run by ``ContextService.idle``, never inside a
call).

A large text is counted in two halves on two threads when the machine's load leaves a core free
(:func:`spare_core`, used by ``server.tokens``): the call's thread waits for the other half
while it counts its own, so the hand-over costs nothing. Counting ahead on a helper thread while
the call recorded and distilled was measured slower (docs/performance-history.md, "2026-12-05: the
collector, and helper threads that cost more than they saved").
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any

from context_paging.paging.estimate import chars4_tokens, resident_chars4, text_chars4
from context_paging.paging.request import Request
from context_paging.paging.tokens import (
    counted_resident,
    counted_tokens,
    token_floor,
)

ESTIMATE_CACHE = 50_000
TEXT_CACHE = 64


class Estimates:
    """Estimates with the configured counter: ``count_text`` (tiktoken) or characters/4."""

    def __init__(self, count_text: Callable[[str], int] | None) -> None:
        self.count_text = count_text
        self.cache: OrderedDict[tuple[str, int], float] = OrderedDict()
        # Texts every call counts again: the system prompt and tools, the frozen notice (sent
        # unchanged until the cut advances). Counted once per distinct text.
        self._texts: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._lock = threading.Lock()

    def message(self, message: dict[str, Any]) -> float:
        if self.count_text is None:
            return chars4_tokens(message)
        return counted_tokens(message, self.count_text)

    def resident(self, system: str, tools: list[dict[str, Any]]) -> float:
        if self.count_text is None:
            return resident_chars4(system, tools)
        try:  # the key holds all of every tool, as sent (more than the count reads)
            key = ("resident", system, json.dumps(tools))  # key order kept: it may count
        except (TypeError, ValueError):  # not JSON (a caller's own objects): counted each time
            return counted_resident(system, tools, self.count_text)
        return self._text(key, lambda: counted_resident(system, tools, self.count_text))

    def notice(self, text: str) -> float:
        if self.count_text is None:
            return text_chars4(text)
        return self._text(("notice", text), lambda: self.count_text(text) + 4)

    def _text(self, key: tuple[str, ...], count: Callable[[], float]) -> float:
        value = self._texts.get(key)
        if value is None:
            value = count()
        with self._lock:  # calls of several sessions at once (index/window/gate.py)
            self._texts.pop(key, None)
            self._texts[key] = value
            if len(self._texts) > TEXT_CACHE:
                self._texts.popitem(last=False)
        return value

    def floor_chars(self) -> int | None:
        """The counter's longest token in characters, when it says (the shipped tokenizer
        does): uncounted views can then carry :func:`token_floor` instead of 0."""
        return getattr(self.count_text, "max_token_chars", None)

    def text_floor(self) -> Callable[[str], int] | None:
        """The counter's own lower bound of a text's count, when it has one (the shipped
        tokenizer's: ``server.tokens.piece_floor``)."""
        return getattr(self.count_text, "text_floor", None)

    def views(self, request: Request, distilled: Mapping[int, Any], reach: float | None = None,
              deferred: Collection[int] = (), floors: bool = False,
              enough: float | None = None) -> tuple[list[float], set[int]]:
        """Per view: its token estimate, and the views left uncounted.

        With ``reach``, once the views counted so far add up to more than ``reach`` tokens,
        older views that are not in the cache are not counted: they get 0 and are returned as
        uncounted. ``deferred`` views (outputs distillation has not judged yet) are uncounted as
        well: a decision could only make them smaller, so 0 is their lower bound too. With
        ``floors`` (and a counter that says its longest token), the uncounted views past the
        reach carry :func:`token_floor` of what is sent, a lower bound just as 0 is. Those
        floors are the lengths over the longest token; with ``enough`` and a counter that has a
        bound of its own (:meth:`text_floor`), the newest of them are raised to the larger
        bound, one view after another, until the estimates add up to more than ``enough`` (the
        caller's question is whether they do; the bound costs a tenth of a count, so it is not
        spent on views the answer does not need)."""
        views = request.views.views
        roles = request.roles
        out = [0.0] * len(views)
        lazy: set[int] = set()
        total = 0.0
        index = len(views) - 1
        longest = self.floor_chars() if floors else None
        tighter = self.text_floor() if longest is not None else None
        peeked: float | None = None  # the floor of the view the count stopped before
        while index >= 0:
            value = None if index in deferred else self.view(index, request, distilled)
            if value is None:
                lazy.add(index)
            else:
                out[index] = value
                total += value
            index -= 1
            # Past the reach, stop after a request: whole turns leave the window, so the turn
            # that crosses the reach is counted to its start.
            if reach is not None and roles[index + 1] == "user":
                if total > reach:
                    break
                # With floors, a turn whose newest view's floor alone crosses the reach is not
                # counted either: no window within the reach can keep it, exact or not.
                if longest is not None and index >= 0 and index not in deferred and self.view(
                        index, request, distilled, count=False) is None:
                    peeked = _floor(request, distilled, index, longest, tighter)
                    if total + peeked > reach:
                        break
                    peeked = None
        self._cached(request, distilled, deferred, index, out, lazy)
        if longest is not None:
            for position in range(index + 1):
                if position not in deferred:
                    out[position] = _floor(request, distilled, position, longest)
            newest = index
            if peeked is not None:
                out[index], newest = peeked, index - 1
            if enough is not None and tighter is not None:
                _raise_floors(request, distilled, deferred, newest, out, longest, tighter, enough)
        return out, lazy

    @staticmethod
    def _cached(request: Request, distilled: Mapping[int, Any], deferred: Collection[int],
                index: int, out: list[float], lazy: set[int]) -> None:
        """Views ``index`` down to 0, past the reach: every one uncounted (0), without even
        looking in the cache, so a call costs nothing per view of older history.

        No window can keep one of them: views after ``index`` already add up to more than the
        reach, the largest limit the selector compares a window with, and a window is always a
        run of views up to the newest (FIFO evicts from the front). A window that did keep one
        (views the selector leaves out, system messages or interrupted exchanges, counted in
        the reach's sum, are the only way) is counted in full and chosen again, as for any
        uncounted view; :meth:`ahead` takes the cached values of the rest between calls."""
        lazy.update(range(index + 1))

    def view(self, index: int, request: Request, distilled: Mapping[int, Any],
             count: bool = True) -> float | None:
        """One view's estimate from the cache, else counted (None when ``count`` is false)."""
        view = request.views.views[index]
        fp = request.fingerprints[view.source]
        message = view.message
        if index in distilled:
            if distilled[index].message is None:
                return 0.0  # left out with its exchange: never sent
            message = distilled[index].message
            fp = fp and f"{fp}:{distilled[index].key}"
        key = None if fp is None else (fp, view.part)
        value = None if key is None else self.cache.get(key)
        if value is not None or not count:
            return value
        value = self.message(message)
        if key is not None:
            self.cache[key] = value
            if len(self.cache) > ESTIMATE_CACHE:
                self.cache.popitem(last=False)
        return value

    def ahead(self, request: Request, distilled: Mapping[int, Any], lazy: set[int],
              seconds: float, stop: Callable[[], bool] | None = None) -> None:
        """Spend at most ``seconds`` (``math.inf``: no limit) counting uncounted views, newest
        first, so later calls (calibration, a longer window) find them in the cache. Each view
        counted is taken out of ``lazy``; ``stop`` is asked before each count (a request is
        waiting). It only fills the cache: a call's answer is the same with or without it."""
        deadline = time.perf_counter() + seconds
        last = 0.0  # the previous count's time: a count that would not fit is not started
        for index in sorted(lazy, reverse=True):
            if self.view(index, request, distilled, count=False) is not None:
                lazy.discard(index)  # counted before (calls leave older views unlooked-up)
                continue
            now = time.perf_counter()
            if now + last >= deadline or (stop is not None and stop()):
                return
            self.view(index, request, distilled)
            lazy.discard(index)
            last = time.perf_counter() - now


def _floor(request: Request, distilled: Mapping[int, Any], index: int, longest: int,
           tighter: Callable[[str], int] | None = None) -> int:
    """:func:`token_floor` of view ``index`` as sent (0 when left out with its exchange)."""
    message = request.views.views[index].message
    if index in distilled:
        message = distilled[index].message
        if message is None:
            return 0
    return token_floor(message, longest, tighter)


def _raise_floors(request: Request, distilled: Mapping[int, Any], deferred: Collection[int],
                  index: int, out: list[float], longest: int, tighter: Callable[[str], int],
                  enough: float) -> None:
    """Raise the floors of views ``index`` down to 0 (not ``deferred``) to the counter's own
    bound, newest first, until ``out`` adds up to more than ``enough``."""
    total = sum(out)
    position = index
    while total <= enough and position >= 0:
        if position not in deferred:
            raised = _floor(request, distilled, position, longest, tighter)
            total += raised - out[position]
            out[position] = raised
        position -= 1


def spare_core() -> bool:
    """Whether the last minute's load leaves a core free for a helper thread (this process's
    own thread counts toward the load). On a machine whose cores are all busy a second thread
    only waits for one. It only decides where a count runs, never its value."""
    try:
        return os.getloadavg()[0] < cores() - 0.5
    except OSError:  # no load average here
        return cores() > 1


@functools.cache
def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
