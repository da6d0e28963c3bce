"""The generated reference pages match the code, and the README shows the front-door commands."""

from __future__ import annotations

import re

from context_paging.server.commands.docs import (
    BEGIN,
    CONFIG_BEGIN,
    CONFIG_END,
    END,
    block_of,
    config_reference,
    reference,
    snapshot_tools,
)
from context_paging.server.config import SCHEMA
from context_paging.server.settings_help import MEANINGS

from tests.conftest import PROJECT

HINT = "run: python -m context_paging.server.commands.docs --write"


def _page(name: str) -> str:
    return (PROJECT / "docs" / name).read_text(encoding="utf-8")


def test_the_tool_reference_page_matches_the_tool_schemas():
    block = block_of(_page("tools.md"), BEGIN, END)
    assert block == "\n" + reference(snapshot_tools()), HINT


def test_the_configuration_page_matches_the_settings_table():
    block = block_of(_page("configuration.md"), CONFIG_BEGIN, CONFIG_END)
    assert block == "\n" + config_reference(), HINT


def test_every_setting_has_a_meaning_and_every_meaning_a_setting():
    assert {s: set(keys) for s, keys in MEANINGS.items()} == {
        s: set(keys) for s, keys in SCHEMA.items()}


def test_the_configuration_page_lists_each_setting_with_its_default_and_rule():
    page = _page("configuration.md")
    assert ("| `token_budget` | `128000` | a whole number from 1 to 9,007,199,254,740,991 |"
            in page)
    assert "| `min_result_chars` | `4000` | an integer from 0 to 10,000,000 |" in page
    assert '| `exclude_tools` | `["edit", "write"]` | a list of tool names |' in page


def test_the_readme_shows_the_two_front_door_commands():
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    assert "pip install . && context-paging demo" in readme
    assert "pip install -e '.[test]' && pytest" in readme


def _project_text_files():
    for path in sorted(PROJECT.rglob("*")):
        parts = path.relative_to(PROJECT).parts
        if path.suffix not in (".md", ".py", ".toml") or path.name == "CHANGELOG.md":
            continue
        if any(p.startswith(".") or p.endswith(".egg-info") or p in ("build", "dist")
               for p in parts):
            continue
        yield path


def test_no_file_cites_documents_outside_the_repository_or_issue_numbers():
    outside = re.compile(r"DESIGN\.md|STYLE\.md|specs/[\w.-]+|\u00a7")
    numbered = re.compile(r"\b(issue|item) [0-9]+", re.IGNORECASE)
    found = [f"{path.relative_to(PROJECT)}:{n}: {line.strip()}"
             for path in _project_text_files()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if outside.search(line) or numbered.search(line)]
    assert found == [], "write the rule in docs/ and cite that page"
