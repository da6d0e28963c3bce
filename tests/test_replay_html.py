"""``replay --html``: one self-contained page whose charts carry the ``--json`` figures."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from context_paging.server.cli import main
from context_paging.server.replay.svg import nice_top

from tests.test_replay import _pi_file, _turns

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def report(tmp_path, capsys):
    """The HTML page and the JSON report of one paged replay, made by one command."""
    session = _pi_file(tmp_path / "s.jsonl", _turns(14))
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    assert main(["--home", str(tmp_path / "home"), "replay", "--session", str(session),
                 "--estimator", "chars4", "--budget", "3000", "--json", "--quiet",
                 "--html", str(page)]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert [p.name for p in page.parent.iterdir()] == ["report.html"]  # one file, nothing beside
    return page.read_text(encoding="utf-8"), figures


def _charts(html: str) -> list[ET.Element]:
    return [ET.fromstring(svg) for svg in re.findall(r"<svg\b.*?</svg>", html, re.S)]


def _series(chart: ET.Element) -> dict[str, ET.Element]:
    return {line.get("data-series"): line for line in chart.iter(f"{SVG}polyline")}


def test_the_report_is_one_page_with_nothing_to_fetch_and_no_script(report):
    html, _ = report
    assert "<script" not in html.lower()
    assert not re.search(r"\b(src|href)=", html)
    assert re.findall(r"https?://[^\s\"']+", html) == ["http://www.w3.org/2000/svg"] * 3
    assert "@media print" in html
    assert len(_charts(html)) == 3


def test_the_token_chart_draws_the_json_figures_of_every_strategy(report):
    html, figures = report
    chart = _charts(html)[1]
    requests = figures["requests"]
    series = _series(chart)
    assert set(series) == {"full", "compaction", "window"}
    top = float(chart.get("data-ymax"))
    y0, height = float(chart.get("data-top")), float(chart.get("data-height"))
    for name, line in series.items():
        values = [float(v) for v in line.get("data-values").split(",")]
        assert values == [r[f"{name}_tokens"] for r in requests], name
        ys = [float(point.split(",")[1]) for point in line.get("points").split()]
        assert ys == pytest.approx([y0 + height - v / top * height for v in values], abs=0.06)
    peak = max(r["full_tokens"] for r in requests)
    assert top == nice_top(max(peak, figures["options"]["budget"]))


def test_the_budget_line_and_each_cut_advance_are_marked(report):
    html, figures = report
    chart = _charts(html)[1]
    budget = [line for line in chart.iter(f"{SVG}line") if line.get("class") == "budget"]
    assert len(budget) == 1 and f"budget {figures['options']['budget']:,} tokens" in html
    cuts = [m for m in chart.iter(f"{SVG}path") if m.get("class") == "mark cut"]
    assert figures["cut_advances"] > 0
    assert len(cuts) == figures["cut_advances"]
    advanced = [r["index"] + 1 for r in figures["requests"] if r["cut_advanced"]]
    assert [m.find(f"{SVG}title").text for m in cuts] == [
        f"request {n}: the cut advances" for n in advanced]


def test_the_cost_chart_ends_at_each_strategys_total_cost(report):
    html, figures = report
    series = _series(_charts(html)[2])
    for name, line in series.items():
        values = [float(v) for v in line.get("data-values").split(",")]
        assert len(values) == len(figures["requests"])
        assert values == sorted(values)  # cumulative
        assert values[-1] == pytest.approx(figures["totals"][name]["cost"]), name


def test_the_first_chart_is_the_live_views_chart_of_the_window(report):
    html, figures = report
    chart = _charts(html)[0]
    assert chart.get("class") == "request-chart"  # server/chart.py, as the live view draws it
    requests = figures["requests"]
    series = _series(chart)
    assert [float(v) for v in series["sent"].get("data-values").split(",")] == [
        r["window_tokens"] for r in requests]
    assert [float(v) for v in series["full"].get("data-values").split(",")] == [
        r["full_tokens"] for r in requests]
    cuts = [m for m in chart.iter(f"{SVG}path") if m.get("class") == "mark cut"]
    assert [int(m.get("data-index")) for m in cuts] == [
        r["index"] for r in requests if r["cut_advanced"]]
    bars = [g for g in chart.iter(f"{SVG}g") if g.get("class") == "bar"]
    assert [float(g.get("data-read")) for g in bars] == [r["window_prefix"] for r in requests]
    assert figures["never_paged"] is False and figures["suggested_budget"] is None
    assert "never passed" not in html


def test_a_session_that_never_passes_the_budget_says_so_and_suggests_one(tmp_path, capsys):
    session = _pi_file(tmp_path / "s.jsonl", _turns(14))
    page = tmp_path / "report.html"
    args = ["--home", str(tmp_path / "home"), "replay", "--session", str(session),
            "--estimator", "chars4", "--quiet", "--summary", "--html", str(page)]
    assert main(args) == 0  # the default budget, far above this session
    text = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    peak = max(r["full_tokens"] for r in figures["requests"])
    assert figures["never_paged"] and figures["cut_advances"] == 0
    budget = figures["suggested_budget"]
    assert budget is not None and 1_000 <= budget < peak
    for shown in (text, page.read_text(encoding="utf-8")):
        assert "never passed the 128,000-token budget" in shown
        assert f"replay it with --budget {budget}" in shown
    # and at that budget it does page
    assert main([*args[:-2], "--budget", str(budget), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert not again["never_paged"] and any(r["mode"] != "within_budget"
                                            for r in again["requests"])


def test_the_report_states_the_recoverability_figures(report):
    html, figures = report
    rec = figures["recoverability"]
    assert rec["identifiers"] > 0
    assert f"<b>{rec['found']} found</b>" in html
    assert f"({rec['found']}/{rec['identifiers']} identifiers)" in html


def test_the_picture_script_draws_the_sample_session_as_one_standalone_svg(tmp_path,
                                                                          monkeypatch):
    from bench import replay_picture

    out = tmp_path / "replay.svg"
    monkeypatch.setattr("sys.argv", ["replay_picture", "--sample", "--out", str(out)])
    replay_picture.main()
    chart = ET.fromstring(out.read_text(encoding="utf-8"))
    assert set(_series(chart)) == {"full", "compaction", "window"}
    assert "select_context window" in "".join(chart.itertext())  # the key is in the picture
