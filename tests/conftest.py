"""Shared test set-up: session files, and a private CONTEXT_PAGING_HOME for every test.

Two kinds of session files feed the tests:

* the project's own **samples** in ``tests/fixtures/sessions`` (written by
  ``tests/fixtures/make_samples.py``), committed, so a fresh clone exercises every reader, tool
  and paging path with nothing beside it;
* the **recorded** sessions of real agents, kept outside the project in
  ``../shared/fixtures/sessions`` (or wherever ``CONTEXT_PAGING_FIXTURES`` points). Tests that
  need them carry the ``recorded`` marker; where the folder is missing they are skipped, and the
  run ends with one line saying where the folder was looked for and how many tests that skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fixtures.make_samples import SAMPLES

PROJECT = Path(__file__).resolve().parent.parent
SAMPLES_DIR = PROJECT / "tests" / "fixtures" / "sessions"
FIXTURES_ENV = "CONTEXT_PAGING_FIXTURES"
FIXTURES = Path(os.environ.get(FIXTURES_ENV) or PROJECT.parent / "shared" / "fixtures" / "sessions")
HAVE_RECORDED = FIXTURES.is_dir()
RECORDED_FOLDERS = ("pi", "claude-code", "codex")
_SKIP_REASON = f"recorded sessions not found in {FIXTURES}"

recorded = pytest.mark.recorded

# The recorded files by folder. Listed rather than globbed so that the tests parametrized over
# them exist (and are counted as skipped) where the folder is missing; a recorded test checks
# that the folder holds exactly these.
RECORDED = {
    "pi": [
        "pi-v1-real-compaction-with-concatenated-line.jsonl",
        "pi-v1-real-large-session-aborted-and-model-change.jsonl",
        "pi-v1-real-two-compactions-bash-exec.jsonl",
        "pi-v3-SYNTHETIC-branching-compaction-unknown-entry.jsonl",
        "pi-v3-real-redacted-smoke-session-info.jsonl",
    ],
    "claude-code": [
        "cc-2.0.76-auto-compact-boundary-and-summary.jsonl",
        "cc-2.1.14-microcompact-and-two-compactions.jsonl",
        "cc-2.1.29-user-pasted-image.jsonl",
        "cc-2.1.37-tools-thinking-progress-hooks.jsonl",
        "cc-2.1.38-main-with-agent-progress.jsonl",
        "cc-2.1.38-small-tool-heavy-queue-ops.jsonl",
        "cc-2.1.39-compaction-agent-sidechain-file.jsonl",
        "cc-2.1.39-subagent-sidechain-file.jsonl",
        "cc-SYNTHETIC-rewind-fork-then-compact-preserved-segment.jsonl",
    ],
    "codex": [
        "codex-0.142-parent-thread-spawns-subagents.RECOMPACTED.jsonl",
        "codex-0.142-subagent-A-child-thread.jsonl",
        "codex-0.142-subagent-B-child-thread.jsonl",
        "codex-0.40-vscode-13-turns-with-aborted-turns.jsonl",
        "codex-0.40-vscode-shell-tools-reasoning.jsonl",
        "codex-0.40-vscode-single-turn-many-tools.jsonl",
        "codex-SYNTHETIC-modern-event-catalog-with-compacted.jsonl",
    ],
}
ALL_FIXTURES = sorted(FIXTURES / folder / name for folder, names in RECORDED.items()
                      for name in names)


def fixture(name: str) -> Path:
    """A recorded session by file name (searched in the pi, claude-code and codex folders)."""
    for folder in RECORDED_FOLDERS:
        candidate = FIXTURES / folder / name
        if candidate.exists():
            return candidate
    raise FileNotFoundError(
        f"recorded session {name!r} not found: looked in {FIXTURES}/{{pi,claude-code,codex}} "
        f"(set {FIXTURES_ENV} to the folder holding them; tests that need them should be "
        "marked @recorded)")


def sample(key: str) -> Path:
    """One of the project's own sample sessions by its short name (``pi-v1``, ``claude``, …)."""
    if key not in SAMPLES:
        raise KeyError(f"no sample named {key!r}; the samples are {', '.join(SAMPLES)}")
    path = SAMPLES_DIR / SAMPLES[key][0]
    if not path.exists():
        raise FileNotFoundError(f"sample session {key!r} not found at {path}; "
                                "run python tests/fixtures/make_samples.py")
    return path


ALL_SAMPLES = [SAMPLES_DIR / path for path, _ in SAMPLES.values()]
SAMPLE_SOURCE = {"pi": "pi", "claude-code": "claude", "codex": "codex"}


def source_folder(path: Path) -> str:
    """``pi``, ``claude-code`` or ``codex``: the top folder of a sample or recorded file."""
    root = SAMPLES_DIR if path.is_relative_to(SAMPLES_DIR) else FIXTURES
    return path.relative_to(root).parts[0]


def recorded_params(paths=None) -> list:
    """Recorded paths as parameters that carry the ``recorded`` marker."""
    return [pytest.param(p, marks=recorded, id=p.name) for p in (paths or ALL_FIXTURES)]


def ledger_home(tmp_path: Path, **distill: object) -> Path:
    """A home for ledger-only tests: no agent session roots, the characters/4 estimator, and
    the given ``[distill]`` settings."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)  # private, as the CLI makes it, whatever the test process's umask
    empty = tmp_path / "none"
    settings = "".join(f"{key} = {json.dumps(value)}\n" for key, value in distill.items())
    config = home / "config.toml"
    config.write_text(
        f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
        f'[paging]\nestimator = "chars4"\n[distill]\n{settings}'
    )
    config.chmod(0o600)
    return home


@pytest.fixture(autouse=True)
def _private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTEXT_PAGING_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def anyio_backend():
    return "asyncio"


# --- the recorded marker ----------------------------------------------------------------------


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"recorded: needs the recorded sessions ({FIXTURES_ENV}, default "
                   "../shared/fixtures/sessions); skipped where they are missing")


def pytest_collection_modifyitems(config, items):
    if HAVE_RECORDED:
        return
    skip = pytest.mark.skip(reason=_SKIP_REASON)
    for item in items:
        if item.get_closest_marker("recorded"):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    if HAVE_RECORDED:
        ran = sum(1 for key in ("passed", "failed", "error") for report in
                  terminalreporter.stats.get(key, ()) if report.when == "call"
                  and "recorded" in report.keywords)
        terminalreporter.write_line(f"recorded sessions: {FIXTURES} ({ran} tests used them)")
        return
    skipped = sum(1 for report in terminalreporter.stats.get("skipped", ())
                  if isinstance(report.longrepr, tuple) and _SKIP_REASON in report.longrepr[2])
    tests = "1 test that needs them was" if skipped == 1 else f"{skipped} tests that need them were"
    terminalreporter.write_line(
        f"recorded sessions: not found in {FIXTURES} (set {FIXTURES_ENV} to their folder); "
        f"{tests} skipped")


def halfway(value: float, zeros: int) -> bytes:
    """The exact decimal halfway between ``value`` and the next float up, padded with zeros:
    a number a parser must round by all its digits."""
    import math
    from decimal import Decimal, localcontext

    with localcontext() as context:
        context.prec = 2000
        middle = (Decimal(value) + Decimal(math.nextafter(value, math.inf))) / 2
    text = format(middle, "f")
    return (text + ("" if "." in text else ".") + "0" * zeros).encode()
