"""Claude Code, Codex, Pi, Gemini CLI and OpenCode, unmodified and non-interactive, on the
scripted 18-step shell task: first straight against the validating fake provider, then through
``context-paging run`` and through ``install-proxy --write`` with a ``context-paging proxy``, at
a budget that makes paging happen mid-run. Every rule a run breaks is listed in its one failure
message."""

from __future__ import annotations

import pytest

from tests.e2e import report, runs
from tests.e2e.agents import AGENTS, Agent
from tests.e2e.conftest import SUMMARY

pytestmark = pytest.mark.real_agents
IDS = [agent.label.replace(" ", "-").replace("(", "").replace(")", "") for agent in AGENTS]
_DIRECT: dict[Agent, runs.Run] = {}


def direct_run(agent: Agent, tmp_path_factory: pytest.TempPathFactory) -> runs.Run:
    """The agent straight against the fake, once per agent and model (the bytes baseline)."""
    if agent not in _DIRECT:
        _DIRECT[agent] = runs.run_agent(agent, "direct", tmp_path_factory.mktemp("direct"))
    return _DIRECT[agent]


def _failures(outcome: report.Outcome, run: runs.Run) -> str:
    rules = "\n".join(f"- {problem}" for problem in outcome.problems)
    return f"{outcome.line()}\n{rules}\n{run.transcript}"


@pytest.mark.parametrize("agent", AGENTS, ids=IDS)
def test_each_agent_finishes_the_task_directly_with_every_request_valid(agent, tmp_path_factory):
    run = direct_run(agent, tmp_path_factory)
    outcome = report.judge_direct(run)
    if outcome.problems:
        pytest.fail(_failures(outcome, run), pytrace=False)


@pytest.mark.parametrize("route", ["run", "install"])
@pytest.mark.parametrize("agent", AGENTS, ids=IDS)
def test_each_agent_finishes_the_task_paged_through_the_proxy_losing_nothing(
        agent, route, tmp_path, tmp_path_factory):
    direct = direct_run(agent, tmp_path_factory)
    run = runs.run_agent(agent, route, tmp_path)
    outcome = report.judge_proxied(run, direct)
    SUMMARY.append(outcome.line())
    if outcome.problems:
        pytest.fail(_failures(outcome, run), pytrace=False)


# Pi has no MCP client; Claude Code, Codex, Gemini CLI and OpenCode run through ``context-paging
# run``, which registers no MCP server: the proxy offers the recovery tools itself and answers
# them.
WITHOUT_MCP = [a for a in AGENTS if a.model is None]


@pytest.mark.parametrize("agent", WITHOUT_MCP, ids=[a.name for a in WITHOUT_MCP])
def test_without_the_mcp_server_the_model_pages_back_in_band(agent, tmp_path):
    run = runs.run_agent(agent, "run", tmp_path, recover=True)
    outcome = report.judge_inband(run)
    SUMMARY.append(outcome.line() + " (recovery in band)")
    if outcome.problems:
        pytest.fail(_failures(outcome, run), pytrace=False)
