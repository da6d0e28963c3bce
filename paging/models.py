"""Context windows of the models agents name in their session files, for reports.

Only used to show a window where the session file names its model and does not state the window
itself. Prefixes are matched longest first; a name ending ``[1m]`` (Claude Code's one-million
token variants) has that window. Figures: Anthropic's published 200,000-token window for its
Claude models, and what Codex writes as ``model_context_window`` next to its GPT-5 models.
"""

from __future__ import annotations

WINDOWS = {
    "claude-": 200_000,
    "gpt-5.5": 258_400,
    "gpt-5": 272_000,
}
ONE_MILLION = "[1m]"


def model_window(model: str | None) -> int | None:
    """The context window of ``model`` (``provider/id`` or a bare id), None when unknown."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].strip().lower()
    if name.endswith(ONE_MILLION):
        return 1_000_000
    for prefix in sorted(WINDOWS, key=len, reverse=True):
        if name.startswith(prefix):
            return WINDOWS[prefix]
    return None
