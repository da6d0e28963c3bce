"""``context-paging replay``: every figure checked against a hand computation.

The arithmetic (``paging.replay_cost``) is checked on literal numbers. The whole replay runs on
Pi sessions generated here, with the characters/4 estimator, so a message of 400 characters is
100 tokens and the expected figures can be worked out from the session itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from context_paging.paging.replay_cost import (
    Compaction,
    Prices,
    Sent,
    compaction,
    full_history,
    sent_after,
    totals,
)
from context_paging.paging.request import common_start
from context_paging.server.cli import main
from context_paging.server.replay.run import ReplayOptions, distinctive, replay

PRICES = Prices(uncached=1.0, cache_write=1.25, cache_read=0.1)


# --- the arithmetic -----------------------------------------------------------------------------


def test_full_history_extends_the_previous_request_and_costs_reads_plus_writes():
    sent = full_history([10, 20, 30, 40], [1, 3])
    assert sent == [Sent(10, 0), Sent(60, 10)]
    t = totals(sent, PRICES)
    # request 1: 10 written; request 2: 10 read, 50 written
    assert t.cost == pytest.approx(10 * 1.25 + 10 * 0.1 + 50 * 1.25)
    assert t.uncached_cost == 70
    assert (t.peak, t.cumulative, t.prefix) == (60, 70, 10)
    assert t.prefix_share == pytest.approx(10 / 70)
    assert t.breaks == {}


def test_a_request_that_does_not_reuse_the_previous_one_is_a_break_with_its_cause():
    first = Sent(100, 0)
    assert sent_after(first, 130, 100) == Sent(130, 100)  # reuses all: no break
    broken = sent_after(first, 90, 40, "cut")
    assert broken == Sent(90, 40, rewritten=60, cause="cut")
    assert sent_after(first, 90, 40).cause == "other"  # no cause given
    t = totals([first, broken, sent_after(broken, 95, 10, "distillation")], PRICES)
    assert t.breaks == {"cut": 1, "distillation": 1}
    assert t.rewritten == {"cut": 60, "distillation": 80}


def test_common_start_counts_equal_leading_messages():
    a, b, c = {"x": 1}, {"x": 2}, {"x": 3}
    assert common_start([a, b, c], [a, dict(b), {"x": 4}]) == 2
    assert common_start([], [a]) == 0
    assert common_start([a, b], [a, b, c]) == 2


def test_compaction_summarises_past_the_threshold_and_keeps_the_current_exchange():
    # messages: u a u a u a u (100 tokens each); requests before each assistant
    estimates = [100.0] * 7
    sent = compaction(estimates, [1, 3, 5, 7], lambda i: True, Compaction(450, 50, 0))
    # 100, 300 within the threshold; 500 > 450: summary call over 500 (reuses the 300),
    # then summary 50 + the last user message 100 = 150, a break rewriting 500; the last
    # request adds two messages: 350
    assert [s.tokens for s in sent] == [100, 300, 500, 150, 350]
    assert [s.summary for s in sent] == [False, False, True, False, False]
    assert sent[2].prefix == 300 and sent[3] == Sent(150, 0, 500, "compaction")
    assert sent[4].prefix == 150  # grows again from the summary


def test_compaction_tail_never_starts_with_a_tool_result_and_grows_within_keep():
    estimates = [100.0, 100.0, 100.0, 100.0]  # user, assistant(call), toolResult, toolResult
    starts = {0, 1}
    sent = compaction(estimates, [4], lambda i: i in starts, Compaction(350, 10, 0))
    assert sent[-1].tokens == 10 + 300  # the assistant and both of its results
    sent = compaction(estimates, [4], lambda i: i in starts, Compaction(350, 10, 400))
    assert sent[-1].tokens == 10 + 400  # keep reaches back to the user message


# --- whole replays on generated sessions --------------------------------------------------------


def _pi_file(path: Path, turns: list[tuple[str, str, str, str]]) -> Path:
    """A Pi v3 session: per turn a request, a read call, its output and a final answer."""
    lines = [{"type": "session", "version": 3, "id": "gen", "timestamp": "2026-01-01T00:00:00Z",
              "cwd": "/w"}]
    parent = None

    def add(message: dict) -> None:
        nonlocal parent
        entry_id = f"e{len(lines)}"
        lines.append({"type": "message", "id": entry_id, "parentId": parent,
                      "timestamp": "2026-01-01T00:00:00Z", "message": message})
        parent = entry_id

    for n, (request, file, output, answer) in enumerate(turns):
        add({"role": "user", "content": [{"type": "text", "text": request}]})
        add({"role": "assistant", "stopReason": "toolUse", "content": [
            {"type": "toolCall", "id": f"c{n}", "name": "read", "arguments": {"path": file}}]})
        add({"role": "toolResult", "toolCallId": f"c{n}", "toolName": "read",
             "content": [{"type": "text", "text": output}], "isError": False})
        add({"role": "assistant", "stopReason": "stop",
             "content": [{"type": "text", "text": answer}]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _turns(n: int, output_chars: int = 2000) -> list[tuple[str, str, str, str]]:
    turns = []
    for i in range(n):
        word = f"marker_{i:03d}_widget"
        line = f"{word} holds value {i}\n"
        output = (line * (output_chars // len(line) + 1))[:output_chars]
        turns.append((f"please read module number {i}".ljust(400, "."), f"src/mod{i:03d}.py",
                      output, f"module {i} read".ljust(200, ".")))
    return turns


def _tokens(message_chars: int) -> int:
    return math.ceil(message_chars / 4)


def test_replay_figures_match_a_hand_computation_within_the_budget(tmp_path):
    path = _pi_file(tmp_path / "s.jsonl", _turns(3))
    result = replay(str(path), ReplayOptions(budget=128_000, estimator="chars4", distill=False))
    call = [_tokens(len("read") + len(json.dumps({"path": f"src/mod{i:03d}.py"},
                                                 separators=(",", ":")))) for i in range(3)]
    # requests: before each call (u) and before each answer (u, call, output)
    per_turn = [(100, 100 + call[i] + 500) for i in range(3)]
    done = 0
    expected = []
    for _i, (first, second) in enumerate(per_turn):
        expected += [done + first, done + second]
        done += second + 50
    assert [r.full.tokens for r in result.rows] == expected
    assert [r.window.tokens for r in result.rows] == expected  # nothing to page
    assert [r.compaction.tokens for r in result.rows] == expected
    t = result.totals()
    assert t["window"].cumulative == sum(expected)
    assert t["window"].prefix == sum(expected[:-1])
    cost = expected[0] * 1.25 + sum(p * 0.1 + (c - p) * 1.25
                                    for p, c in zip(expected, expected[1:], strict=False))
    assert t["window"].cost == pytest.approx(cost)
    assert t["full"].cost == pytest.approx(cost)
    assert result.cut_advances() == 0
    assert {r.mode for r in result.rows} == {"within_budget"}
    assert result.recoverability["identifiers"] == 0  # nothing left the window


def _window_tokens(message: dict) -> int:
    content = message["content"]
    if isinstance(content, str):
        return _tokens(len(content))
    chars = 0
    for block in content:
        if block["type"] == "text":
            chars += len(block["text"])
        elif block["type"] == "toolCall":
            chars += len(block["name"]) + len(json.dumps(block["arguments"],
                                                          separators=(",", ":")))
    return _tokens(chars)


def test_paged_replay_prefix_cost_cut_advances_and_recoverability(tmp_path, monkeypatch):
    path = _pi_file(tmp_path / "s.jsonl", _turns(24))
    windows: list[list[dict]] = []
    frontiers: list = []
    from context_paging.index.service import History

    original = History.select_context

    def spy(self, session, messages, **kwargs):
        reply = original(self, session, messages, **kwargs)
        windows.append(reply["messages"])
        frontiers.append(reply["frontier"])
        return reply

    monkeypatch.setattr(History, "select_context", spy)
    result = replay(str(path), ReplayOptions(budget=4_000, estimator="chars4", distill=False,
                                             compaction=Compaction(6_000, 500, 0)))
    assert len(windows) == len(result.rows) == 48
    # tokens of each window, recomputed from the messages the selector returned
    sizes = [[_window_tokens(m) for m in w] for w in windows]
    assert [r.window.tokens for r in result.rows] == [sum(s) for s in sizes]
    # the prefix: leading messages equal to the previous window's
    for n in range(1, len(windows)):
        shared = 0
        while (shared < min(len(windows[n]), len(windows[n - 1]))
               and windows[n][shared] == windows[n - 1][shared]):
            shared += 1
        assert result.rows[n].window.prefix == sum(sizes[n][:shared])
    advances = [n for n in range(len(frontiers)) if frontiers[n] is not None
                and frontiers[n] != (frontiers[n - 1] if n else None)]
    assert advances and result.cut_advances() == len(advances)
    assert [r.index for r in result.rows if r.window.cause == "cut"] == [
        n for n in advances if n and result.rows[n].window.rewritten > 0]
    assert all(r.window.tokens <= 4_000 for r in result.rows)
    t = result.totals()
    assert t["window"].cost == pytest.approx(sum(
        r.window.prefix * 0.1 + (r.window.tokens - r.window.prefix) * 1.25 for r in result.rows))
    assert t["window"].cumulative < t["full"].cumulative
    # recoverability: identifiers of outputs that left, none of them still in the last window
    rec = result.recoverability
    assert rec["identifiers"] > 0 and rec["found"] == rec["identifiers"]
    last_text = json.dumps(windows[-1])
    assert "marker_000_widget" not in last_text
    # the baseline compacted at 6,000 and the summary call is counted
    assert any(s.summary for s in result.sent["compaction"])
    assert t["compaction"].breaks.get("compaction", 0) >= 1


def test_a_distillation_edit_without_a_cut_advance_is_counted_as_its_own_break(tmp_path):
    # the same file read again makes the first, large read out of date: distillation removes it
    # at the next run end while everything still fits the budget
    output = "".join(f"line {i}: value_{i} = compute_{i}()\n" for i in range(300))
    turns = [("read the config module".ljust(100), "src/config.py", output, "read it"),
             ("read it again please".ljust(100), "src/config.py", output, "read again"),
             ("thanks, now summarise".ljust(100), "src/other.py", "short", "done")]
    path = _pi_file(tmp_path / "s.jsonl", turns)
    # Without a prompt cache (provider "none") an edit costs no re-write, so it lands at once.
    result = replay(str(path), ReplayOptions(budget=128_000, estimator="chars4",
                                             model="none/any"))
    assert result.distillation["distilled_outputs"] >= 1
    assert result.distillation["saved_characters"] > 0
    breaks = [r for r in result.rows if r.window.cause]
    assert breaks and {r.window.cause for r in breaks} == {"distillation"}
    assert result.cut_advances() == 0
    t = result.totals()
    assert t["window"].breaks == {"distillation": len(breaks)}
    assert t["window"].cumulative < t["full"].cumulative
    # each such break is reported with its price: the re-written tokens at write − read
    priced = result.distillation_breaks()
    assert [b["request"] for b in priced] == [r.index for r in breaks]
    for b, r in zip(priced, breaks, strict=False):
        assert b["price"] == pytest.approx(r.window.rewritten * (1.25 - 0.1))
        assert b["value"] == pytest.approx(max(0.0, b["saved_tokens"]) * 0.1
                                           * b["later_requests"])
        assert b["pays"] == (b["value"] >= b["price"])


def test_under_a_prompt_cache_an_edit_that_does_not_pay_waits_and_breaks_nothing(tmp_path):
    # The same session priced as Anthropic's 5-minute cache (the default): removing the first
    # read would re-write the cached prefix after it for savings read on too few later
    # requests, so the decision is stored but the window keeps sending the read unchanged.
    output = "".join(f"line {i}: value_{i} = compute_{i}()\n" for i in range(300))
    turns = [("read the config module".ljust(100), "src/config.py", output, "read it"),
             ("read it again please".ljust(100), "src/config.py", output, "read again"),
             ("thanks, now summarise".ljust(100), "src/other.py", "short", "done")]
    path = _pi_file(tmp_path / "s.jsonl", turns)
    result = replay(str(path), ReplayOptions(budget=128_000, estimator="chars4"))
    assert result.distillation["distilled_outputs"] >= 1  # decided (recall still has it)
    assert [r for r in result.rows if r.window.cause] == []
    assert all(r.distilled == 0 for r in result.rows)
    t = result.totals()
    assert t["window"].cost == t["full"].cost


def test_distinctive_words_are_paths_and_names_not_plain_words():
    words = distinctive("see src/app/main.py and fooBarBaz plus ERR_CONN_42 and hello world "
                        "and 1234567890 and deadbeefcafe1234")
    assert {"src/app/main.py", "fooBarBaz", "ERR_CONN_42", "deadbeefcafe1234"} <= words
    assert not {"hello", "world", "1234567890"} & words


def test_cli_replay_prints_the_report_and_json(tmp_path, capsys):
    path = _pi_file(tmp_path / "s.jsonl", _turns(6))
    assert main(["--home", str(tmp_path / "home"), "replay", str(path), "--estimator",
                 "chars4", "--budget", "3000"]) == 0
    out = capsys.readouterr().out
    assert "STRATEGY" in out and "window" in out and "recoverability:" in out
    assert "F full history" in out
    assert main(["--home", str(tmp_path / "home"), "replay", str(path), "--estimator",
                 "chars4", "--budget", "3000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["requests"]) == 12
    assert set(data["totals"]) == {"full", "compaction", "window"}
    assert data["options"]["format"] == "pi"


def test_requests_carry_a_result_for_every_call_and_ignore_the_agents_compaction(tmp_path):
    # a call that never got its result, an orphan result, then a Pi compaction entry: the
    # replay sends an error result for the call, leaves the orphan out, and keeps the messages
    # the compaction summarised in every later request
    lines = [{"type": "session", "version": 3, "id": "gen", "timestamp": "2026-01-01T00:00:00Z",
              "cwd": "/w"}]

    def add(entry: dict) -> None:
        entry = {"id": f"e{len(lines)}", "parentId": lines[-1].get("id") if len(lines) > 1
                 else None, "timestamp": "2026-01-01T00:00:00Z", **entry}
        lines.append(entry)

    add({"type": "message", "message": {"role": "user", "content": [
        {"type": "text", "text": "a" * 400}]}})
    add({"type": "message", "message": {"role": "assistant", "stopReason": "toolUse", "content": [
        {"type": "toolCall", "id": "lost", "name": "bash", "arguments": {"command": "ls"}}]}})
    add({"type": "message", "message": {"role": "user", "content": [
        {"type": "text", "text": "b" * 400}]}})
    add({"type": "message", "message": {"role": "toolResult", "toolCallId": "nobody",
                                        "toolName": "bash", "content": [
                                            {"type": "text", "text": "orphan"}]}})
    add({"type": "message", "message": {"role": "assistant", "stopReason": "stop", "content": [
        {"type": "text", "text": "c" * 200}]}})
    add({"type": "compaction", "summary": "s" * 40, "firstKeptEntryId": lines[-1]["id"],
         "tokensBefore": 300})
    add({"type": "message", "message": {"role": "user", "content": [
        {"type": "text", "text": "d" * 400}]}})
    add({"type": "message", "message": {"role": "assistant", "stopReason": "stop", "content": [
        {"type": "text", "text": "e" * 200}]}})
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    from context_paging.server.replay.run import request_ends, session_messages

    originals, messages = session_messages(str(path))
    assert [m["role"] for m in messages] == [
        "user", "assistant", "toolResult", "user", "assistant", "user", "assistant"]
    assert messages[2]["isError"] and originals[2] is None
    assert request_ends(messages) == [1, 4, 6]
    result = replay(str(path), ReplayOptions(estimator="chars4", distill=False))
    assert result.refused == []
    call = _tokens(len("bash") + len('{"command":"ls"}'))
    error = _tokens(len("No result provided"))
    assert [r.full.tokens for r in result.rows] == [
        100, 100 + call + error + 100, 100 + call + error + 100 + 50 + 100]
