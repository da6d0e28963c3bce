"""Progress on stderr: a bar on a terminal, plain lines otherwise, never quiet for long."""

from __future__ import annotations

import io
import json

import pytest
from context_paging.server.cli import main
from context_paging.server.commands.demo import sample_path
from context_paging.server.progress import QUIET_LIMIT, Progress, render


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_come_at_once_for_a_new_count_then_at_most_every_two_seconds():
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, tty=False, clock=clock)
    progress(0, 10, "indexing a")
    clock.now += 0.5
    progress(1, 10, "indexing b")  # too soon after the first line, though it names another
    clock.now += QUIET_LIMIT
    progress(2, 10, "indexing c")
    progress(10, 10, "done")  # the end is always said
    lines = out.getvalue().splitlines()
    assert [line.split("] ")[1] for line in lines] == [
        "0/10 indexing a (0 s)", "2/10 indexing c (2 s)", "10/10 done (2 s)"]
    assert all(line.startswith("context-paging: [") for line in lines)


def test_a_phase_is_said_at_once_and_repeated_with_its_time_while_it_lasts():
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, tty=False, clock=clock)
    progress.phase("writing the index")
    clock.now += 1.0
    progress.tick()  # quiet for less than the limit
    clock.now += 0.5
    progress.tick()
    clock.now += 1.0
    progress.tick()
    clock.now += 1.0
    progress.tick()
    assert out.getvalue().splitlines() == ["context-paging: writing the index (0 s)",
                                           "context-paging: writing the index (2 s)",
                                           "context-paging: writing the index (4 s)"]
    assert QUIET_LIMIT == 2.0


def test_a_patient_reporter_says_nothing_if_the_command_ends_within_three_quarters_of_a_second():
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, tty=False, clock=clock, patient=True)
    progress.phase("reading the session and searching")
    clock.now += 0.5
    progress.tick()
    assert out.getvalue() == ""
    clock.now += 0.25
    progress.tick()
    assert out.getvalue() == "context-paging: reading the session and searching (1 s)\n"


def test_on_a_terminal_the_bar_is_redrawn_in_place_and_cleared_before_stdout_text(capsys):
    clock, out = Clock(), io.StringIO()
    progress = Progress(out, tty=True, clock=clock)
    progress(3, 6, "replaying")
    assert out.getvalue().startswith("\r[###############...............] 3/6 replaying")
    progress.emit("a row of the report")
    assert out.getvalue().endswith("\r" + " " * 118 + "\r")
    assert capsys.readouterr().out == "a row of the report\n"


def test_a_phase_without_a_total_shows_no_bar():
    assert render(0, None, "reading the session file", 4.2) == "reading the session file (4 s)"


def test_a_replay_reports_progress_on_stderr_and_keeps_stdout_pure_json(tmp_path, capsys):
    argv = ["--home", str(tmp_path / "home"), "replay", "--session", str(sample_path()),
            "--estimator", "chars4", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # nothing but the JSON document
    steps = [line.split(": ", 1)[1] for line in captured.err.splitlines()
             if line.startswith("context-paging: ")]
    requests = len(report["requests"])
    bars = [s for s in steps if s.startswith("[")]
    assert bars[0].startswith(f"[{'.' * 30}] 0/{requests} replaying requests")
    assert bars[-1].startswith(f"[{'#' * 30}] {requests}/{requests} replaying requests")


def test_quiet_turns_the_progress_off(tmp_path, capsys):
    argv = ["--home", str(tmp_path / "home"), "replay", "--session", str(sample_path()),
            "--estimator", "chars4", "--summary", "--quiet"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "STRATEGY" in captured.out
    assert "context-paging:" not in captured.err


def test_replay_takes_the_session_as_a_flag_or_positionally_with_the_same_report(tmp_path,
                                                                                  capsys):
    base = ["--home", str(tmp_path / "home"), "replay", "--estimator", "chars4", "--json", "-q"]
    assert main([*base, "--session", str(sample_path())]) == 0
    by_flag = json.loads(capsys.readouterr().out)
    assert main([*base, str(sample_path())]) == 0
    by_position = json.loads(capsys.readouterr().out)
    for report in (by_flag, by_position):
        report.pop("seconds"), report.pop("cpu_seconds")
    assert by_flag == by_position


def test_replay_refuses_two_different_sessions_and_asks_for_one_when_none_is_given(tmp_path):
    base = ["--home", str(tmp_path / "home"), "replay", "-q"]
    with pytest.raises(SystemExit, match="give one"):
        main([*base, "--session", str(sample_path()), "pi:another"])
    with pytest.raises(SystemExit, match="needs a session: --session REF"):
        main(base)
