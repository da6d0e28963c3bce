"""The README's tool reference is generated from the committed tools/list snapshot."""

from __future__ import annotations

from context_paging.server.docs import BEGIN, END, reference, snapshot_tools

from tests.conftest import PROJECT


def test_the_readme_tool_reference_matches_the_tool_schemas():
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    hint = "run: python -m context_paging.server.docs --write"
    assert block == "\n" + reference(snapshot_tools()), hint


def test_the_readme_shows_the_two_front_door_commands():
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    assert "pip install . && context-paging demo" in readme
    assert "pip install -e '.[test]' && pytest" in readme
