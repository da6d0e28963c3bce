"""The window's token estimates per view, cached by content and counted only where needed.

A view's estimate is cached under its host message's fingerprint and part (plus the decision's
key when distillation replaced it), so a call pays counting only for messages it has not seen.
Counting runs from the newest view back and, given a ``reach``, stops once the counted views
exceed it: older views the cache does not hold get 0, a lower bound, and are reported as
uncounted (``index.window`` selects on these figures and recounts everything when the window
kept an uncounted view). Idle time between calls counts some of them ahead (``ahead``, run by
``ContextService.idle``, never inside a call).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any

from context_paging.paging.estimate import chars4_tokens, resident_chars4, text_chars4
from context_paging.paging.request import Request
from context_paging.paging.tokens import counted_resident, counted_tokens

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
            value = self._texts[key] = count()
            if len(self._texts) > TEXT_CACHE:
                self._texts.popitem(last=False)
        else:
            self._texts.move_to_end(key)
        return value

    def views(self, request: Request, distilled: Mapping[int, Any], reach: float | None = None,
              deferred: Collection[int] = ()) -> tuple[list[float], set[int]]:
        """Per view: its token estimate, and the views left uncounted.

        With ``reach``, once the views counted so far add up to more than ``reach`` tokens,
        older views that are not in the cache are not counted: they get 0 and are returned as
        uncounted. ``deferred`` views (outputs distillation has not judged yet) are uncounted as
        well: a decision could only make them smaller, so 0 is their lower bound too."""
        views = request.views.views
        roles = request.roles
        out = [0.0] * len(views)
        lazy: set[int] = set()
        total = 0.0
        index = len(views) - 1
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
            if reach is not None and total > reach and roles[index + 1] == "user":
                break
        self._cached(request, distilled, deferred, index, out, lazy)
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
