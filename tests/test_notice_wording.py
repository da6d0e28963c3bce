"""The notice's wording through the proxy is decided once per conversation and kept: the
recovery tools that show up late, go away, or a restarted proxy never re-word a notice the
provider has cached. Every cache break must be a cut advance, as the real-agent suite judges it
(tests/e2e/checks.py), over requests through the proxy to the fake provider.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from context_paging.paging.notice import HEADER

from tests.e2e import checks
from tests.test_inband import OFFERED, Stack
from tests.test_proxy import TOOLS, make_home, tool_turn

MCP = [*TOOLS, {"name": "mcp__context-paging__search_history", "description": "x",
                "input_schema": {"type": "object"}}]


def exchanges(s: Stack) -> list[SimpleNamespace]:
    """The upstream requests as the real-agent suite's checks read them."""
    return [SimpleNamespace(number=n, api="anthropic", body=body.value,
                            request=SimpleNamespace(body=body.raw))
            for n, body in enumerate(s.upstream_bodies(), 1)]


def notices(s: Stack) -> list[str]:
    """Each paged request's notice as the model reads it."""
    found = []
    for body in s.upstream_bodies():
        first = body.value["messages"][0]["content"]
        texts = [b["text"] for b in first if isinstance(b, dict) and HEADER in b.get("text", "")]
        if texts:
            found.append(texts[0])
    return found


def converse(s: Stack, tools_at: list[list[dict]], restart_at: int | None = None) -> None:
    """One conversation, a request per entry of ``tools_at`` (the agent's tools in it), each
    adding a tool turn; with a restart of the proxy before request ``restart_at``."""
    messages: list[dict] = [{"role": "user", "content": [
        {"type": "text", "text": "Refactor the modules, starting with module_0."}]}]
    for i, tools in enumerate(tools_at):
        if i == restart_at:
            s.restart()
        assistant, result = tool_turn(i)
        messages += [assistant, result]
        assert s.post(messages, stream=False, tools=tools).status_code == 200


def judged(s: Stack) -> None:
    sent = exchanges(s)
    assert any(checks.has_notice(e) for e in sent), "nothing was paged"
    wrong = [(b.number, b.detail) for b in checks.cache_breaks(sent) if not b.cut_advance]
    assert not wrong, wrong


@pytest.fixture
def home(tmp_path) -> Path:
    return make_home(tmp_path)


@pytest.mark.parametrize("mode", ["never", "auto"])
def test_recovery_tools_that_show_up_after_the_first_notice_do_not_reword_it(home, mode):
    s = Stack(home, mode=mode)
    try:
        converse(s, [TOOLS] * 10 + [MCP] * 8)
        judged(s)
        worded = {text.split("\n")[2] for text in notices(s)}
        assert len(worded) == 1, worded  # the line naming the tools, one wording throughout
    finally:
        s.close()


def test_recovery_tools_that_go_away_do_not_reword_the_notice(home):
    s = Stack(home, mode="auto")
    try:
        converse(s, [MCP] * 10 + [TOOLS, MCP] * 4)
        judged(s)
        assert all("search_history or browse_history" in text for text in notices(s))
    finally:
        s.close()


@pytest.mark.parametrize("mode", ["auto", "never"])
def test_a_restarted_proxy_keeps_the_wording_and_the_offer(home, mode):
    s = Stack(home, mode=mode)
    try:
        converse(s, [TOOLS] * 10 + [MCP] * 8, restart_at=13)
        judged(s)
        bodies = s.upstream_bodies()
        offers = {OFFERED <= {t["name"] for t in b.value["tools"]} for b in bodies[9:]}
        assert offers == {mode == "auto"}  # the tools the notice names stay offered
        assert len({text.split("\n")[2] for text in notices(s)}) == 1
    finally:
        s.close()


def test_the_decision_is_kept_in_the_home_as_one_small_file(home):
    s = Stack(home, mode="auto")
    try:
        converse(s, [TOOLS] * 10)
        files = list((home / "inband").glob("*.json"))
        assert len(files) == 1
        assert json.loads(files[0].read_text()) == {"offered": True, "notice": "inband"}
    finally:
        s.close()


def test_an_agent_tool_of_an_offered_name_wins_even_after_the_offer_was_kept(home):
    own = [*TOOLS, {"name": "recall", "description": "the agent's own",
                    "input_schema": {"type": "object"}}]
    s = Stack(home, mode="auto")
    try:
        converse(s, [TOOLS] * 10, restart_at=None)
        s.restart()
        converse(s, [TOOLS] * 10 + [own])
        names = [t["name"] for t in s.upstream_bodies()[-1].value["tools"]]
        assert names.count("recall") == 1 and "search_history" not in names
    finally:
        s.close()
