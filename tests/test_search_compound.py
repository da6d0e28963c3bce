"""Search finds what people type — parts of compound words, every scope, real lengths.

The sessions are generated here (Pi format), one tool output per
row of the table below, so the tests need no recorded fixture.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from context_paging.index.search.analysis import compound_terms, query_tokens, term_counts
from context_paging.index.service import History
from context_paging.server.cli import main
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

# (query, text in one tool output): what people type, and what it must find.
TABLE = [
    ("DeadlockDetected", "psycopg2.errors.DeadlockDetected: deadlock detected on relation 42"),
    ("readFileUtf8", "at binding.readFileUtf8 (node:internal/fs/utils:10:3)"),
    ("paraxial.io", "fetched https://paraxial.io/blog/hex-security (200 OK)"),
    ("ContextFilesBrowserModal.tsx", "M src/components/ContextFilesBrowserModal.tsx"),
    ("e0918a8b1ffb", "thread 109ecbd0-0798-4314-a330-e0918a8b1ffb started"),
]
# Pi on the openai-codex provider: ``call_…|<encoded item id>``, 446 characters.
LONG_ID = "call_" + "A" * 24 + "|" + ("fc_" + "Zm9vYmFy" * 52 + "x" * 2)[:416]
FILLER = ["listed the repository", "ran the linter: all clean", "read the README"]


def pi_line(entry_id: str, parent: str | None, message: dict, n: int) -> str:
    return json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                       "timestamp": f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}.000Z",
                       "message": message})


def write_pi_session(path: Path, outputs: list[tuple[str, str]], cwd: str = "/work/app") -> None:
    """A Pi v3 session: one user request, then one bash call per (call id, output)."""
    lines = [json.dumps({"type": "session", "version": 3, "id": path.stem.split("_")[-1],
                         "timestamp": "2026-01-01T00:00:00.000Z", "cwd": cwd})]
    parent = "u0"
    lines.append(pi_line("u0", None, {"role": "user", "content": "look around", "timestamp": 1}, 0))
    for n, (call_id, output) in enumerate(outputs, start=1):
        a, r = f"a{n}", f"r{n}"
        lines.append(pi_line(a, parent, {
            "role": "assistant", "model": "m", "stopReason": "toolUse",
            "content": [{"type": "toolCall", "id": call_id, "name": "bash",
                         "arguments": {"command": f"step {n}"}}],
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0}}, 2 * n))
        lines.append(pi_line(r, a, {
            "role": "toolResult", "toolCallId": call_id, "toolName": "bash", "isError": False,
            "content": [{"type": "text", "text": output}], "timestamp": 2}, 2 * n + 1))
        parent = r
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def roots(tmp_path):
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    outputs = [(f"call_{n}", text) for n, (_, text) in enumerate(TABLE)]
    outputs += [(f"call_f{n}", text) for n, text in enumerate(FILLER)]
    outputs.append((LONG_ID, "the output behind a very long tool call id"))
    write_pi_session(roots["pi"] / "--work-app--" / "2026-01-01T00-00-00-000Z_s1.jsonl", outputs)
    write_pi_session(roots["pi"] / "--work-other--" / "2026-01-02T00-00-00-000Z_s2.jsonl",
                     [("call_x", "the other project mentions paraxial.io/pricing once")],
                     cwd="/work/other")
    return roots


@pytest.fixture
def home(tmp_path, roots):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{roots["pi"]}"\nclaude_code = "{roots["claude"]}"\n'
        f'codex = "{roots["codex"]}"\n')
    return home


def owner_of(history: History, ref: str, text: str) -> str:
    from context_paging.index.history import search_text

    return next(i.history_id for i in history.navigator(ref).raw if text in search_text(i))


# --- the analyzer ---------------------------------------------------------------------------


def test_a_compound_token_is_indexed_whole_with_its_parts_and_adjacent_pairs():
    counts = term_counts("see src/components/Modal.tsx")
    assert set(counts) == {"see", "src/components/modal.tsx", "src", "components", "modal", "tsx",
                           "src/components", "components/modal", "modal.tsx"}
    assert compound_terms("paraxial.io") == (["paraxial", "io"], [])  # two parts: itself a pair
    assert compound_terms("snake_case") == ([], [])  # '_' stays inside a part (measured)


def test_a_longer_compound_query_needs_its_pairs_so_separators_still_count():
    [token] = query_tokens("INC-PAGER-047")
    assert token.pairs == ("inc-pager", "pager-047")
    assert "inc-pager" not in term_counts("INC/PAGER/047")


# --- every row of the table, through History, MCP and the CLI -------------------------------


@pytest.mark.parametrize(("query", "text"), TABLE, ids=[q for q, _ in TABLE])
def test_each_row_of_the_table_finds_its_turn_first(roots, tmp_path, query, text):
    history = History(roots, tmp_path / "h")
    ref = "pi:s1"
    first = history.search(query, session=ref, limit=3).references  # answered in memory
    history.wait_for_index()
    again = history.search(query, session=ref, limit=3).references  # answered by the index
    owner = owner_of(history, ref, text)
    history.close()
    assert first and first[0]["history_id"] == owner
    assert again == first


def test_the_exact_path_ranks_above_an_item_holding_only_its_parts(roots, tmp_path):
    path = roots["pi"] / "--work-app--" / "2026-01-03T00-00-00-000Z_s3.jsonl"
    write_pi_session(path, [("c1", "backup at old/src/components/modal.tsx.orig"),
                            ("c2", "edited src/components/modal.tsx")])
    history = History(roots, tmp_path / "h")
    hits = history.search("src/components/modal.tsx", session="pi:s3").references
    history.close()
    assert [h["history_id"] for h in hits] == ["a2", "a1"]


@pytest.mark.anyio
async def test_the_table_through_mcp_and_scope_all_needs_no_session(home, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no session ran here
    server = create_server(load_settings(home=home))
    async with Client(server) as client:
        for query, _ in TABLE:
            result = await client.call_tool("search_history", {"query": query, "session": "pi:s1"})
            assert not result.is_error, query
            refs = result.structured_content["references"]
            assert refs and refs[0]["session"] == "pi:s1", query
        result = await client.call_tool("search_history", {"query": "paraxial.io", "scope": "all"})
        assert not result.is_error, result.content
        sessions = {r["session"] for r in result.structured_content["references"]}
        assert sessions == {"pi:s1", "pi:s2"}
        result = await client.call_tool("search_history", {"query": "paraxial.io"})
        assert result.is_error  # scope session still needs one
    server.history.close()


def test_the_table_through_the_cli_and_scope_all_without_a_session(home, monkeypatch, tmp_path,
                                                                     capsys):
    monkeypatch.chdir(tmp_path)
    for query, _ in TABLE:
        assert main(["--home", str(home), "search", query, "--session", "pi:s1"]) == 0, query
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "Searched pi:s1: 10 items." and lines[1].startswith("pi:s1"), query
    assert main(["--home", str(home), "search", "paraxial.io", "--scope", "all"]) == 0
    out = capsys.readouterr().out
    assert "pi:s1" in out and "pi:s2" in out


def test_scope_project_given_a_directory_needs_no_session(home, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["--home", str(home), "search", "paraxial.io", "--scope", "project",
                 "--project", "/work/other"]) == 0
    out = capsys.readouterr().out
    assert "pi:s2" in out and "pi:s1" not in out


# --- real lengths -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_446_character_tool_call_id_reads_and_recalls(home):
    assert len(LONG_ID) == 446
    server = create_server(load_settings(home=home))
    async with Client(server) as client:
        hits = await client.call_tool("search_history",
                                      {"query": "very long tool call", "session": "pi:s1"})
        history_id = hits.structured_content["references"][0]["history_id"]
        page = await client.call_tool("read_context_output", {
            "history_id": history_id, "source": "tool_result", "tool_call_id": LONG_ID,
            "session": "pi:s1"})
        assert not page.is_error, page.content
        assert "very long tool call id" in page.structured_content["text"]
        recalled = await client.call_tool("recall", {"tool_call_id": LONG_ID, "session": "pi:s1"})
        assert not recalled.is_error, recalled.content
        assert "very long tool call id" in "".join(c.text for c in recalled.content
                                                  if hasattr(c, "text"))
    server.history.close()
