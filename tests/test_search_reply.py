"""A search reply: phrases across sessions, the lines each hit matched, what was searched, pages.

The sessions are generated here (Pi format): no recorded fixture is needed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from context_paging.index.service import History
from context_paging.server.cli import main
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from tests.test_search_compound import pi_line

LINE = "Could not read file /etc/app/settings.toml: permission denied"


def write_session(path: Path, calls: list[tuple[str, dict, str]], cwd: str) -> None:
    """A Pi v3 session: one request, then one call per (tool, arguments, output)."""
    lines = [json.dumps({"type": "session", "version": 3, "id": path.stem.split("_")[-1],
                         "timestamp": "2026-01-01T00:00:00.000Z", "cwd": cwd})]
    lines.append(pi_line("u0", None, {"role": "user", "content": "look around",
                                      "timestamp": 1}, 0))
    parent = "u0"
    for n, (tool, arguments, output) in enumerate(calls, start=1):
        call = f"call_{path.stem[-2:]}_{n}"
        lines.append(pi_line(f"a{n}", parent, {
            "role": "assistant", "model": "m", "stopReason": "toolUse",
            "content": [{"type": "toolCall", "id": call, "name": tool, "arguments": arguments}],
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0}}, 2 * n))
        lines.append(pi_line(f"r{n}", f"a{n}", {
            "role": "toolResult", "toolCallId": call, "toolName": tool, "isError": False,
            "content": [{"type": "text", "text": output}], "timestamp": 2}, 2 * n + 1))
        parent = f"r{n}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def roots(tmp_path):
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    # s1: the words of LINE many times, never together (BM25 alone ranks these first)
    noisy = [("bash", {"command": f"cat part{n}"},
              "could not parse; read the file again; file not found; could read file "
              "settings permission denied; denied file read could not") for n in range(6)]
    write_session(roots["pi"] / "--work-app--" / "2026-01-01T00-00-00-000Z_s1aaaaaa.jsonl",
                  noisy, "/work/app")
    # s2: the line once, in the third line of a read's output
    held = [("read", {"path": "/work/other/src/hooks/claudecode/handlers.go"},
             "package hooks\n\n" + LINE + "\nexit 1"),
            ("bash", {"command": "ls"}, "README.md\nsrc")]
    held += [("bash", {"command": f"echo {n}"}, f"pager step {n} done") for n in range(12)]
    held.append(("bash", {"command": "cat big.log"}, "big log line\n" * 3000))
    write_session(roots["pi"] / "--work-other--" / "2026-01-02T00-00-00-000Z_s2bbbbbb.jsonl",
                  held, "/work/other")
    return roots


@pytest.fixture
def history(roots, tmp_path):
    history = History(roots, tmp_path / "home")
    yield history
    history.close()


def owner(history: History, ref: str, call_number: int) -> str:
    return history.navigator(ref).raw[call_number].history_id


def test_a_quoted_line_finds_only_its_holder_across_sessions(history):
    reply = history.search(f'"{LINE}"', None, "all", limit=3)
    assert [(r["session"], r["history_id"]) for r in reply.references] == \
        [("pi:s2bbbbbb", owner(history, "pi:s2bbbbbb", 1))]


def test_an_unquoted_line_ranks_its_verbatim_holder_first_across_sessions(history):
    reply = history.search(LINE, None, "all", limit=3)
    first = reply.references[0]
    assert (first["session"], first["history_id"]) == \
        ("pi:s2bbbbbb", owner(history, "pi:s2bbbbbb", 1))
    assert len(reply.references) == 3  # the words alone still find the noisy session


def test_and_requires_every_word_and_minus_leaves_items_out(history):
    both = history.search("pager AND step", None, "all", limit=50)
    assert len(both.references) == 12
    fewer = history.search("pager -done", None, "all", limit=50)
    assert fewer.references == []


def test_a_hit_shows_the_matched_line_with_the_tool_output_and_line_number(history):
    reply = history.search(f'"{LINE}"', "pi:s2bbbbbb", limit=1)
    (match,) = reply.references[0]["matches"][:1]
    assert match == {"source": "tool_result", "tool_name": "read",
                     "tool_call_id": "call_bb_1", "content_index": None, "line": 3,
                     "text": LINE, "spans": [[0, len(LINE)]]}
    recalled = history.recall("pi:s2bbbbbb", tool_call_id="call_bb_1", offset=match["line"],
                              limit=1)
    assert LINE in recalled.text  # the line number is recall's offset


def test_every_reply_says_what_it_searched(history):
    one = history.search("pager", "pi:s2bbbbbb", limit=1)
    assert (one.searched.scope, one.searched.sessions, one.searched.item_count) == \
        ("session", ("pi:s2bbbbbb",), 16)
    every = history.search("pager", None, "all", limit=1)
    assert (every.searched.session_count, every.searched.item_count) == (2, 23)
    none = history.search("zzzqqq", "pi:s1aaaaaa")
    assert none.references == [] and none.note == (
        "Searched pi:s1aaaaaa: 7 items; none matches 'zzzqqq'. Try scope 'all' to search "
        "every session or another spelling or a shorter part of the word.")


def test_the_directory_comes_before_the_proxys_conversation_and_the_proxy_is_named(
        history, tmp_path, monkeypatch):
    import context_paging.index.service as service

    monkeypatch.setattr(service, "last_proxied", lambda *args: "ledger:proxied-conversation")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "getcwd", lambda: "/work/app")
    assert history.default_session(None) == ("pi:s1aaaaaa", "directory")
    monkeypatch.setattr(os, "getcwd", lambda: "/nowhere")
    assert history.default_session(None) == ("ledger:proxied-conversation", "proxy")


def test_pages_past_ten_hits_follow_next_offset_to_the_end(history):
    seen, offset = [], 0
    while offset is not None:
        reply = history.search("pager", "pi:s2bbbbbb", limit=5, offset=offset)
        seen += [r["history_id"] for r in reply.references]
        offset = reply.next_offset
    assert len(seen) == len(set(seen)) == 12
    whole = history.search("pager", "pi:s2bbbbbb", limit=50)
    assert [r["history_id"] for r in whole.references] == seen and whole.next_offset is None


@pytest.mark.parametrize("given", ["handlers.go", "claudecode/handlers.go",
                                   "/work/other/src/hooks/claudecode/handlers.go"])
def test_files_match_a_path_a_suffix_or_a_file_name(history, given):
    for scope in ("session", "all"):
        reply = history.search("permission", "pi:s2bbbbbb", scope, files=[given])
        assert [r["history_id"] for r in reply.references] == \
            [owner(history, "pi:s2bbbbbb", 1)]


def test_an_unknown_file_is_named_in_the_note_not_blamed_on_the_query(history):
    reply = history.search("permission", "pi:s2bbbbbb", files=["nothere.go"])
    assert reply.references == []
    assert "no item touched a file matching 'nothere.go'" in reply.note
    assert "the query was not tried" in reply.note


def test_a_repeated_search_before_the_index_has_the_session_analyzes_nothing_again(
        history, monkeypatch):
    import context_paging.index.search.scan as scan

    history.store.file_state = lambda session: None  # the disk index never catches up here
    first = history.search("pager", "pi:s2bbbbbb", limit=3)
    calls = []
    real = scan._tokens
    monkeypatch.setattr(scan, "_tokens", lambda text: calls.append(1) or real(text))
    again = history.search("step", "pi:s2bbbbbb", limit=3)
    assert calls == [] and first.references and again.references


# --- through MCP and the CLI -----------------------------------------------------------------


@pytest.fixture
def home(roots, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{roots["pi"]}"\nclaude_code = "{roots["claude"]}"\n'
        f'codex = "{roots["codex"]}"\n')
    return home


async def call(home: Path, tool: str, arguments: dict):
    server = create_server(load_settings(home=home))
    try:
        async with Client(server) as client:
            result = await client.call_tool(tool, arguments)
    finally:
        server.history.close()
    texts = [getattr(c, "text", "") for c in result.content]
    return result.is_error, texts, result.structured_content


@pytest.mark.anyio
async def test_mcp_search_marks_the_line_in_text_and_gives_offsets_in_structured_content(home):
    error, texts, value = await call(home, "search_history",
                                     {"query": f'"{LINE}"', "scope": "all", "limit": 50})
    assert not error
    shown = json.loads(texts[0])["references"][0]["matches"][0]
    assert shown["text"] == f"«{LINE}»" and "spans" not in shown
    assert value["references"][0]["matches"][0]["spans"] == [[0, len(LINE)]]
    assert value["searched"] == {"scope": "all", "sessions": [], "session_count": 2,
                                 "item_count": 23, "project": None, "chosen_by": None}


@pytest.mark.anyio
@pytest.mark.parametrize("tool, arguments, text", [
    ("browse_history", {}, "INVALID_ARGUMENT: field 'direction' is required; see the tool's "
     "input schema"),
    ("search_history", {"query": "x", "limit": 51}, "INVALID_ARGUMENT: field 'limit' is 51: "
     "input should be less than or equal to 50; see the tool's input schema"),
])
async def test_mcp_argument_errors_are_coded_without_a_url(home, tool, arguments, text):
    error, texts, _ = await call(home, tool, arguments)
    assert error and texts == [text]


@pytest.mark.anyio
async def test_mcp_load_history_caps_a_long_output_and_names_the_call_for_the_rest(home):
    history_id = History(load_settings(home=home).roots, home).navigator("pi:s2bbbbbb").raw[-1]
    error, texts, value = await call(home, "load_history", {
        "history_ids": [history_id.history_id], "session": "pi:s2bbbbbb"})
    assert not error and len(texts[0]) < 24_000
    block = value["items"][0]["tool_results"][0]["content"][0]
    assert len(block["text"]) == 1_000 and block["cut_characters"] == 39_000 - 1_000
    assert "recall(tool_call_id='call_bb_15')" in value["note"]


@pytest.mark.anyio
async def test_mcp_read_context_output_text_is_the_page_itself(home):
    history_id = History(load_settings(home=home).roots, home).navigator("pi:s2bbbbbb").raw[1]
    error, texts, value = await call(home, "read_context_output", {
        "history_id": history_id.history_id, "source": "tool_result",
        "tool_call_id": "call_bb_1", "session": "pi:s2bbbbbb", "limit": 40})
    assert not error and texts[0] == value["text"] and len(texts[0]) == 40
    assert texts[1] == f"[characters 0-40 of {value['total_characters']}; next page: offset=40]"


@pytest.mark.anyio
async def test_mcp_a_short_session_prefix_gets_the_rule(home):
    error, texts, _ = await call(home, "search_history", {"query": "x", "session": "s2bb"})
    assert error and "a session id prefix needs at least 6 characters" in texts[0]


def test_cli_search_pages_and_matches_a_file_name(home, capsys):
    assert main(["--home", str(home), "search", "pager", "--session", "pi:s2bbbbbb",
                 "--limit", "10", "--file", "handlers.go"]) == 1
    assert "no item touched a file matching 'handlers.go'" not in capsys.readouterr().out
    assert main(["--home", str(home), "search", "pager", "--session", "pi:s2bbbbbb",
                 "--limit", "10"]) == 0
    out = capsys.readouterr().out
    assert out.count("    > bash output") == 10 and "More hits: add --offset 10." in out
    assert main(["--home", str(home), "search", "pager", "--session", "pi:s2bbbbbb",
                 "--limit", "10", "--offset", "10"]) == 0
    assert capsys.readouterr().out.count("    > bash output") == 2


def test_cli_search_with_a_quoted_phrase_across_sessions(home, capsys):
    assert main(["--home", str(home), "search", f'"{LINE}"', "--scope", "all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Searched every session in the index: 2 sessions, 23 items.")
    assert f"    > read output call_bb_1 line 3: «{LINE}»" in out


@pytest.mark.anyio
async def test_mcp_search_pages_with_next_offset_and_matches_a_file_name(home):
    base = {"query": "pager", "session": "pi:s2bbbbbb", "limit": 5}
    _, _, first = await call(home, "search_history", base)
    _, _, last = await call(home, "search_history", {**base, "offset": 10})
    assert first["next_offset"] == 5 and len(first["references"]) == 5
    assert last["next_offset"] is None and len(last["references"]) == 2
    _, _, by_name = await call(home, "search_history", {
        "query": "permission", "session": "pi:s2bbbbbb", "files": ["handlers.go"]})
    assert [r["files"] for r in by_name["references"]] == \
        [["/work/other/src/hooks/claudecode/handlers.go"]]
