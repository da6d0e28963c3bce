"""Sessions as a whole: every sample (and recorded) session loads, grows incrementally, stays
private, is discoverable."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from context_paging.index.catalog import Catalog
from context_paging.index.discovery import SessionRefError, resolve
from context_paging.index.history import public_item
from context_paging.index.sessions import SessionFile, load
from context_paging.server.cli import main

from tests.conftest import ALL_SAMPLES, recorded_params, sample, source_folder

PRIVATE_KEYS = {"thinking", "signature", "thinkingSignature", "textSignature", "thoughtSignature",
                "encrypted_content", "data"}


def _private_strings(value, inside_private=False, out=None):
    """Every thinking/reasoning/signature string in a raw record (redacted thinking's data too)."""
    out = set() if out is None else out
    if isinstance(value, dict):
        kind = value.get("type")
        private_block = kind in ("thinking", "redacted_thinking", "reasoning")
        for key, inner in value.items():
            if isinstance(inner, str):
                redacted_data = key == "data" and kind == "redacted_thinking"
                if key in PRIVATE_KEYS - {"data"} or redacted_data:
                    out.add(inner)
                elif private_block and key == "text" or inside_private and key == "text":
                    out.add(inner)
            else:
                _private_strings(inner, inside_private or private_block, out)
    elif isinstance(value, list):
        for inner in value:
            _private_strings(inner, inside_private, out)
    return out


EVERY_SESSION = [*ALL_SAMPLES, *recorded_params()]


@pytest.mark.parametrize("path", EVERY_SESSION, ids=lambda p: p.name)
def test_every_fixture_loads_and_its_public_view_holds_no_private_text(path):
    session = load(str(path))
    items = session.projection.items
    assert items, "every fixture has at least one history item"
    public = json.dumps([public_item(i) for i in items], ensure_ascii=False)
    private = set()
    for record in session.records:
        private |= _private_strings(record.value)
    leaked = [s for s in private if len(s) >= 16 and s in public]
    assert leaked == []


BRANCHING = ("rewind", "branching")


def _last_line_parses(data: bytes) -> bool:
    """Whether a file's last line is whole; a partial one (the pi v1 sample's) is left unparsed,
    while a complete object without its newline is read."""
    try:
        json.loads(data[data.rfind(b"\n") + 1:] or b"0")
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("path", EVERY_SESSION, ids=lambda p: p.name)
def test_appending_keeps_earlier_ids_and_parses_only_new_bytes(tmp_path, path):
    data = path.read_bytes()
    lines = data.split(b"\n")
    half = b"\n".join(lines[: len(lines) // 2]) + b"\n"
    copy = tmp_path / path.name
    copy.write_bytes(half)
    session = SessionFile(str(copy))
    session.refresh()
    before = [item.history_id for item in session.projection.items]
    parsed_before = session.cursor.bytes_parsed_total
    with open(copy, "ab") as handle:
        handle.write(data[len(half):])
    assert session.refresh()
    after = [item.history_id for item in session.projection.items]
    complete = len(data) if _last_line_parses(data) else data.rindex(b"\n") + 1
    assert session.cursor.bytes_parsed_total - parsed_before == complete - len(half)
    # Earlier items keep their ids. The last one or two may still change: an exchange that was
    # pending at the cut completes, and a Claude response can gain fragments; branches chosen by
    # "the newest leaf" (the branching fixtures) legitimately move to another branch.
    if not any(word in path.name for word in BRANCHING):
        stable = before[: max(0, len(before) - 2)]
        assert after[: len(stable)] == stable
        assert len(after) >= len(before)


def test_a_session_file_being_written_shows_its_complete_lines_only(tmp_path):
    source = sample("pi-v3").read_bytes()
    cut = source.rindex(b"\n", 0, len(source) - 1) + 40  # 40 bytes into the last line
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(source[:cut])
    session = SessionFile(str(copy))
    session.refresh()
    assert session.pending
    partial_items = len(session.projection.items)
    copy.write_bytes(source)
    session.refresh()
    assert not session.pending
    assert len(session.projection.items) >= partial_items


# --- discovery and references ------------------------------------------------------------------


@pytest.fixture
def roots(tmp_path):
    """The fixtures laid out as the agents lay out their session folders."""
    pi = tmp_path / "pi" / "--work-app--"
    claude = tmp_path / "claude" / "-work-app"
    codex = tmp_path / "codex" / "2026" / "06" / "19"
    for folder in (pi, claude, codex):
        folder.mkdir(parents=True)
    shutil.copy(sample("pi-v3"),
                pi / "2026-01-01T00-00-00-000Z_0d1f2e3a-aaaa-bbbb-cccc-000000000001.jsonl")
    shutil.copy(sample("claude"), claude / "4f1c0000-1111-2222-3333-444455556666.jsonl")
    sub = claude / "4f1c0000-1111-2222-3333-444455556666" / "subagents"
    sub.mkdir(parents=True)
    shutil.copy(sample("claude-subagent"), sub / "agent-a881341.jsonl")
    shutil.copy(sample("codex-0.40"),
                codex / "rollout-2025-09-24T20-12-23-01997ea4-a70d-7da3-8c20-c736db82a7c5.jsonl")
    return {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}


def test_references_resolve_by_source_id_bare_id_prefix_and_path(roots):
    assert resolve("pi:0d1f2e3a-aaaa-bbbb-cccc-000000000001", roots).source == "pi"
    assert resolve("claude:4f1c0000-1111-2222-3333-444455556666", roots).source == "claude"
    assert resolve("01997ea4-a70d-7da3-8c20-c736db82a7c5", roots).source == "codex"
    assert resolve("agent-a881341", roots).ref == "claude:agent-a881341"
    assert resolve("01997ea4", roots).source == "codex"  # a unique prefix of 8 characters
    path = next(roots["pi"].rglob("*.jsonl"))
    assert resolve(str(path), roots).ref == "pi:0d1f2e3a-aaaa-bbbb-cccc-000000000001"


@pytest.mark.parametrize("ref, message", [
    ("", "empty"),
    ("pi:nope", "no session matches 'pi:nope'"),
    ("0d1f", "too short: a session id prefix needs at least 6 characters"),
    ("/etc/passwd", "outside the configured session roots"),
    ("a\x00b", "NUL"),
])
def test_bad_references_are_refused_with_a_reason(roots, ref, message):
    with pytest.raises(SessionRefError, match=re.escape(message)):
        resolve(ref, roots)


def test_paths_escaping_the_roots_by_dots_or_symlinks_are_refused(roots, tmp_path):
    outside = tmp_path / "secret.jsonl"
    outside.write_text('{"type":"session","version":3,"id":"x"}\n')
    link = roots["pi"] / "--work-app--" / "link.jsonl"
    os.symlink(outside, link)
    with pytest.raises(SessionRefError, match="outside"):
        resolve(str(link), roots)
    with pytest.raises(SessionRefError, match=r"\.\."):
        resolve(str(roots["pi"] / ".." / "secret.jsonl"), roots)
    assert str(link) not in {s.path for s in Catalog(roots).summaries()}


def test_the_catalog_lists_sessions_newest_first_with_titles_and_parents(roots):
    summaries = Catalog(roots).summaries()
    refs = [s.ref for s in summaries]
    assert sorted(refs) == sorted([
        "pi:0d1f2e3a-aaaa-bbbb-cccc-000000000001",
        "claude:4f1c0000-1111-2222-3333-444455556666",
        "claude:agent-a881341",
        "codex:01997ea4-a70d-7da3-8c20-c736db82a7c5",
    ])
    updated = [s.updated for s in summaries]
    assert updated == sorted(updated, reverse=True)
    by_ref = {s.ref: s for s in summaries}
    assert by_ref["pi:0d1f2e3a-aaaa-bbbb-cccc-000000000001"].title == "Pricing cache with expiry"
    assert by_ref["claude:agent-a881341"].parent is not None
    assert Catalog(roots).summaries(source="codex")[0].source == "codex"


def test_the_sessions_command_prints_a_table(roots, tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        "[sources]\n" + "".join(
            f'{key} = "{roots[name]}"\n'
            for key, name in (("pi", "pi"), ("claude_code", "claude"), ("codex", "codex"))
        )
    )
    assert main(["--home", str(home), "sessions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["SESSION", "UPDATED", "(UTC)", "SIZE", "PROJECT", "TITLE"]
    assert len(out) == 5
    assert any("Pricing cache with expiry" in line for line in out)
    rows = {line.split()[0]: line for line in out[1:]}
    summaries = {s.ref: s for s in Catalog(roots).summaries()}
    for ref, line in rows.items():
        project = summaries[ref].cwd or "-"
        assert (project if len(project) <= 30 else project[-29:]) in line, ref
    subagent = rows["claude:agent-a881341"]
    parent = summaries["claude:agent-a881341"].parent
    assert f"[subagent of {parent[:len('claude:') + 8]}]" in subagent
    assert {ref for ref, line in rows.items() if "[subagent of" in line} == {
        ref for ref, summary in summaries.items() if summary.parent}


def test_the_sessions_command_says_when_there_is_nothing(tmp_path, capsys):
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{tmp_path}/none"\nclaude_code = "{tmp_path}/none"\n'
        f'codex = "{tmp_path}/none"\n'
    )
    capsys.readouterr()
    assert main(["--home", str(home), "sessions"]) == 0
    assert "No sessions found" in capsys.readouterr().out


@pytest.mark.parametrize("path", EVERY_SESSION, ids=lambda p: p.name)
def test_every_fixture_is_detected_as_its_own_format(path):
    expected = {"pi": "pi", "claude-code": "claude", "codex": "codex"}
    assert load(str(path)).source == expected[source_folder(path)]


def test_without_a_session_the_newest_one_run_in_this_directory_is_used(tmp_path, monkeypatch):
    from context_paging.index.service import History

    work = tmp_path / "work" / "app"
    work.mkdir(parents=True)
    folder = tmp_path / "pi" / ("--" + str(work).lstrip("/").replace("/", "-") + "--")
    folder.mkdir(parents=True)
    header = {"type": "session", "version": 3, "id": "here", "timestamp": "2026-01-01T00:00:00Z",
              "cwd": str(work)}
    prompt = {"type": "message", "id": "a1", "parentId": None, "timestamp": "2026-01-01T00:00:01Z",
              "message": {"role": "user", "content": "hello"}}
    (folder / "2026-01-01T00-00-00-000Z_here.jsonl").write_text(
        json.dumps(header) + "\n" + json.dumps(prompt) + "\n")
    elsewhere = tmp_path / "pi" / "--somewhere-else--"
    elsewhere.mkdir()
    shutil.copy(sample("pi-v3"), elsewhere / "2026-01-01T00-00-00-000Z_other.jsonl")
    history = History({"pi": tmp_path / "pi", "claude": None, "codex": None}, tmp_path / "h")
    monkeypatch.chdir(work)
    assert history.resolve_default(None) == "pi:here"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SessionRefError, match="no session ran in"):
        history.resolve_default(None)
