"""The ``[distill]`` settings (docs/configuration.md), validated with fall-back to the defaults.

Every upstream setting is here under a snake_case name, with upstream's default and range, plus
``judge`` (``local`` or ``sampling``; docs/distillation.md, "The judges"). Validation follows
upstream's ``normalizeConfig``: a value replaces the default only when it is valid; booleans must be
booleans (never numbers), numbers must be finite and inside the inclusive range, integer keys accept
integral floats (``2.0``), ``exclude_tools`` drops non-string elements silently. Unlike upstream,
every rejected value and every unknown key yields one warning string; the caller logs them (this
module never prints).

Settings that only made sense inside Pi are accepted for parity but have no effect here:
``pin_anthropic_cache`` (cache breakpoints are the host's), ``timeout_ms`` and ``concurrency``
(read by the server's sampling judge, not by the pure core). ``model`` is a hint for the sampling
judge; it keeps upstream's ``provider/id`` shape check but has no default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

TEN_MILLION = 10_000_000
JudgeName = Literal["local", "sampling"]


@dataclass(frozen=True, slots=True)
class DistillConfig:
    enabled: bool = True
    judge: JudgeName = "local"
    model: str | None = None
    min_result_chars: int = 4_000
    min_run_chars: int = 8_000
    keep_whole_threshold: float = 0.7
    focus_whole_threshold: float = 0.6
    chunk_keep_threshold: float = 0.6
    none_threshold: float = 0.5
    max_keep_ratio: float = 0.6
    keep_cited_files: bool = False
    timeout_ms: int = 8_000
    concurrency: int = 6
    max_segment_chars: int = 32_000
    max_chunks_per_segment: int = 40
    exclude_tools: tuple[str, ...] = ("edit", "write")
    distill_errors: bool = True
    history_exchanges: int = 3
    pin_anthropic_cache: bool = True
    mid_run: bool = True
    mid_run_min_age_turns: int = 4
    mid_run_batch_chars: int = 60_000
    mid_run_batch_chars_openai: int = 60_000
    mid_run_chunk_keep_threshold: float = 0.6
    mid_run_break_even: bool = True
    small_result_min_chars: int = 400
    small_keep_threshold: float = 0.45
    prune_exchanges: bool = True
    keep_recent_exchanges: int = 2
    exchange_omit_threshold: float = 0.2
    exchange_break_even: bool = True
    exchange_min_saving_chars: int = 8_000
    image_keep_turns: int = 3

    @classmethod
    def from_mapping(cls, raw: Any) -> tuple[DistillConfig, list[str]]:
        """The settings from a ``[distill]`` table, and one warning per ignored value or key."""
        defaults = cls()
        if raw is None:
            return defaults, []
        if not isinstance(raw, Mapping):
            return defaults, ["[distill] must be a table; using the defaults"]
        values: dict[str, Any] = {}
        warnings: list[str] = []
        for key, value in raw.items():
            check = _CHECKS.get(key) if isinstance(key, str) else None
            if check is None:
                warnings.append(f"unknown setting [distill] {key} was ignored")
                continue
            try:
                values[key] = check(value)
            except ValueError as exc:
                default = getattr(defaults, key)
                warnings.append(f"distill.{key} = {value!r} {exc}; using the default {default!r}")
        return cls(**values), warnings


def check_setting(key: str, value: Any) -> Any:
    """``value`` as :class:`DistillConfig` stores it under ``key``.

    Raises ``ValueError`` with the rule the value broke (``KeyError`` for an unknown key). The
    server's settings loader validates each ``[distill]`` source with this, so both places apply
    the same rules.
    """
    return _CHECKS[key](value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _number(low: float, high: float, integer: bool) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and low <= value <= high
            and (not integer or float(value).is_integer())
        )
        if not ok:
            kind = "an integer" if integer else "a number"
            raise ValueError(f"must be {kind} from {low:g} to {high:g}")
        return int(value) if integer else float(value)

    return check


def _judge(value: Any) -> str:
    if value not in ("local", "sampling"):
        raise ValueError("must be 'local' or 'sampling'")
    return value


def _model(value: Any) -> str | None:
    # Upstream's check: a string whose first "/" is at index > 0 (before trimming), and a
    # non-empty id after it; the trimmed string is stored. ``None`` is the default (no hint),
    # so a resolved settings table that carries it passes without a warning.
    if value is None:
        return None
    if isinstance(value, str) and value.find("/") > 0:
        trimmed = value.strip()
        provider, _, model_id = trimmed.partition("/")
        if provider and model_id:
            return trimmed
    raise ValueError("must be 'provider/id'")


def _tool_names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("must be a list of tool names")
    return tuple(v for v in value if isinstance(v, str))


_UNIT = _number(0, 1, integer=False)


def _int(low: int, high: int) -> Callable[[Any], Any]:
    return _number(low, high, integer=True)


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "enabled": _boolean,
    "judge": _judge,
    "model": _model,
    "min_result_chars": _int(0, TEN_MILLION),
    "min_run_chars": _int(0, TEN_MILLION),
    "keep_whole_threshold": _UNIT,
    "focus_whole_threshold": _UNIT,
    "chunk_keep_threshold": _UNIT,
    "none_threshold": _UNIT,
    "max_keep_ratio": _UNIT,
    "keep_cited_files": _boolean,
    "timeout_ms": _int(500, 600_000),
    "concurrency": _int(1, 32),
    "max_segment_chars": _int(2_000, 200_000),
    "max_chunks_per_segment": _int(2, 60),
    "exclude_tools": _tool_names,
    "distill_errors": _boolean,
    "history_exchanges": _int(0, 10),
    "pin_anthropic_cache": _boolean,
    "mid_run": _boolean,
    "mid_run_min_age_turns": _int(1, 100),
    "mid_run_batch_chars": _int(0, TEN_MILLION),
    "mid_run_batch_chars_openai": _int(0, TEN_MILLION),
    "mid_run_chunk_keep_threshold": _UNIT,
    "mid_run_break_even": _boolean,
    "small_result_min_chars": _int(0, TEN_MILLION),
    "small_keep_threshold": _UNIT,
    "prune_exchanges": _boolean,
    "keep_recent_exchanges": _int(0, 100),
    "exchange_omit_threshold": _UNIT,
    "exchange_break_even": _boolean,
    "exchange_min_saving_chars": _int(0, TEN_MILLION),
    "image_keep_turns": _int(0, 1_000),
}

assert set(_CHECKS) == {f.name for f in fields(DistillConfig)}, "every setting is validated"
