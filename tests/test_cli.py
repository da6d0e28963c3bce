"""The command line: demo, search, index, stats, as a person runs them."""

from __future__ import annotations

import pytest
from context_paging.index.discovery import iter_session_files
from context_paging.server.cli import main

from tests.test_protocol import lay_out, write_config


def test_the_demo_pages_the_sample_session_and_recovers_the_evicted_error(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "paged" in out and "protected_overflow" in out
    assert "Context paging notice" in out
    assert "612: 2026-11-19T23:41:07Z checkout  ERROR redis connect failed: ECONNREFUSED" in out
    # The seeded test logs are distilled; the one shown keeps its summary line.
    distilled = int(out.split("Distillation")[1].split(" output(s) distilled")[0].split()[-1])
    assert distilled > 0
    assert "[distilled] The output of bash `pytest -q tests/ --count=25" in out
    assert "passed in" in out.split("as the model now sees it")[1]
    # One size for one output: what load_history shows is what read_context_output pages.
    loaded = out.split("output, exact: ")[1].split(" characters as JSON")[0].split(", ")[1]
    paged = out.split("→ 2,000 of ")[1].split(" characters")[0]
    assert loaded == paged == "72,925"


def test_the_demo_explains_each_mode_its_table_shows_once(capsys):
    from context_paging.server.commands.demo import MODE_MEANINGS

    assert main(["demo", "--quiet"]) == 0
    out = capsys.readouterr().out
    table, rest = out.split("\nWhat the modes mean:\n", 1)
    shown = {line.split()[5] for line in table.splitlines()[3:] if line.strip()}
    explained = [line.split(":")[0].strip() for line in rest.split("\n\n")[0].splitlines()
                 if not line.startswith("    ")]
    assert sorted(explained) == sorted(shown) and "protected_overflow" in shown
    assert "the newest exchange alone is over the budget" in rest
    assert all(MODE_MEANINGS[mode].split()[0] in rest for mode in shown)


@pytest.fixture
def home(tmp_path):
    roots = lay_out(tmp_path)
    home = tmp_path / "home"
    write_config(home, roots)
    return home


PI_V1 = "pi:5e7a0c1e-0000-4000-8000-00000000a001"  # the sample sessions' references
PI_V3 = "pi:019cc0de-3333-7000-8000-00000000b003"
CLAUDE = "claude:7c0ffee0-1111-4222-8333-444455556666"


def test_search_prints_what_it_searched_then_each_reference_with_its_matched_line(home, capsys):
    assert main(["--home", str(home), "search", "ZeroDivisionError", "--session", PI_V1]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Searched {PI_V1}: 15 items."  # the compaction summary is one
    assert lines[1].startswith(PI_V1) and "model_turn failed [bash]" in lines[1]
    assert "test_report.py" in lines[2]
    assert lines[3] == ("    > bash output toolu_pi1_a line 97: E   «ZeroDivisionError»: "
                        "division by zero in report.py:42 (average_per_shelf)")


def test_search_says_what_it_searched_and_what_to_try_when_nothing_matches(home, capsys):
    assert main(["--home", str(home), "search", "zzzqqqxxx", "--session", PI_V3]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"Searched {PI_V3}: ") and "none matches 'zzzqqqxxx'" in out
    assert "Try scope 'all' to search every session" in out


def test_index_all_then_again_reports_nothing_to_do(home, capsys):
    assert main(["--home", str(home), "index", "--all"]) == 0
    first = capsys.readouterr().out
    assert main(["--home", str(home), "index", "--all"]) == 0
    second = capsys.readouterr().out
    laid_out = len(list(iter_session_files(lay_out(home.parent / "count"))))
    assert f" {laid_out} session(s)" in first and " 0 session(s)" in second


def test_an_unknown_session_is_a_clear_error_on_stderr(home, capsys):
    assert main(["--home", str(home), "stats", "--session", "claude:nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no session matches 'claude:nope'" in captured.err


def test_stats_of_a_session_file_show_cache_totals(home, capsys):
    assert main(["--home", str(home), "stats", "--session", CLAUDE]) == 0
    out = capsys.readouterr().out
    assert "SESSION — complete saved history" in out and "Tokens read" in out


def test_flags_override_settings_and_bad_values_fall_back_with_a_warning(tmp_path, capsys):
    home = tmp_path / "h"
    assert main(["--home", str(home), "--set", "paging.token_budget=64000",
                 "--set", "paging.estimator=bogus", "config"]) == 0
    captured = capsys.readouterr()
    assert "paging.token_budget = 64000" in captured.out and "flag --set" in captured.out
    assert 'paging.estimator = "tiktoken"' in captured.out
    assert "paging.estimator = 'bogus'" in captured.out  # config lists the warnings


def test_index_all_reports_each_session_then_the_commit_on_stderr_only(home, capsys):
    assert main(["--home", str(home), "index", "--all"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("Index up to date: ")
    lines = captured.err.splitlines()
    assert all(line.startswith("context-paging: ") for line in lines)
    bars = [line for line in lines if line.startswith("context-paging: [")]
    assert " indexing " in bars[0] and "index up to date" in bars[-1]


def test_index_all_says_it_is_writing_the_index_after_the_last_session(home):
    from context_paging.server.config import load_settings
    from context_paging.server.mcp.tools import make_history

    seen: list[tuple[float, float | None, str]] = []
    history = make_history(load_settings(home=str(home)))
    try:
        history.index_all(lambda done, total, message: seen.append((done, total, message)))
    finally:
        history.close()
    total = seen[-1][1]
    assert seen[-2:] == [(total, None, "writing the index"), (total, total, "index up to date")]
    assert [m for _, t, m in seen[:-2]] == [m for _, _, m in seen[:-2] if m.startswith("indexing")]
