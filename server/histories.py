"""The one History of a process, built from the settings, and the ledger sessions it deletes (by
``[ledger] keep_days`` when it is built, or by ``forget``): a module of its own, so that the proxy
and the terminal commands get it without importing the MCP server and its SDK."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from context_paging.paging.distill import DistillConfig
from context_paging.server.config import Settings

if TYPE_CHECKING:
    from context_paging.index.home.forget import Forgotten
    from context_paging.index.service import History
    from context_paging.server.warmup import LoadingHistory

log = logging.getLogger("context_paging.server")


def make_history(settings: Settings, distill: DistillConfig | None = None) -> History:
    """The one History of a process, configured from settings (``distill``: the ``[distill]``
    settings, when the caller has read them already)."""
    from context_paging.index.service import History
    from context_paging.index.window.pipeline import ContextSettings
    from context_paging.server.tokens import text_counter

    paging = settings.values["paging"]
    distill = distill_config(settings) if distill is None else distill
    context = ContextSettings(enabled=paging["enabled"], token_budget=paging["token_budget"],
                              trim_to_tokens=paging["trim_to_tokens"],
                              first_cut=paging["first_cut"],
                              estimator=paging["estimator"], distill=distill)
    apply_retention(settings)  # [ledger] keep_days
    return History(settings.roots, settings.home, context, text_counter)


def distill_config(settings: Settings) -> DistillConfig:
    """The ``[distill]`` settings, with a warning on stderr for each value that fell back."""
    distill, warnings = DistillConfig.from_mapping(settings.values["distill"])
    for warning in warnings:
        log.warning("%s", warning)
    return distill


def loading_history(settings: Settings, then: Callable[[], None] | None = None
                    ) -> LoadingHistory:
    """``serve``'s History: loading on a background thread from now on (server/warmup.py);
    ``then`` runs on that thread once it is loaded."""
    from context_paging.server.warmup import LoadingHistory

    distill = distill_config(settings)
    return LoadingHistory(lambda: make_history(settings, distill), distill, then).start()


def forget_sessions(settings: Settings, sessions: list[str]) -> list[Forgotten]:
    from context_paging.index.home.forget import forget
    from context_paging.index.search.store import SearchIndex

    index = settings.home / "index"
    store = SearchIndex(index) if index.is_dir() else None
    try:
        return [forget(settings.home, ref, store.forget if store else None) for ref in sessions]
    finally:
        if store is not None:
            store.close()


def apply_retention(settings: Settings) -> None:
    """Delete the ledger sessions past ``[ledger] keep_days`` (when a server or proxy starts),
    one log line for what went."""
    from context_paging.index.home.forget import expired

    sessions = expired(settings.home, settings.get("ledger", "keep_days"))
    if sessions:
        forget_sessions(settings, sessions)
        log.warning("deleted %d ledger session(s) not written for %s days ([ledger] keep_days)",
                    len(sessions), settings.get("ledger", "keep_days"))
