"""Applying decisions to a conversation: a pure function, byte-stable by construction.

``apply(entries, decisions)`` returns new ``(history_id, message)`` entries. The replacement
texts were rendered once, when the decision was made, and travel inside the decision; applying
only substitutes them. So the same entries and the same decisions give the same output bytes on
every call, in every process and after a restart (decisions round-trip through
``Decision.to_dict``/``from_dict``), and a later change to the render wording never changes a
window the provider has already cached.

Rules:

* Only messages a decision names are rebuilt; every other entry is returned as the very same
  object. A rebuilt message keeps every key of the original in its order and replaces only
  ``content``.
* A decision applies only to the content it was made on (``Decision.original`` fingerprints the
  text and image data): a message the host changed since, or one already replaced, is left
  alone. That also makes ``apply`` idempotent.
* ``distill``/``remove``: the tool result's content becomes one text block.
  ``drop_image``: the stub, then the result's own text blocks; images go.
  ``omit_exchange``: the prompt's content becomes the stub, and the editable entries whose ids
  the decision lists are left out (system messages, bash executions and summaries stay). It is
  all or nothing: if leaving them out would separate a tool call from its result, the exchange
  stays whole, so no provider ever sees a call without its result.
* For one target, the last decision given wins; ``keep`` changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from context_paging.paging.distill.conversation import (
    EDITABLE_ROLES,
    Entry,
    Message,
    blocks,
    role,
    tool_calls,
)
from context_paging.paging.distill.model import Decision
from context_paging.paging.distill.plan import latest, message_fingerprint


@dataclass(frozen=True, slots=True)
class _Index:
    """Where things are, built once per call so each decision costs only its own span."""

    results: dict[str, list[int]]  # tool call id -> tool results
    callers: dict[str, list[int]]  # tool call id -> assistants that made the call
    prompts: dict[str, list[int]]  # history id -> user messages
    editable: dict[str, list[int]]  # history id -> editable messages

    @classmethod
    def of(cls, entries: Sequence[Entry]) -> _Index:
        index = cls({}, {}, {}, {})
        for i, (history_id, message) in enumerate(entries):
            kind = role(message)
            if kind == "toolResult" and isinstance(message.get("toolCallId"), str):
                index.results.setdefault(message["toolCallId"], []).append(i)
            for call in tool_calls(message):
                index.callers.setdefault(call["id"], []).append(i)
            if kind == "user":
                index.prompts.setdefault(str(history_id), []).append(i)
            if kind in EDITABLE_ROLES:
                index.editable.setdefault(str(history_id), []).append(i)
        return index


def apply(entries: Sequence[Entry], decisions: Iterable[Decision]) -> list[Entry]:
    return applied(entries, changed(entries, decisions))


def applied(entries: Sequence[Entry], changes: Mapping[int, Message | None]) -> list[Entry]:
    """``entries`` with the result of :func:`changed` put in (for a caller that needs both)."""
    if not changes:
        return list(entries)
    return [
        entry if i not in changes else (entry[0], changes[i])
        for i, entry in enumerate(entries)
        if changes.get(i, entry[1]) is not None
    ]


def changed(entries: Sequence[Entry], decisions: Iterable[Decision],
            prints: Callable[[int], str] | None = None) -> dict[int, Message | None]:
    """What :func:`apply` changes, by entry position: the new message, or None when the entry
    is left out (an omitted exchange). Positions not in the result stay as they are.
    ``prints``: the ``message_fingerprint`` of the entry at a position, from a caller that
    remembers them (every edit in force checks its message's fingerprint on every call)."""
    in_force = [d for d in latest(decisions).values() if d.edits]
    if not in_force:
        return {}
    if prints is None:
        def prints(i: int) -> str:
            return message_fingerprint(entries[i][1])
    index = _Index.of(entries)
    replaced: dict[int, Message] = {}
    dropped: set[int] = set()
    for decision in in_force:
        if decision.action == "omit_exchange":
            _omit(entries, index, decision, replaced, dropped, prints)
            continue
        for i in index.results.get(decision.target, []):
            message = entries[i][1]
            if prints(i) != decision.original:
                continue
            text = {"type": "text", "text": decision.replacement}
            if decision.action == "drop_image":
                content = [text, *(b for b in blocks(message) if b.get("type") == "text")]
            else:
                content = [text]
            replaced[i] = _with_content(message, content)
    return {**replaced, **dict.fromkeys(dropped)}


def _with_content(message: Message, content: list) -> dict:
    return {key: (content if key == "content" else value) for key, value in message.items()}


def _omit(
    entries: Sequence[Entry], index: _Index, decision: Decision,
    replaced: dict[int, Message], dropped: set[int], prints: Callable[[int], str],
) -> None:
    matching = [i for i in index.prompts.get(decision.target, [])
                if prints(i) == decision.original]
    if len(matching) != 1:
        return  # changed since, already applied, or ambiguous: leave the exchange whole
    prompt = matching[0]
    omitted = set(decision.omitted)
    end = next((i for i in range(prompt + 1, len(entries))
                if role(entries[i][1]) == "user" and str(entries[i][0]) not in omitted),
               len(entries))  # the next request: the exchange ends before it
    span = {i for hid in omitted for i in index.editable.get(hid, []) if prompt < i < end}
    if not _closed(entries, index, span):
        return
    replaced[prompt] = _with_content(
        entries[prompt][1], [{"type": "text", "text": decision.replacement}]
    )
    dropped.update(span)


def _closed(entries: Sequence[Entry], index: _Index, span: set[int]) -> bool:
    """No tool call in ``span`` has its result outside it, and no result its call."""
    for i in span:
        message = entries[i][1]
        for call in tool_calls(message):
            if any(r not in span for r in index.results.get(call["id"], [])):
                return False
        call_id = message.get("toolCallId") if role(message) == "toolResult" else None
        if isinstance(call_id, str) and any(a not in span for a in index.callers.get(call_id, [])):
            return False
    return True
