"""A session's window state between calls, as one typed value.

Saved after every ``select_context`` call in ``CONTEXT_PAGING_HOME/state/<session>.json``
(``Ledger.save_state``) and read back by the next call, in this process or after a restart, so a
restarted server returns the same window. What it holds:

* ``settings``: the (model, model window) the cut and the calibration anchor belong to; a call
  with other settings starts both afresh (upstream resets on a model switch);
* ``cut``: the selector's frontier and frozen notice (``paging.select.CutState``);
* ``anchor``: what the last window sent, key and tokens per message, and the resident estimate
  (``paging.calibrate.Anchor``), which the next call's ``usage`` calibrates against and the
  landing of edits compares with (``index.window.landing``);
* ``latest``: the last window's estimate, budget and mode (``paging_stats``, the growth pace);
* ``usage_by_response``: cache read / write tokens per response, by its history id;
* the pace of the window (``requests``, ``growth_steps``, ``growth``), the model window, whether
  the last call was calibrated and how many messages it evicted.

:meth:`SessionState.from_dict` never raises: ``Ledger.load_state`` has already moved a file with
a damaged field aside (``index.ledger.state_problem``); a cut or an anchor that does not parse
reads as none, so a damaged state costs only the cut point and the calibration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from context_paging.index.window.landing import sent_keys, sent_tokens
from context_paging.paging.calibrate import Anchor
from context_paging.paging.select import CutState


@dataclass(frozen=True, slots=True)
class Latest:
    """The last window's figures."""

    estimated_tokens: float | None = None
    budget_tokens: float | None = None
    mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"estimated_tokens": self.estimated_tokens, "budget_tokens": self.budget_tokens,
                "mode": self.mode}


@dataclass(frozen=True, slots=True)
class SessionState:
    settings: tuple[Any, Any] | None = None
    cut: CutState | None = None
    # What was sent last, as saved (the raw value is kept: landing reads its keys even when
    # its token figures do not parse as an anchor, as it always has).
    anchor_value: Mapping[str, Any] | None = None
    latest: Latest | None = None
    usage_by_response: tuple[tuple[str, tuple[Any, Any]], ...] = ()
    model_window: float | None = None
    calibrated: bool = False
    evicted_messages: int | None = None
    requests: int = 0
    growth_steps: tuple[float, int] = (0.0, 0)
    growth: float = 0.0

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> SessionState:
        """The state as ``Ledger.load_state`` returns it (``{}`` when there is none)."""
        settings = value.get("settings")
        cut = None
        if isinstance(settings, list | tuple) and value.get("cut"):
            try:
                cut = CutState.from_dict(value["cut"])
            except (ValueError, TypeError, KeyError):
                cut = None  # a cut this version cannot read: the cut point starts over
        latest = value.get("latest")
        usage = value.get("usage_by_response")
        pair = (settings[0], settings[1]) if isinstance(settings, list | tuple) and len(
            settings) == 2 else None
        return cls(
            settings=pair,
            cut=cut,
            anchor_value=value.get("anchor") if isinstance(value.get("anchor"), dict) else None,
            latest=Latest(latest.get("estimated_tokens"), latest.get("budget_tokens"),
                          latest.get("mode")) if isinstance(latest, dict) else None,
            usage_by_response=tuple((str(k), (v[0], v[1])) for k, v in usage.items()
                                    if isinstance(v, list | tuple) and len(v) == 2)
            if isinstance(usage, dict) else (),
            model_window=value.get("model_window"),
            calibrated=value.get("calibrated") is True,
            evicted_messages=value.get("evicted_messages"),
            requests=_count(value.get("requests")),
            growth_steps=_steps(value.get("growth_steps")),
            growth=_float(value.get("growth")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The saved form (the same keys and values the state file has always held)."""
        return {
            "settings": list(self.settings) if self.settings is not None else None,
            "cut": self.cut.to_dict() if self.cut else None,
            "anchor": dict(self.anchor_value) if self.anchor_value is not None else None,
            "latest": self.latest.to_dict() if self.latest is not None else None,
            "usage_by_response": {k: list(v) for k, v in self.usage_by_response},
            "model_window": self.model_window,
            "calibrated": self.calibrated,
            "evicted_messages": self.evicted_messages,
            "requests": self.requests,
            "growth_steps": list(self.growth_steps),
            "growth": self.growth,
        }

    # --- what a call reads, for its own settings ---------------------------------------------

    def same_settings(self, settings: tuple[Any, Any]) -> bool:
        return self.settings == settings

    def cut_for(self, settings: tuple[Any, Any]) -> CutState | None:
        """The remembered cut, if it belongs to these settings."""
        return self.cut if self.same_settings(settings) else None

    def anchor_for(self, settings: tuple[Any, Any]) -> Anchor | None:
        """The calibration anchor, if it belongs to these settings and parses."""
        if not self.same_settings(settings):
            return None
        return Anchor.from_dict(self.anchor_value)

    def sent_for(self, settings: tuple[Any, Any]) -> list[str | None] | None:
        """The last window's keys, in order, if they belong to these settings."""
        if not self.same_settings(settings):
            return None
        return sent_keys({"anchor": self.anchor_value})

    def sent_tokens(self) -> list[float]:
        return sent_tokens({"anchor": self.anchor_value})

    def usage(self) -> dict[str, list[Any]]:
        return {k: list(v) for k, v in self.usage_by_response}


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def _float(value: Any) -> float:
    try:
        number = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _steps(value: Any) -> tuple[float, int]:
    try:
        return (float(value[0]), int(value[1])) if value else (0.0, 0)
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        return (0.0, 0)
