"""The CLI follows its own results: show, output, recall and browse, --json, --version, and
errors worded for the terminal.

Most tests call ``main`` in-process; the ones about the installed ``context-paging`` script
start it as a person would, several processes at once where they do not depend on each other.
Sessions come from the project's own sample (server/data), laid out as a Pi session.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from context_paging.index.home.private import secure_home
from context_paging.index.navigator import dumps
from context_paging.server.cli import main
from context_paging.server.commands.demo import sample_path
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from context_paging import __version__
from tests.test_stdio import console_script

REF = "pi:demo-0f3c9a2e"
WAIT = 120  # seconds any one script run may take on a loaded machine; never asserted as timing


@pytest.fixture
def home(tmp_path, _private_home):
    """$CONTEXT_PAGING_HOME with the sample Pi session as its only session."""
    root = tmp_path / "pi" / "--home-dev-shop--"
    root.mkdir(parents=True)
    shutil.copy(sample_path(), root / "2026-11-20T09-00-00-000Z_demo-0f3c9a2e.jsonl")
    _private_home.mkdir(exist_ok=True)
    (_private_home / "config.toml").write_text(
        f'[sources]\npi = "{tmp_path / "pi"}"\nclaude_code = "{tmp_path}/none"\n'
        f'codex = "{tmp_path}/none"\n')
    secure_home(_private_home)  # as the first command would (quietly: its own test says it)
    return _private_home


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--session", REF, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def scripts(*runs: list[str], cwd: Path) -> list[subprocess.CompletedProcess]:
    """Run the installed script once per argument list, all at the same time."""
    started = [subprocess.Popen([console_script(), *argv], cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for argv in runs]
    done = []
    for process, argv in zip(started, runs, strict=True):
        out, err = process.communicate(timeout=WAIT)
        done.append(subprocess.CompletedProcess(argv, process.returncode, out, err))
    return done


# --- following a search through the installed script ----------------------------------------


def test_the_script_finds_an_error_then_shows_pages_and_recalls_the_output(home, tmp_path):
    [found] = scripts(["search", "ECONNREFUSED", "--session", REF, "--json"], cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    turn = next(r for r in json.loads(found.stdout)["references"] if r["tools"] == ["bash"])
    session = ["--session", turn["session"]]
    [shown] = scripts(["show", turn["history_id"], *session], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    # The output is long: show prints its head and names the call that returns all of it.
    call_id = shown.stdout.split("result of bash  id=")[1].split()[0]
    assert f"… 860 more lines: context-paging recall {call_id} --session {REF}" in shown.stdout
    paged, recalled = scripts(
        ["output", turn["history_id"], "--tool-call-id", call_id, "--limit", "500", *session],
        ["recall", call_id, "--pattern", "ECONNREFUSED", *session], cwd=tmp_path)
    assert paged.returncode == recalled.returncode == 0, paged.stderr + recalled.stderr
    assert paged.stdout.startswith('{"tool_call_id":"' + call_id)
    assert len(paged.stdout) == 501  # the page and a newline; where to go on is on stderr
    assert (f"next: context-paging output {turn['history_id']} --tool-call-id {call_id} "
            f"--offset 500 --session {REF}") in paged.stderr
    assert recalled.stdout == ("612: 2026-11-19T23:41:07Z checkout  ERROR redis connect failed: "
                               "ECONNREFUSED 127.0.0.1:6379 (attempt 3/3, pool=cart-cache)\n")


def test_the_script_speaks_terminal_and_knows_its_version(home, tmp_path):
    no_session, unknown, version = scripts(
        ["show", "00000005"], ["recall", "no-such-id", "--session", REF], ["--version"],
        cwd=tmp_path)
    module = subprocess.run([sys.executable, "-m", "context_paging", "--version"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=WAIT)
    assert (no_session.returncode, no_session.stdout) == (2, "")
    assert no_session.stderr == (
        f"context-paging: no session given, none ran in {tmp_path} and the proxy forwarded "
        "none in the last 6 hours: pass --session REF (see `context-paging sessions`)\n")
    assert unknown.returncode == 2 and "select_context" not in unknown.stderr
    assert unknown.stderr == (
        f"context-paging: 'no-such-id' is neither a tool call id nor a history id in {REF}; "
        "find one with `context-paging search` or `context-paging show`\n")
    assert version.stdout == module.stdout == f"context-paging {__version__}\n"
    assert version.returncode == module.returncode == 0


# --- the commands, in-process ---------------------------------------------------------------


def test_show_prints_blocks_calls_and_results_and_full_prints_everything(home, capsys):
    assert main(["show", "00000007", "--session", REF]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:3] == [
        f"── {REF}  00000007  #3  model_turn  model=claude-sonnet-4-5  2026-11-20T09:00:49.000Z",
        "[0] text",
        "    Line 612 of the CI log shows `ECONNREFUSED 127.0.0.1:6379`: the cache was not up "
        "when checkout ran. Let me look at how the client connects.",
    ]
    assert '[1] tool call grep  id=call_03\n    {"pattern": "def connect"' in out
    assert main(["show", "00000005", "--session", REF, "--full"]) == 0
    full = capsys.readouterr().out
    assert "more lines" not in full and full.count("\n    2026-11-19T") == 900


def test_output_pages_put_back_together_are_the_exact_result(home, capsys):
    [item] = run_json(capsys, "show", "00000005")["items"]
    result = item["tool_results"][0]
    text, offset = "", 0
    while offset is not None:
        page = run_json(capsys, "output", "00000005", "--tool-call-id", result["tool_call_id"],
                        "--offset", str(offset), "--limit", "2000")
        text += page["text"]
        offset = page["next_offset"]
    assert text == dumps(result) and page["total_characters"] == len(text)
    block = run_json(capsys, "output", "00000005", "--content-index", "0")
    assert json.loads(block["text"]) == item["content"][0]


def test_recall_takes_a_tool_call_id_or_a_history_id_and_says_how_to_go_on(home, capsys):
    assert main(["recall", "call_02", "--limit", "2", "--session", REF]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n\n[Showing lines 1–2 of 900. Use --offset 3 to continue.]\n")
    assert main(["recall", "00000002", "--session", REF]) == 0  # a user request: its exchange
    exchange = capsys.readouterr().out
    assert exchange.startswith("## user\nThe checkout integration test fails about one run in "
                               "five on CI.")
    assert "## assistant" in exchange
    assert run_json(capsys, "recall", "call_02", "--pattern", "ERROR")["text"].startswith("612: ")


def test_browse_walks_from_an_anchor_and_reports_errors_with_flags(home, capsys):
    assert main(["browse", "--sequence", "3", "--direction", "around", "--count", "3",
                 "--session", REF]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1:3] for line in lines[::2]] == [
        ["00000005", "#2"], ["00000007", "#3"], ["00000009", "#4"]]
    assert main(["browse", "--sequence", "999", "--session", REF]) == 2
    assert "--sequence 999 is outside 0..34" in capsys.readouterr().err


@pytest.mark.anyio
async def test_json_output_is_the_tools_structured_content(home, capsys):
    server = create_server(load_settings())
    try:
        async with Client(server) as client:
            async def tool(name: str, arguments: dict) -> dict:
                result = await client.call_tool(name, {**arguments, "session": REF})
                assert not result.is_error
                return result.structured_content

            pairs = [
                (["search", "ECONNREFUSED"], "search_history", {"query": "ECONNREFUSED"}),
                (["browse", "--count", "3"], "browse_history", {"direction": "backward",
                                                                "count": 3}),
                (["show", "00000007"], "load_history", {"history_ids": ["00000007"]}),
                (["output", "00000005", "--tool-call-id", "call_02", "--offset", "100"],
                 "read_context_output", {"history_id": "00000005", "source": "tool_result",
                                         "tool_call_id": "call_02", "offset": 100}),
                (["recall", "call_02", "--pattern", "ECONN"], "recall",
                 {"tool_call_id": "call_02", "pattern": "ECONN"}),
                (["stats"], "paging_stats", {}),
            ]
            for argv, name, arguments in pairs:
                assert run_json(capsys, *argv) == await tool(name, arguments), argv
            listed = await client.call_tool("list_sessions", {})
            assert main(["sessions", "--json"]) == 0
            assert json.loads(capsys.readouterr().out) == listed.structured_content
    finally:
        server.history.close()


def test_stats_of_an_agent_session_say_it_was_not_paged_by_this_tool(home, capsys):
    assert main(["--set", "paging.token_budget=64000", "stats", "--session", REF]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"Context paging: not paged by this tool   ({REF})"
    assert "Context paging: on" not in out
    budget = out.split("Paging budget")[1].splitlines()[0]
    assert budget.split() == ["64,000", "(configured;", "not", "applied", "to", "this",
                              "session)"]


def test_stats_of_an_agent_session_show_the_window_of_the_model_it_names(home, capsys):
    assert main(["stats", "--session", REF]) == 0
    window = capsys.readouterr().out.split("Model window")[1].splitlines()[0]
    assert window.split() == ["200,000", "(5.3%", "used)"]  # claude-sonnet-4-5, 10,630 in


def test_the_window_of_a_model_comes_from_its_name_and_is_none_when_unknown():
    from context_paging.paging.models import model_window

    assert [model_window(m) for m in ("claude-opus-4-5-20251101", "anthropic/claude-sonnet-4-5",
                                      "claude-opus-4-6[1m]", "gpt-5-codex", "gpt-5.5",
                                      "openai/gpt-5.1-codex", "llama-3", None)] == [
        200_000, 200_000, 1_000_000, 272_000, 258_400, 272_000, None, None]


def test_a_busy_index_is_a_retryable_error_not_a_traceback(home, capsys, monkeypatch):
    from context_paging.index.search.store import IndexBusy
    from context_paging.index.service import History

    def busy(*args, **kwargs):
        raise IndexBusy("the search index /x is being written by another process; gave up "
                        "after 10 s")

    monkeypatch.setattr(History, "search", busy)
    assert main(["search", "anything", "--session", REF]) == 75
    assert capsys.readouterr().err == (
        "context-paging: the search index /x is being written by another process; gave up "
        "after 10 s; try again in a moment\n")
