"""Shared test set-up: fixture paths, and a private CONTEXT_PAGING_HOME for every test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
FIXTURES = PROJECT.parent / "shared" / "fixtures" / "sessions"


def fixture(name: str) -> Path:
    """A session fixture by file name (searched in the pi, claude-code and codex folders)."""
    for folder in ("pi", "claude-code", "codex"):
        candidate = FIXTURES / folder / name
        if candidate.exists():
            return candidate
    raise FileNotFoundError(name)


ALL_FIXTURES = sorted(p for p in FIXTURES.rglob("*.jsonl"))


def ledger_home(tmp_path: Path, **distill: object) -> Path:
    """A home for ledger-only tests: no agent session roots, the characters/4 estimator, and
    the given ``[distill]`` settings."""
    home = tmp_path / "home"
    home.mkdir()
    empty = tmp_path / "none"
    settings = "".join(f"{key} = {json.dumps(value)}\n" for key, value in distill.items())
    (home / "config.toml").write_text(
        f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
        f'[paging]\nestimator = "chars4"\n[distill]\n{settings}'
    )
    return home


@pytest.fixture(autouse=True)
def _private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTEXT_PAGING_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def anyio_backend():
    return "asyncio"
