"""A summary of decisions: what was distilled, what it saved, which judges decided.

Only the decision in force per target counts (the last one given). Saved characters come from
the decisions themselves. Saved tokens are measured when the conversation and a text counter
are given: the messages a decision changed are counted before and after :func:`apply` with
:func:`paging.tokens.counted_tokens` (images by size). Otherwise each decision's own
``saved_tokens`` counts (the server measures it when it makes the decision), or its characters
/ 4 when it has none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from context_paging.paging.distill.apply import apply
from context_paging.paging.distill.conversation import Entry
from context_paging.paging.distill.model import Decision
from context_paging.paging.distill.plan import latest
from context_paging.paging.tokens import counted_tokens


@dataclass(frozen=True, slots=True)
class DistillStats:
    outputs_distilled: int = 0  # large outputs shortened to their needed chunks
    outputs_removed: int = 0  # large or small outputs replaced by a stub
    exchanges_omitted: int = 0
    images_dropped: int = 0
    kept: int = 0  # items judged and left as they are
    saved_chars: int = 0
    saved_tokens: int = 0
    judges: tuple[tuple[str, int], ...] = ()  # decisions per judge name, most used first


def summarize(
    decisions: Iterable[Decision],
    tokens: Callable[[str], int] | None = None,
    entries: Sequence[Entry] | None = None,
) -> DistillStats:
    in_force = list(latest(decisions).values())
    actions = Counter(d.action for d in in_force)
    saved_chars = sum(d.saved_chars for d in in_force)
    if tokens is not None and entries is not None:
        saved_tokens = _measured(entries, in_force, tokens)
    else:  # measured per decision when the server could, else characters / 4
        saved_tokens = sum(
            d.saved_tokens if d.saved_tokens is not None else round(d.saved_chars / 4)
            for d in in_force if d.edits
        )
    judges = Counter(d.judge for d in in_force)
    return DistillStats(
        outputs_distilled=actions["distill"],
        outputs_removed=actions["remove"],
        exchanges_omitted=actions["omit_exchange"],
        images_dropped=actions["drop_image"],
        kept=actions["keep"],
        saved_chars=saved_chars,
        saved_tokens=saved_tokens,
        judges=tuple(sorted(judges.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def _measured(entries: Sequence[Entry], decisions: list[Decision],
              tokens: Callable[[str], int]) -> int:
    after = apply(entries, decisions)
    before_ids = {id(m) for _, m in entries}
    after_ids = {id(m) for _, m in after}
    removed = sum(counted_tokens(dict(m), tokens) for _, m in entries if id(m) not in after_ids)
    added = sum(counted_tokens(dict(m), tokens) for _, m in after if id(m) not in before_ids)
    return removed - added
