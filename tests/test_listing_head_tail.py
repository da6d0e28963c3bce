"""A listing reads each session's head and tail, and shows exactly what the whole read shows."""

from __future__ import annotations

import json

import pytest
from context_paging.index import catalog as catalog_module
from context_paging.index import listing
from context_paging.index.catalog import Catalog
from context_paging.index.listing import list_info
from context_paging.index.sessions import SessionFile, load

from tests.conftest import ALL_SAMPLES, SAMPLE_SOURCE, recorded_params, source_folder
from tests.test_protocol import lay_out

# Small enough that every session but the tiniest is listed from its ends (the head growing
# where the first prompt lies deeper), as a large session is with the default sizes.
SIZES = [(256, 256), (1024, 512), (4096, 4096)]
EVERY_SESSION = [*recorded_params(), *(pytest.param(p, id=p.name) for p in ALL_SAMPLES)]


@pytest.mark.parametrize("path", EVERY_SESSION)
def test_the_head_and_tail_listing_equals_the_whole_read(path):
    source = SAMPLE_SOURCE[source_folder(path)]
    whole = load(str(path), source)
    for head, tail in SIZES:
        listed = list_info(str(path), source, head=head, tail=tail)
        if listed is not None:
            assert (listed.info, listed.size) == (whole.info, whole.cursor.size), (head, tail)
    assert list_info(str(path), source, head=path.stat().st_size) is None  # small: read whole


def test_the_catalog_lists_every_session_as_the_whole_read_does(tmp_path, monkeypatch):
    roots = lay_out(tmp_path)
    monkeypatch.setattr(catalog_module, "PARALLEL_FROM", 10_000)
    monkeypatch.setattr(listing, "HEAD_BYTES", 512)
    monkeypatch.setattr(listing, "TAIL_BYTES", 512)
    from_ends = Catalog(roots).summaries()
    monkeypatch.setattr(listing, "list_info", lambda *args, **kwargs: None)
    assert Catalog(roots).summaries() == from_ends


def claude_line(n: int, parent: str | None, text: str, **extra) -> str:
    value = {"parentUuid": parent, "isSidechain": False, "cwd": "/work/app",
             "sessionId": "5e55", "version": f"2.1.{n}", "type": "user" if n % 2 else
             "assistant", "uuid": f"u{n}", "timestamp": f"2026-01-01T00:00:{n % 60:02d}.000Z",
             "message": {"role": "user", "content": text} if n % 2 else
             {"role": "assistant", "content": [{"type": "text", "text": text}]}}
    return json.dumps({**value, **extra})


def big_claude_session(path, turns: int = 400, tail_lines: tuple[str, ...] = ()) -> None:
    lines = [claude_line(n, f"u{n - 1}" if n > 1 else None, f"turn {n} " + "x" * 2000)
             for n in range(1, turns)]
    path.write_text("\n".join([*lines, *tail_lines]) + "\n")


def test_a_large_session_is_listed_without_reading_it_whole(tmp_path, monkeypatch):
    path = tmp_path / "claude" / "-work-app" / "5e55.jsonl"
    path.parent.mkdir(parents=True)
    big_claude_session(path)
    whole_reads = []
    real = SessionFile.refresh
    monkeypatch.setattr(SessionFile, "refresh", lambda self: whole_reads.append(self) or
                        real(self))
    [summary] = Catalog({"claude": tmp_path / "claude"}).summaries()
    assert whole_reads == []
    assert (summary.title, summary.format, summary.updated, summary.size) == (
        "turn 1 " + "x" * 73, "claude-2.1.399", "2026-01-01T00:00:39.000Z", path.stat().st_size)


def test_a_rename_at_the_end_of_a_large_session_is_its_title(tmp_path):
    path = tmp_path / "5e55.jsonl"
    big_claude_session(path, tail_lines=(
        json.dumps({"type": "ai-title", "aiTitle": "what the model called it"}),
        json.dumps({"type": "custom-title", "customTitle": "what I called it"}),
        claude_line(401, "u399", "after the rename")))
    listed = list_info(str(path), "claude")
    assert listed is not None and listed.info == load(str(path), "claude").info
    assert listed.info.title == "what I called it"


def test_a_first_prompt_longer_than_the_head_is_still_the_title(tmp_path):
    path = tmp_path / "5e55.jsonl"
    first = claude_line(1, None, "the real request " + "y" * 300_000)
    rest = [claude_line(n, f"u{n - 1}", "z" * 2000) for n in range(2, 1500)]
    path.write_text("\n".join([first, *rest]) + "\n")
    listed = list_info(str(path), "claude")
    assert listed is not None and listed.info.title.startswith("the real request")
    assert listed.info == load(str(path), "claude").info


def test_a_tail_inside_one_long_last_line_grows_until_it_holds_a_timestamp(tmp_path):
    path = tmp_path / "5e55.jsonl"
    big_claude_session(path, tail_lines=(claude_line(400, "u399", "w" * 200_000),))
    listed = list_info(str(path), "claude")
    assert listed is not None and listed.info == load(str(path), "claude").info
    assert listed.info.updated == "2026-01-01T00:00:40.000Z"
