"""Where the bench scripts find the recorded agent sessions, and a clear exit when they are absent.

The recorded sessions live outside the project (``../shared/fixtures/sessions`` beside the
checkout on the team's machines and in CI); ``CONTEXT_PAGING_FIXTURES`` or a script's
``--fixtures`` points elsewhere. A fresh clone has neither, so a script that needs them stops
with one line naming the folder it looked in instead of measuring an empty corpus.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "CONTEXT_PAGING_FIXTURES"
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "sessions"


def sessions_folder() -> Path:
    """The recorded sessions' folder as configured (it may not exist)."""
    return Path(os.environ.get(ENV) or DEFAULT)


def require(folder: Path, what: str = "recorded sessions",
            hint: str = f"set {ENV} to the folder that holds them") -> Path:
    """``folder`` if it holds at least one ``*.jsonl`` file (or, for other data, exists); else
    exit with a message saying where the script looked."""
    found = folder.is_dir() and (what != "recorded sessions" or any(folder.rglob("*.jsonl")))
    if not found:
        raise SystemExit(f"{what} not found in {folder}; this benchmark needs them ({hint})")
    return folder


def agent_path(roots: dict[str, Path], path: Path) -> Path:
    """Where a recorded session goes under agent roots laid out as each agent names its files
    (``pi/``, ``claude-code/`` or ``codex/`` by its folder), so discovery finds it as it would
    find the agent's own."""
    stem = path.stem
    if path.parent.name == "pi":
        return roots["pi"] / "--work-app--" / f"2026-01-01T00-00-00-000Z_{stem}.jsonl"
    if path.parent.name == "claude-code":
        return roots["claude"] / "-work-app" / f"{stem}.jsonl"
    return roots["codex"] / "2026" / "01" / "01" / f"rollout-{stem}.jsonl"
