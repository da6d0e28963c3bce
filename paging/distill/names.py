"""Whole path names in a text, for the local judge's evidence (``judge.Evidence.found_in``).

A chunk names one of the work's paths when the path, or its basename of 4 characters or more,
stands in it as a whole name: no word character, ``.`` or ``-`` just before it, no word
character or ``-`` just after. That is one regex alternation over the names; this module finds
the same with ``str.find`` and a look at the characters either side, because every output's
work names a different set of paths and compiling a new alternation for each was most of a
judge call's time. :func:`path_regex` is kept as the reference the tests compare with.
"""

from __future__ import annotations

import functools
import re


def path_names(paths: frozenset[str]) -> tuple[str, ...]:
    """Every path and its basename (when ≥ 4 chars), longest first."""
    names = set(paths) | {p.rsplit("/", 1)[-1] for p in paths
                          if len(p.rsplit("/", 1)[-1]) >= 4}
    return tuple(sorted(names, key=lambda n: (-len(n), n)))


def path_regex(paths: frozenset[str]) -> re.Pattern[str]:
    """The search :class:`WholeNames` makes, as a regex (the reference)."""
    alternatives = "|".join(re.escape(n) for n in path_names(paths))
    return re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w-])")


class WholeNames:
    """``path_regex(paths).search`` without the regex (``\\w`` is ``str.isalnum()`` or
    ``_``, as in ``re``)."""

    __slots__ = ("names",)

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def search(self, text: str) -> bool:
        end_of_text = len(text)
        for name in self.names:
            at = text.find(name)
            while at >= 0:
                end = at + len(name)
                before = text[at - 1] if at else ""
                after = text[end] if end < end_of_text else ""
                if not (before and (before.isalnum() or before in "_.-")) and not (
                        after and (after.isalnum() or after in "_-")):
                    return True
                at = text.find(name, at + 1)
        return False


@functools.lru_cache(maxsize=256)
def path_pattern(paths: frozenset[str]) -> tuple[WholeNames, tuple[str, ...]]:
    """The whole-name search for ``paths``, and the names a match must contain: a name that
    contains another adds nothing to a substring pre-test (a path contains its basename), so
    only the minimal ones are listed."""
    ordered = path_names(paths)
    names = set(ordered)
    minimal = tuple(n for n in ordered if not any(m != n and m in n for m in names))
    return WholeNames(ordered), minimal
