"""The window said by position: the host's own messages as ranges of its conversation, only the
messages the server made or changed sent whole (select_context's ``reply_form="positions"``).

A host that sends only what is new (``after_id``) already holds every message the window is
mostly made of; echoing them back costs a reply of hundreds of KB, written, piped and parsed on
every call. In this form the reply's ``window`` lists, in window order, either
``{"from": a, "to": b}`` — the host's messages ``conversation[a:b]`` (a slice: ``b`` is not
included), sent unchanged — or ``{"message": k}`` — ``messages[k]`` of the reply, a message
the server made (the notice) or changed (distilled, replaced, split or merged). A host rebuilds
the window with::

    window, made = [], reply["messages"]
    for p in reply["window"]:
        window += conversation[p["from"]:p["to"]] if "from" in p else [made[p["message"]]]

A window message counts as the host's own only when it is the very object at that position of
the conversation the window was rendered from (``paging.formats.render`` passes kept host
messages through as they are, and builds a new dict for anything it changes), so the rebuilt
window is the messages form's, value for value. Anything else — equal or not — is sent whole.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from context_paging.paging.limits import ContextSelectionError

FORMS = ("messages", "positions")


def check(reply_form: Any) -> None:
    """A coded error for a form that is not one of :data:`FORMS`."""
    if reply_form not in FORMS:
        raise ContextSelectionError("INVALID_REPLY_FORM", f"reply_form must be one of "
                                    f"{', '.join(map(repr, FORMS))}, not {reply_form!r}")


def positions(window: Sequence[Any], conversation: Sequence[Any]) -> tuple[list[Any],
                                                                           list[dict[str, int]]]:
    """(the messages to send whole, the window's parts), for ``window`` rendered from
    ``conversation``."""
    made: list[Any] = []
    parts: list[dict[str, int]] = []
    where: dict[int, list[int]] | None = None  # id of a host message -> its positions
    after = 0  # the position just past the last host message placed: the likeliest next one
    for message in window:
        if after < len(conversation) and conversation[after] is message:
            at = after
        else:
            if where is None:
                where = {}
                for k, host in enumerate(conversation):
                    where.setdefault(id(host), []).append(k)
            found = where.get(id(message))
            if found is None:
                parts.append({"message": len(made)})
                made.append(message)
                continue
            # The same object at several positions (a library caller may repeat one dict):
            # any of them gives the same value; the first after the last one keeps ranges long.
            at = found[min(bisect_left(found, after), len(found) - 1)]
        last = parts[-1] if parts else None
        if last is not None and last.get("to") == at:
            last["to"] = at + 1
        else:
            parts.append({"from": at, "to": at + 1})
        after = at + 1
    return made, parts


def rebuild(parts: Sequence[dict[str, int]], messages: Sequence[Any],
            conversation: Sequence[Any]) -> list[Any]:
    """The window from its parts: what a host does with a positions-form reply (the three lines
    of the module docstring)."""
    window: list[Any] = []
    for part in parts:
        window += (conversation[part["from"]:part["to"]] if "from" in part
                   else [messages[part["message"]]])
    return window
