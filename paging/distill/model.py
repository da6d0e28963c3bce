"""The values that pass between planning, judging, deciding and applying.

* :class:`Question` — the work a judge weighs chunks against (the run's request, its final
  answer or the agent's notes, the user's next request, earlier conversation).
* :class:`JudgeContext` — what one judge call is about (one segment of a large output, or a
  batch of small outputs or of old exchanges).
* :class:`Verdict` — a judge's answer for one segment: a score in [0, 1] per chunk id, or
  ``scores=None`` for "no answer" (any failure means keep). ``keep_whole``/``focus`` carry
  upstream's classifier answers for backends that give them
  (docs/distillation.md, "Decisions").
* :class:`Decision` — what to do with one tool output or exchange, persisted by the server so
  that the same output gets the same replacement bytes on every later request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Phase = Literal["run-end", "mid-run"]
Kind = Literal["output", "small", "exchange", "image"]
Action = Literal["keep", "distill", "remove", "omit_exchange", "drop_image"]
SegmentKind = Literal["output", "small", "exchange"]
ACTIONS: tuple[Action, ...] = ("keep", "distill", "remove", "omit_exchange", "drop_image")


@dataclass(frozen=True, slots=True)
class Question:
    request: str  # the run's prompt plus steering messages
    answer: str = ""  # run end: the final answer
    notes: str = ""  # run end: the agent's texts during the run; mid-run: the earlier ones
    latest_note: str = ""  # mid-run: the agent's latest text
    follow_up: str = ""  # run end: the user's next request, already sent
    history: tuple[tuple[str, str], ...] = ()  # earlier (user, assistant) exchanges
    first_request: str = ""
    summary: str = ""  # the latest compaction summary before the run


@dataclass(frozen=True, slots=True)
class JudgeContext:
    kind: SegmentKind
    phase: Phase
    labels: tuple[str, ...]  # output: its tool label; small/exchange: one per chunk
    superseded: tuple[str, ...] = ()  # same indexing as labels; "" when current
    failed: tuple[bool, ...] = ()  # same indexing; the tool reported an error
    tool: str = ""
    arguments: str = ""  # the call's arguments as JSON (outputs)
    later_calls: tuple[str, ...] = ()  # labels of the calls made after this output
    total_lines: int = 0
    part: int = 1
    parts: int = 1


@dataclass(frozen=True, slots=True)
class Verdict:
    scores: Mapping[int, float] | None  # chunk index -> P(keep); None = no answer
    judge: str = "local"
    failure: str = ""  # "error" | "timeout" | "no-answer" when there is no answer
    keep_whole: float | None = None
    focus: str | None = None  # "whole" | "none" | "chunk_<index + 1>"
    focus_scores: Mapping[str, float] = field(default_factory=dict)


def fingerprint(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Decision:
    """One tool output (``target`` = its tool call id) or exchange (the prompt's history id).

    ``replacement`` is the exact text that replaces the output (``distill``/``remove``), the
    prompt (``omit_exchange``) or leads the output's text blocks (``drop_image``); ``original``
    fingerprints what it was made from, so it is applied only to that content. ``judged`` is
    False after a judge failure or a break-even deferral: the item is asked again later.
    """

    target: str
    kind: Kind
    action: Action
    reason: str
    phase: Phase
    run: str  # history id of the prompt of the run it was judged for
    judge: str  # "local", "sampling", … or "rules" (size and age rules, no judge)
    judged: bool = True
    kept: tuple[int, ...] = ()
    scores: tuple[tuple[int, float], ...] = ()
    original: str = ""
    replacement: str = ""
    omitted: tuple[str, ...] = ()  # omit_exchange: history ids left out after the prompt
    label: str = ""
    before_chars: int = 0
    after_chars: int = 0
    saved_tokens: int | None = None  # measured by the server with its tokenizer, when it can

    @property
    def edits(self) -> bool:
        return self.action != "keep"

    @property
    def saved_chars(self) -> int:
        return max(0, self.before_chars - self.after_chars) if self.edits else 0

    def to_dict(self) -> dict[str, Any]:
        # Field by field: every field is a str, number, bool, None or a tuple made a list here,
        # which ``asdict``'s deep walk (a tenth of a cold call's distillation) would only copy.
        value = {name: getattr(self, name) for name in _DECISION_FIELDS}
        value["kept"] = list(self.kept)
        value["scores"] = [[i, s] for i, s in self.scores]
        value["omitted"] = list(self.omitted)
        return value

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Decision:
        data = dict(value)
        if data.get("action") not in ACTIONS:
            raise ValueError(f"unknown distill action {data.get('action')!r}")
        data["kept"] = tuple(int(i) for i in data.get("kept", ()))
        data["scores"] = tuple((int(i), float(s)) for i, s in data.get("scores", ()))
        data["omitted"] = tuple(str(i) for i in data.get("omitted", ()))
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


_DECISION_FIELDS = tuple(f.name for f in fields(Decision))
