"""Budget, target and model limit of one selection, and the selector's error
(docs/selection.md, "Limits").

* ``token_budget`` — the configured rolling budget, a positive safe integer (JavaScript's
  ``Number.isSafeInteger``: an integral number up to 2**53 − 1; an integral float counts, a
  boolean or a string does not).
* ``trim_to_tokens`` — the FIFO destination when the budget is crossed. ``None`` means omitted
  and derives upstream's adaptive default ``max(1, floor(budget · 5/8))``; an explicit value
  must be a positive safe integer. (JavaScript's ``null`` is invalid upstream; in Python
  ``None`` is the only way to say "omitted".)
* ``model_window`` — the model's context window, optional; when given it must be finite and
  positive, and may be fractional (16,000.5).

The effective budget is ``min(budget, window)``; the target is scaled by the same ratio with
exact integer arithmetic when the effective budget is an integer (Python ints are exact, as
upstream's BigInt is), else with a float floor; a target at or above the budget means "no
headroom" and equals the effective budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

MAX_SAFE_INTEGER = 2**53 - 1
DEFAULT_TOKEN_BUDGET = 128_000


class ContextSelectionError(Exception):
    """A selection the host must not send; ``code`` is upstream's error code
    (docs/selection.md, "Errors").

    Limit errors carry 0/0/0 as upstream; structure errors carry no numbers.
    """

    def __init__(
        self,
        code: str,
        message: str,
        resident_tokens: float | None = None,
        estimated_tokens: float | None = None,
        budget_tokens: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.resident_tokens = resident_tokens
        self.estimated_tokens = estimated_tokens
        self.budget_tokens = budget_tokens


@dataclass(frozen=True)
class Limits:
    budget_tokens: float
    target_tokens: float
    model_limit: float


def _safe_integer(value: object) -> int | None:
    """The value as an int if JavaScript's ``Number.isSafeInteger`` would accept it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    number = int(value)
    return number if abs(number) <= MAX_SAFE_INTEGER else None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def default_trim_to_tokens(token_budget: int) -> int:
    """Upstream's adaptive target: 5/8 of the budget, at least 1 (128,000 → 80,000)."""
    return max(1, token_budget * 5 // 8)


def _limit_error(code: str, message: str) -> ContextSelectionError:
    return ContextSelectionError(code, message, 0, 0, 0)


def context_limits(
    token_budget: object, trim_to_tokens: object = None, model_window: object = None
) -> Limits:
    """Validate the configured limits and compute their effective values."""
    if model_window is not None and not (
        _is_number(model_window) and math.isfinite(model_window) and model_window > 0
    ):
        raise _limit_error(
            "INVALID_MODEL_CONTEXT",
            f"The model context-window estimate {model_window!r} is not a finite positive number.",
        )
    budget = _safe_integer(token_budget)
    if budget is None or budget <= 0:
        raise _limit_error(
            "INVALID_TOKEN_BUDGET",
            f"The token budget {token_budget!r} is not a positive safe integer.",
        )
    target = default_trim_to_tokens(budget) if trim_to_tokens is None else _safe_integer(
        trim_to_tokens
    )
    if target is None or target <= 0:
        raise _limit_error(
            "INVALID_TRIM_TARGET",
            f"The trim target {trim_to_tokens!r} is not a positive safe integer.",
        )
    effective: float = budget if model_window is None else min(budget, model_window)
    integral = _safe_integer(effective)
    if integral is not None:
        effective = integral  # 64,000.0 is the integer 64,000, as in JavaScript
    return Limits(
        budget_tokens=effective,
        target_tokens=_scaled_target(target, budget, effective),
        model_limit=math.inf if model_window is None else model_window,
    )


def _scaled_target(target: int, budget: int, effective: float) -> float:
    if target >= budget:
        return effective
    if isinstance(effective, int):
        return max(1, target * effective // budget)
    return max(1, math.floor(target / budget * effective))


def leave_room(limits: Limits, first_target: float, resident: float) -> tuple[Limits, float]:
    """The trim target and the first cut's target, raised where the resident input (system
    prompt, tools, standing messages) would leave the conversation almost no room after a cut.

    A cut trims the whole input to its target. With a target at or below the resident input
    (Claude Code sends 20,000 to 31,000 tokens of it) a cut evicts all it can and the next
    request or the one after crosses the budget again, re-writing the prompt cache each time.
    So a trim target is at least ``resident + (budget − resident) / 2`` and a first-cut target
    at least ``resident + (budget − resident) / 4``; where the resident input is small neither
    floor is reached and the configured targets stand (docs/agents.md)."""
    room = limits.budget_tokens - resident
    if not (math.isfinite(room) and room > 0 and resident > 0):
        return limits, first_target
    trim = resident + room / 2
    if limits.target_tokens < trim:
        limits = replace(limits, target_tokens=trim)
    return limits, min(limits.target_tokens, max(first_target, resident + room / 4))
