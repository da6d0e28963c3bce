"""The real-agent suite's switch and its summary.

Tests marked ``real_agents`` run Claude Code, Codex and Pi from the cache that
tests/e2e/install_agents.py fills. Where node or the pinned versions are missing they are
skipped, and the run ends with one line saying why and how to install them (unless
``CONTEXT_PAGING_REQUIRE_AGENTS=1``, as in CI: then the run stops with that line). Each proxied run
adds its summary line, printed at the end of the run.
"""

from __future__ import annotations

import os

import pytest

from tests.e2e import agents

REQUIRE_ENV = "CONTEXT_PAGING_REQUIRE_AGENTS"  # set by .ci/run: missing agents fail the run
SUMMARY: list[str] = []
_WHY = agents.not_ready()
_SKIP = f"real agents skipped: {_WHY}; install them with: python tests/e2e/install_agents.py"


def pytest_configure(config):
    config.addinivalue_line("markers", "real_agents: runs the pinned Claude Code, Codex and Pi "
                            "(tests/e2e/install_agents.py); skipped where they are missing")
    if _WHY is not None and os.environ.get(REQUIRE_ENV) == "1":
        raise pytest.UsageError(f"{REQUIRE_ENV}=1 (as in CI), but {_SKIP}")


def pytest_collection_modifyitems(config, items):
    if _WHY is None:
        return
    skip = pytest.mark.skip(reason=_SKIP)
    for item in items:
        if item.get_closest_marker("real_agents"):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    if _WHY is not None:
        skipped = sum(1 for report in terminalreporter.stats.get("skipped", ())
                      if isinstance(report.longrepr, tuple) and _SKIP in report.longrepr[2])
        if skipped:
            terminalreporter.write_line(f"{_SKIP} ({skipped} tests skipped)")
        return
    if SUMMARY:
        terminalreporter.write_sep("-", "real agents through the proxy")
        for line in SUMMARY:
            terminalreporter.write_line(line)
