"""The bounds of every number and size a person or a model gives a command or a tool: one table.

The MCP tools' argument schemas (server/mcp/tools.py) and the CLI's argument types (server/cli.py,
server/commands/recovery.py, server/replay/commands.py) both read it, so a command refuses what
the matching tool refuses. At the terminal a value out of bounds is one line naming the flag and
the bound, and status 2 (argparse's usage error); the tools answer it as a validation error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from context_paging.paging.limits import MAX_SAFE_INTEGER  # token counts (docs/selection.md)


class Bound(NamedTuple):
    low: int | None  # the smallest value allowed (None: no lower bound)
    high: int | None  # the largest (None: none)


# What each number may be, by name: the tool's parameter (``search.limit`` is search_history's
# limit and ``search --limit``) or the setting it overrides.
NUMBERS: dict[str, Bound] = {
    "search.limit": Bound(1, 50),
    "search.offset": Bound(0, 10_000),
    "browse.sequence": Bound(0, 1_000_000),
    "browse.count": Bound(1, 10),
    "browse.stride": Bound(1, 10),
    "output.content_index": Bound(0, None),
    "output.offset": Bound(0, None),
    "output.limit": Bound(1, 2000),
    "recall.offset": Bound(1, None),
    "recall.limit": Bound(1, 2000),
    "sessions.limit": Bound(1, 100),
    "token_budget": Bound(1, MAX_SAFE_INTEGER),
    "trim_to_tokens": Bound(1, MAX_SAFE_INTEGER),
    "model_window": Bound(1, MAX_SAFE_INTEGER),
    "replay.recover_sample": Bound(0, None),  # identifiers replay looks up (a CLI flag only)
}

# The most characters a text may hold, or items a list.
LENGTHS: dict[str, int] = {
    "query": 200,  # search words
    "pattern": 500,  # recall's regular expression
    "id": 4096,  # history ids, tool call ids, references, paths, tool names (real tool call
    # ids reach 446 characters: Pi on openai-codex, ``call_…|<encoded item id>``)
    "filters": 10,  # --file and --tool, each
    "history_ids": 3,  # items one load_history or show returns
    "model": 200,
}


def between(name: str) -> dict[str, int | None]:
    """A number's bounds as pydantic's ``Field`` keywords (``ge``, ``le``)."""
    low, high = NUMBERS[name]
    return {"ge": low, "le": high}


def span(name: str) -> str:
    """A number's bounds as a flag's metavar: "1-50"."""
    low, high = NUMBERS[name]
    return f"{low}-{high}"


def describe(bound: Bound) -> str:
    """The bound in words: "from 1 to 50", "0 or more"."""
    if bound.high is None:
        return f"{bound.low:,} or more"
    return f"from {bound.low:,} to {bound.high:,}"


def number(name: str) -> Callable[[str], int]:
    """An argparse ``type``: a whole number within the named bound, or a one-line refusal."""
    bound = NUMBERS[name]

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            raise _refused(f"must be a whole number {describe(bound)}, "
                                             f"not {_shown(text)}") from None
        low, high = bound
        if (low is not None and value < low) or (high is not None and value > high):
            raise _refused(f"must be {describe(bound)}, not {value:,}")
        return value

    parse.__name__ = "number"  # argparse names the type in its own messages
    return parse


def text(name: str) -> Callable[[str], str]:
    """An argparse ``type``: a text of at most the named length, or a one-line refusal."""
    most = LENGTHS[name]

    def parse(value: str) -> str:
        if len(value) > most:
            raise _refused(
                f"at most {most:,} characters, not {len(value):,}")
        return value

    parse.__name__ = "text"
    return parse


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number above 0 (prices, thresholds, summary sizes)."""
    value = _float(text)
    if not value > 0:
        raise _refused(f"must be a number above 0, not {_shown(text)}")
    return value


def nonnegative_float(text: str) -> float:
    """An argparse ``type``: a finite number, 0 or more."""
    value = _float(text)
    if value < 0:
        raise _refused(f"must be 0 or more, not {_shown(text)}")
    return value


def fraction(text: str) -> float:
    """An argparse ``type``: a number above 0 and at most 1 (the ``first_cut`` setting's rule)."""
    value = _float(text)
    if not 0 < value <= 1:
        raise _refused(f"must be above 0 and at most 1, not {_shown(text)}")
    return value


def _refused(message: str) -> Exception:
    """The error argparse prints as ``argument --flag: <message>`` (argparse loads here, so the
    MCP server, which reads only the tables, never loads it for them)."""
    import argparse

    return argparse.ArgumentTypeError(message)


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _refused(f"must be a number, not {_shown(text)}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise _refused(f"must be a finite number, not {_shown(text)}")
    return value


def _shown(text: str) -> str:
    """A bad value quoted for the message, cut to 40 characters."""
    return repr(text if len(text) <= 40 else text[:39] + "…")


def at_most(name: str, append: bool = False) -> type:
    """An argparse ``action`` for a flag given several values (``nargs``) or several times
    (``append``): at most the named count of them, each at most an id's length."""
    import argparse

    most = LENGTHS[name]

    class AtMost(argparse._AppendAction if append else argparse._StoreAction):
        def __call__(self, parser, namespace, values, option_string=None):
            super().__call__(parser, namespace, values, option_string)
            given = getattr(namespace, self.dest) or []
            if len(given) > most:
                raise argparse.ArgumentError(self, f"at most {most} of these, not {len(given)}")

    return AtMost
