"""The stats report (docs/tools.md, "The stats report"): saved history, the latest request, cache
totals.

Works for a ledger session (conversations sent through ``select_context``) and for an agent's
session file. Numbers use fixed en-US grouping; a missing value prints ``unavailable``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

LABEL_WIDTH = 21


def _whole(value: Any) -> Any:
    # Estimates carry fractions (characters/4, calibration ratios); a token count is reported
    # whole, rounded up so an estimate never reads as fitting when it does not.
    return math.ceil(value) if isinstance(value, float) and math.isfinite(value) else value


Tokens = Annotated[int, BeforeValidator(_whole)]
"""A token count as an int, whatever arithmetic produced it (``128000.0`` becomes ``128000``)."""


class ProxyFigures(BaseModel):
    """A proxied conversation's running totals (index/home/proxied.py): requests forwarded, tokens
    sent against tokens in the full history (characters/4 of the bodies), how often the cut
    advanced, and the share of request bytes that repeated the previous request's prefix."""

    model_config = ConfigDict(frozen=True)

    api: str
    requests: int
    sent_tokens: int
    full_tokens: int
    cut_advances: int
    prefix_share: float | None
    # recovery calls the proxy answered in band, and how many of them returned something
    inband_calls: int = 0
    inband_found: int = 0


class Stats(BaseModel):
    """The report's figures; also the structured output of the ``paging_stats`` tool."""

    model_config = ConfigDict(frozen=True)

    session: str
    enabled: bool
    stored_bytes: int | None
    history_tokens: int | None
    input_tokens: Tokens | None
    input_measured: bool
    budget_tokens: Tokens | None
    model_window: Tokens | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    mode: str | None = None
    evicted_messages: int | None = None
    distilled_outputs: int = 0
    omitted_exchanges: int = 0
    dropped_images: int = 0
    distilled_saved_characters: int = 0
    distilled_saved_tokens: int = 0
    distill_judges: dict[str, int] = {}
    proxy: ProxyFigures | None = None

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


def _grouped(value: float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{int(value):,}"


def _size(size: int | None) -> str:
    if size is None:
        return "unavailable"
    if size < 1024:
        return f"{size} B"
    if size < 1 << 20:
        return f"{size / 1024:.2f} KiB"
    return f"{size / (1 << 20):.2f} MiB"


def _row(label: str, value: str) -> str:
    return f"  {label:<{LABEL_WIDTH}}{value}"


NOT_PAGED = ("  An agent's own session file: its requests did not go through this tool. "
             "Requests paged\n  by `context-paging proxy` or select_context are reported "
             "under their ledger: session.")


def _share(part: float | None, whole: float | None) -> str:
    return "" if part is None or not whole else f"   ({part / whole * 100:.1f}% used)"


def render(stats: Stats) -> str:
    def maybe(value: float | None, prefix: str = "") -> str:
        return "unavailable" if value is None else prefix + _grouped(value)

    # Only a ledger session's requests are chosen by the window; an agent's session file holds
    # what the agent sent, so its budget is the configured one, not one it was held to.
    paged = stats.session.startswith("ledger:")
    budget = maybe(stats.budget_tokens)
    if stats.budget_tokens is not None:
        if not paged:
            budget += "   (configured; not applied to this session)"
        elif not stats.enabled:
            budget += "   (inactive)"
        else:
            budget += _share(stats.input_tokens, stats.budget_tokens)
    window = maybe(stats.model_window) + _share(stats.input_tokens, stats.model_window)
    if paged:
        head = [f"Context paging: {'on' if stats.enabled else 'off'}   ({stats.session})"]
    else:
        head = [f"Context paging: not paged by this tool   ({stats.session})", NOT_PAGED]
    lines = [
        *head,
        "",
        "SESSION — complete saved history",
        _row("Stored size", _size(stats.stored_bytes)),
        _row("History tokens", maybe(stats.history_tokens, "~")),
        "",
        "CONTEXT — latest model request",
        _row("Input tokens", maybe(stats.input_tokens, "" if stats.input_measured else "~")),
        _row("Paging budget", budget),
        _row("Model window", window),
    ]
    if stats.mode is not None:
        lines.append(_row("Selection", f"{stats.mode}, {stats.evicted_messages or 0} evicted"))
    lines += [
        "",
        "CACHE — whole-session totals",
        _row("Tokens read", maybe(stats.cache_read_tokens)),
        _row("Tokens written", maybe(stats.cache_write_tokens)),
    ]
    if stats.distilled_outputs or stats.omitted_exchanges or stats.dropped_images:
        judges = ", ".join(f"{name} {count}" for name, count in stats.distill_judges.items())
        lines += ["", "DISTILLATION",
                  _row("Outputs distilled", _grouped(stats.distilled_outputs)),
                  _row("Exchanges omitted", _grouped(stats.omitted_exchanges)),
                  _row("Images dropped", _grouped(stats.dropped_images)),
                  _row("Characters saved", _grouped(stats.distilled_saved_characters)),
                  _row("Tokens saved", _grouped(stats.distilled_saved_tokens)),
                  _row("Decisions by judge", judges or "none")]
    if stats.proxy is not None:
        p = stats.proxy
        less = (f"   ({(1 - p.sent_tokens / p.full_tokens) * 100:.1f}% less)"
                if p.full_tokens else "")
        share = "unavailable" if p.prefix_share is None else f"{p.prefix_share * 100:.1f}%"
        lines += ["", "PROXY — requests forwarded (characters/4 of the bodies)",
                  _row("Requests", f"{_grouped(p.requests)} ({p.api})"),
                  _row("Tokens sent", f"~{_grouped(p.sent_tokens)} of "
                       f"~{_grouped(p.full_tokens)} in full history{less}"),
                  _row("Cut advances", _grouped(p.cut_advances)),
                  _row("Repeated prefix", share)]
        if p.inband_calls:
            lines.append(_row("Recovery in band", f"{_grouped(p.inband_calls)} calls, "
                              f"{_grouped(p.inband_found)} returned something"))
    return "\n".join(lines)
