"""The MCP contract, through the SDK's in-memory Client, against the sample sessions (and the
recorded ones where they are present)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from context_paging.index.discovery import iter_session_files
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from bench.recorded import agent_path
from tests.conftest import (
    ALL_FIXTURES,
    ALL_SAMPLES,
    HAVE_RECORDED,
    PROJECT,
    SAMPLES_DIR,
    recorded_params,
    sample,
)
from tests.test_sessions import _private_strings

pytestmark = pytest.mark.anyio
SNAPSHOT = PROJECT / "tests" / "snapshots" / "tools.json"


def lay_out(tmp: Path, with_recorded: bool = HAVE_RECORDED) -> dict[str, Path]:
    """The sample sessions, and the recorded ones where present, placed where their agents would
    have written them."""
    roots = {"pi": tmp / "pi", "claude": tmp / "claude", "codex": tmp / "codex"}
    for path in ALL_SAMPLES:
        folder, *rest = path.relative_to(SAMPLES_DIR).parts
        target = roots[SAMPLE_ROOT[folder]].joinpath(*rest)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    for path in ALL_FIXTURES if with_recorded else ():
        target = agent_path(roots, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return roots


SAMPLE_ROOT = {"pi": "pi", "claude-code": "claude", "codex": "codex"}


def write_config(home: Path, roots: dict[str, Path], extra: str = "") -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[sources]\npi = "{roots["pi"]}"\nclaude_code = "{roots["claude"]}"\n'
        f'codex = "{roots["codex"]}"\n' + extra
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corpus")
    roots = lay_out(tmp)
    home = tmp / "home"
    write_config(home, roots)
    refs = {found.path.name: found.ref for found in iter_session_files(roots)}
    return home, roots, refs


@pytest.fixture
async def client(corpus):
    home, _, _ = corpus
    server = create_server(load_settings(home=home))
    async with Client(server) as c:
        yield c
    server.history.close()


def ref_of(corpus, fixture_name: str) -> str:
    _, _, refs = corpus
    return next(ref for name, ref in refs.items() if name.endswith(fixture_name))


async def call(client, tool: str, arguments: dict) -> tuple[bool, str, dict | None]:
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(c, "text", "") for c in result.content)
    return result.is_error, text, result.structured_content


# --- the contract -------------------------------------------------------------------------------


async def test_tools_list_matches_the_committed_snapshot(client):
    tools = (await client.list_tools()).tools
    listing = [t.model_dump(by_alias=True, exclude_none=True) for t in tools]
    for tool in listing:
        tool.pop("_meta", None)
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(listing, indent=2, ensure_ascii=False) + "\n")
    assert listing == json.loads(SNAPSHOT.read_text())


async def test_recovery_tools_are_read_only_and_select_context_is_not(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"search_history", "browse_history", "load_history",
                          "read_context_output", "recall", "list_sessions", "select_context",
                          "paging_stats"}
    for name in ("search_history", "browse_history", "load_history", "read_context_output",
                 "recall", "list_sessions", "paging_stats"):
        assert tools[name].annotations.read_only_hint is True, name
    assert tools["select_context"].annotations.read_only_hint is False


async def test_search_finds_an_error_string_and_loads_it(client, corpus):
    ref = ref_of(corpus, sample("codex-0.40").name)
    error, text, value = await call(client, "search_history",
                                    {"query": "AssertionError", "session": ref, "load": True})
    assert not error
    assert value["references"] and value["references"][0]["session"] == ref
    assert len(value["items"]) == min(3, len(value["references"]))
    assert value["unloaded_history_ids"] == [r["history_id"] for r in value["references"][3:]]
    assert "\n  " not in text  # compact JSON, not pretty-printed


async def test_browse_walks_backward_forward_and_around(client, corpus):
    ref = ref_of(corpus, sample("pi-v1").name)
    _, _, newest = await call(client, "browse_history",
                              {"direction": "backward", "count": 2, "session": ref})
    seqs = [r["sequence"] for r in newest["references"]]
    assert seqs[0] - 1 == seqs[1]
    _, _, first = await call(client, "browse_history",
                             {"direction": "forward", "count": 3, "session": ref})
    assert [r["sequence"] for r in first["references"]] == [0, 1, 2]
    _, _, around = await call(client, "browse_history", {
        "direction": "around", "sequence": 10, "count": 3, "stride": 2, "session": ref})
    assert [r["sequence"] for r in around["references"]] == [8, 10, 12]


async def test_read_context_output_pages_reassemble_the_exact_value(client, corpus):
    ref = ref_of(corpus, sample("codex-0.40").name)
    _, _, found = await call(client, "search_history",
                             {"query": "", "session": ref, "tools": ["shell"], "limit": 1})
    turn = found["references"][0]["history_id"]
    _, _, loaded = await call(client, "load_history", {"history_ids": [turn], "session": ref})
    result = loaded["items"][0]["tool_results"][0]
    pages, offset = [], 0
    while offset is not None:
        error, _, page = await call(client, "read_context_output", {
            "history_id": turn, "source": "tool_result", "tool_call_id": result["tool_call_id"],
            "offset": offset, "limit": 500, "session": ref})
        assert not error
        pages.append(page["text"])
        offset = page["next_offset"]
    assert json.loads("".join(pages)) == result


@pytest.mark.parametrize("arguments, code", [
    ({"history_ids": ["missing"]}, "UNKNOWN_HISTORY_ID"),
])
async def test_load_errors_name_the_bad_value(client, corpus, arguments, code):
    ref = ref_of(corpus, sample("pi-v3").name)
    error, text, _ = await call(client, "load_history", {**arguments, "session": ref})
    assert error and text.startswith(code) and "missing" in text


async def test_every_documented_error_comes_back_as_a_tool_error(client, corpus):
    ref = ref_of(corpus, sample("pi-v1").name)
    _, _, first = await call(client, "browse_history",
                             {"direction": "forward", "count": 2, "session": ref})
    user_id = next(r["history_id"] for r in first["references"] if r["kind"] == "user")
    cases = [
        ("browse_history", {"direction": "around", "history_id": "h", "sequence": 1},
         "UNKNOWN_HISTORY_ANCHOR"),
        ("browse_history", {"direction": "backward", "history_id": "nope"},
         "UNKNOWN_HISTORY_ANCHOR"),
        ("browse_history", {"direction": "backward", "sequence": 999999},
         "UNKNOWN_HISTORY_ANCHOR"),
        ("read_context_output", {"history_id": user_id, "source": "assistant",
                                 "content_index": 0}, "NOT_A_MODEL_TURN"),
        ("read_context_output", {"history_id": "nope", "source": "assistant",
                                 "content_index": 0}, "UNKNOWN_HISTORY_ID"),
        ("read_context_output", {"history_id": user_id, "source": "assistant"},
         "OUTPUT_ARGUMENTS"),
        ("read_context_output", {"history_id": user_id, "source": "tool_result"},
         "OUTPUT_ARGUMENTS"),
        ("recall", {"tool_call_id": "nope"}, "UNKNOWN_TOOL_CALL_ID"),
        ("recall", {}, "RECALL_ARGUMENTS"),
        ("recall", {"history_id": user_id, "pattern": "("}, "RECALL_PATTERN"),
        ("recall", {"history_id": user_id, "offset": 99999}, "RECALL_OFFSET"),
        ("search_history", {"query": "x", "session": "claude:does-not-exist"},
         "UNKNOWN_SESSION"),
        ("search_history", {"query": "x", "session": "/etc/passwd"}, "UNKNOWN_SESSION"),
    ]
    for tool, arguments, code in cases:
        arguments = {"session": ref, **arguments}
        error, text, _ = await call(client, tool, arguments)
        assert error, (tool, arguments)
        assert text.startswith(code), (tool, arguments, text)


@pytest.mark.parametrize("tool, arguments, bad", [
    ("search_history", {"query": "q" * 201}, "q" * 20),
    ("search_history", {"query": "x", "limit": 0}, "0"),
    ("search_history", {"query": "x", "files": ["a"] * 11}, "11"),
    ("browse_history", {"direction": "sideways"}, "sideways"),
    ("browse_history", {"direction": "forward", "count": 11}, "11"),
    ("load_history", {"history_ids": []}, "[]"),
    ("load_history", {"history_ids": ["a", "b", "c", "d"]}, "'d'"),
    ("read_context_output", {"history_id": "h", "source": "x"}, "'x'"),
    ("read_context_output", {"history_id": "h", "source": "assistant", "limit": 2001}, "2001"),
])
async def test_schema_violations_name_the_bad_value(client, tool, arguments, bad):
    error, text, _ = await call(client, tool, arguments)
    assert error and bad in text


async def test_a_recovery_tool_turn_is_hidden_and_its_output_refused(client, tmp_path):
    messages = [
        {"role": "user", "content": "find the old error"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "mcp__context-paging__search_history",
             "input": {"query": "error"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "{\"references\":[]}"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "nothing found"}]},
        {"role": "user", "content": "ok"},
    ]
    error, _, _ = await call(client, "select_context",
                             {"session": "hidden-test", "messages": messages})
    assert not error
    _, _, browsed = await call(client, "browse_history", {
        "direction": "forward", "count": 10, "session": "ledger:hidden-test"})
    kinds = [(r["kind"], r["tools"]) for r in browsed["references"]]
    assert all("mcp__context-paging__search_history" not in tools for _, tools in kinds)
    assert len(kinds) == 3  # 4 items; the recovery turn is the one left out
    error, text, _ = await call(client, "recall", {"tool_call_id": "t1",
                                                   "session": "ledger:hidden-test"})
    assert error and text.startswith("RECOVERY_TOOL_OUTPUT")


async def test_list_sessions_shows_every_fixture_with_its_reference(client, corpus):
    _, _, refs = corpus
    _, _, value = await call(client, "list_sessions", {"limit": 100})
    assert {s["ref"] for s in value["sessions"]} == set(refs.values())


async def test_a_disabled_server_refuses_recovery_and_passes_select_context_through(corpus):
    home, roots, _ = corpus
    disabled_home = home.parent / "disabled-home"
    write_config(disabled_home, roots, "[paging]\nenabled = false\n")
    server = create_server(load_settings(home=disabled_home))
    async with Client(server) as c:
        error, text, _ = await call(c, "search_history", {"query": "x", "session": "pi:x"})
        assert error and text.startswith("DISABLED")
        messages = [{"role": "user", "content": "hello"}]
        error, _, value = await call(c, "select_context", {"session": "d", "messages": messages})
        assert not error and value["mode"] == "disabled" and value["messages"] == messages
    server.history.close()


# --- privacy --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*ALL_SAMPLES, *recorded_params()], ids=lambda p: p.name)
async def test_no_reply_of_any_tool_contains_private_text(client, corpus, path):
    ref = ref_of(corpus, path.name)
    private = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            private |= _private_strings(json.loads(line))
        except ValueError:
            continue
    private = {s for s in private if len(s) >= 16}
    replies = []
    _, text, value = await call(client, "search_history",
                                {"query": "", "session": ref, "limit": 10, "load": True})
    replies.append(text)
    ids = [r["history_id"] for r in value["references"]]
    for chunk in range(0, min(len(ids), 9), 3):
        replies.append((await call(client, "load_history",
                                   {"history_ids": ids[chunk:chunk + 3], "session": ref}))[1])
    replies.append((await call(client, "browse_history",
                               {"direction": "backward", "count": 10, "session": ref}))[1])
    for item in value["items"]:
        for index in range(len(item["content"])):
            replies.append((await call(client, "read_context_output", {
                "history_id": item["history_id"], "source": "assistant", "content_index": index,
                "session": ref}))[1])
        for result in item.get("tool_results", []):
            replies.append((await call(client, "recall", {
                "tool_call_id": result["tool_call_id"], "session": ref}))[1])
    everything = "\n".join(replies)
    assert [s for s in private if s in everything] == []


async def test_the_first_search_of_an_unindexed_session_reports_progress(corpus, tmp_path):
    _, roots, _ = corpus
    fresh_home = tmp_path / "fresh-home"
    write_config(fresh_home, roots)
    server = create_server(load_settings(home=fresh_home))
    updates = []

    async def on_progress(progress, total, message):
        updates.append((progress, total, message))

    ref = ref_of(corpus, sample("claude").name)
    async with Client(server) as c:
        result = await c.call_tool("search_history", {"query": "hook", "session": ref},
                                   progress_callback=on_progress)
    server.history.close()
    assert not result.is_error
    assert updates and ref in updates[0][2]
