"""select_context end to end: formats, ledger, persisted cut, calibration, through the service."""

from __future__ import annotations

import json

import pytest
from context_paging.index.ledger import Ledger, LedgerError, fingerprint
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging.distill import DistillConfig
from context_paging.paging.formats import FormatError, detect_format
from context_paging.paging.request import chain_ids
from context_paging.paging.select import ContextSelectionError

BIG = "x" * 8_000  # 2,000 chars4 tokens


def service(tmp_path, budget=6_000, **kwargs):
    # Paging on its own: distillation (tests/test_distill_e2e.py) would shrink the outputs.
    kwargs.setdefault("distill", DistillConfig(enabled=False))
    settings = ContextSettings(token_budget=budget, estimator="chars4", **kwargs)
    return ContextService(Ledger(tmp_path / "home"), settings, None)


# --- one conversation, three formats --------------------------------------------------------------


def anthropic_turns(n):
    out = []
    for i in range(n):
        out += [
            {"role": "user", "content": f"request {i}"},
            {"role": "assistant", "content": [
                {"type": "text", "text": f"reading {i}"},
                {"type": "tool_use", "id": f"call-{i}", "name": "read",
                 "input": {"path": f"src/{i}.py"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"call-{i}",
                                          "content": BIG}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}]},
        ]
    return out


def openai_turns(n):
    out = []
    for i in range(n):
        out += [
            {"role": "user", "content": f"request {i}"},
            {"role": "assistant", "content": f"reading {i}", "tool_calls": [
                {"id": f"call-{i}", "type": "function",
                 "function": {"name": "read", "arguments": json.dumps({"path": f"src/{i}.py"})}}]},
            {"role": "tool", "tool_call_id": f"call-{i}", "content": BIG},
            {"role": "assistant", "content": f"done {i}"},
        ]
    return out


def pi_turns(n):
    out = []
    for i in range(n):
        out += [
            {"role": "user", "content": f"request {i}"},
            {"role": "assistant", "stopReason": "toolUse", "content": [
                {"type": "text", "text": f"reading {i}"},
                {"type": "toolCall", "id": f"call-{i}", "name": "read",
                 "arguments": {"path": f"src/{i}.py"}}]},
            {"role": "toolResult", "toolCallId": f"call-{i}", "toolName": "read",
             "content": [{"type": "text", "text": BIG}], "isError": False},
            {"role": "assistant", "stopReason": "stop",
             "content": [{"type": "text", "text": f"done {i}"}]},
        ]
    return out


TURNS = {"anthropic": anthropic_turns, "openai": openai_turns, "pi": pi_turns}


def valid_for(fmt, messages):
    """The provider-shape check: no orphan results, first message a user message."""
    assert messages[0]["role"] == "user"
    calls: set[str] = set()
    for message in messages:
        if fmt == "anthropic":
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block.get("type") == "tool_use":
                    calls.add(block["id"])
                if block.get("type") == "tool_result":
                    assert block["tool_use_id"] in calls, "orphan tool_result"
        elif fmt == "openai":
            calls |= {c["id"] for c in message.get("tool_calls") or ()}
            if message["role"] == "tool":
                assert message["tool_call_id"] in calls, "orphan tool message"
        else:
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block.get("type") == "toolCall":
                    calls.add(block["id"])
            if message["role"] == "toolResult":
                assert message["toolCallId"] in calls, "orphan toolResult"


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "pi"])
def test_old_turns_leave_whole_with_a_notice_and_the_window_stays_valid(tmp_path, fmt):
    svc = service(tmp_path)
    conversation = TURNS[fmt](6) + [{"role": "user", "content": "summarize"}]
    reply = svc.select("s1", conversation, fmt="auto")
    assert reply["mode"] == "paged"
    assert reply["estimated_tokens"] <= 6_000
    valid_for(fmt, reply["messages"])
    window_text = json.dumps(reply["messages"])
    assert "Context paging notice" in window_text
    assert "summarize" in window_text and "request 0" not in window_text
    # Old turns left as whole turns: every surviving request still has its answer.
    assert window_text.count("request ") == window_text.count("done ")


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "pi"])
def test_each_returned_window_starts_like_the_previous_one_between_advances(tmp_path, fmt):
    svc = service(tmp_path, budget=9_000)
    turns = TURNS[fmt](12)
    previous, previous_notice = None, None
    advances = 0
    for n in range(1, 13):
        reply = svc.select("grow", turns[: 4 * n] + [{"role": "user", "content": "next"}])
        window = reply["messages"][:-1]  # the trailing request changes every call
        if previous is not None and reply["notice"] == previous_notice:
            assert window[: len(previous)] == previous
        elif previous is not None:
            advances += 1
        previous, previous_notice = window, reply["notice"]
    assert advances >= 2


def test_a_restarted_server_returns_the_same_window(tmp_path):
    conversation = pi_turns(6) + [{"role": "user", "content": "next"}]
    first = service(tmp_path).select("r", conversation)
    again = service(tmp_path).select("r", conversation)  # a new process: state from disk
    assert again["messages"] == first["messages"]
    assert again["frontier"] == first["frontier"]


def test_the_ledger_keeps_every_message_and_equal_prefixes_get_equal_ids(tmp_path):
    svc = service(tmp_path)
    conversation = openai_turns(3)
    svc.select("L", conversation + [{"role": "user", "content": "a"}])
    svc.select("L", conversation + [{"role": "user", "content": "b"}])  # an edit: a branch
    ledger = Ledger(tmp_path / "home").session("L")
    assert len(ledger.records) == len(conversation) + 2
    items = ledger.items()
    assert items[-1].message.content[0].text == "b"
    ids = chain_ids([fingerprint(m) for m in conversation])
    assert [i.history_id for i in items if i.kind == "user"][0] == ids[0]


def test_ephemeral_messages_are_sent_but_never_stored(tmp_path):
    svc = service(tmp_path)
    conversation = [{"role": "user", "content": "hello"},
                    {"role": "user", "content": "<reminder>injected</reminder>"}]
    reply = svc.select("E", conversation, fmt="openai", ephemeral=[1])
    assert reply["messages"] == conversation
    ledger = Ledger(tmp_path / "home").session("E")
    assert [r["message"]["content"] for r in ledger.records.values()] == ["hello"]


def test_a_selection_error_still_stores_the_messages(tmp_path):
    svc = service(tmp_path, budget=100)
    conversation = [{"role": "user", "content": "y" * 4_000}]
    with pytest.raises(ContextSelectionError) as caught:
        svc.select("X", conversation, fmt="openai")
    assert caught.value.code == "ACTIVE_REQUEST_TOO_LARGE"
    assert len(Ledger(tmp_path / "home").session("X").records) == 1


def test_a_truncated_ledger_line_is_cut_off_and_nothing_stored_is_lost(tmp_path):
    svc = service(tmp_path)
    svc.select("T", [{"role": "user", "content": "one"}], fmt="openai")
    path = tmp_path / "home" / "ledger" / "T.jsonl"
    with open(path, "a") as handle:
        handle.write('{"type": "message", "id": "half')  # a crash mid-append
    conversation = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                    {"role": "user", "content": "three"}]
    service(tmp_path).select("T", conversation, fmt="openai")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    stored = [line["message"]["content"] for line in lines if line["type"] == "message"]
    assert stored == ["one", "two", "three"]


@pytest.mark.parametrize("name", ["../escape", "a/b", "", ".hidden", "x" * 129, "a\x00b"])
def test_ledger_session_ids_that_could_escape_are_refused(tmp_path, name):
    with pytest.raises(LedgerError):
        service(tmp_path).select(name, [{"role": "user", "content": "x"}], fmt="openai")


def test_format_detection_is_explicit_about_ambiguity():
    assert detect_format([{"role": "tool", "tool_call_id": "a", "content": "x"}]) == "openai"
    assert detect_format([{"role": "toolResult", "toolCallId": "a", "content": []}]) == "pi"
    assert detect_format([{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "x"}]}]) == "anthropic"
    with pytest.raises(FormatError, match="mix formats"):
        detect_format([{"role": "tool", "tool_call_id": "a", "content": "x"},
                       {"role": "toolResult", "toolCallId": "a", "content": []}])
    with pytest.raises(FormatError, match="cannot tell"):
        detect_format([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])


def test_anthropic_results_mixed_with_text_are_split_and_rebuilt(tmp_path):
    svc = service(tmp_path, budget=4_000)
    conversation = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "read", "input": {"path": "a"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": BIG * 2},
            {"type": "text", "text": "and now the next request"}]},
    ]
    reply = svc.select("M", conversation, fmt="anthropic")
    # The old exchange left; the new request stays, rebuilt without the orphaned result,
    # with the notice merged in front (Anthropic wants a user message first).
    assert len(reply["messages"]) == 1
    first = reply["messages"][0]
    assert first["role"] == "user"
    assert [b["type"] for b in first["content"]] == ["text", "text"]
    assert first["content"][1]["text"] == "and now the next request"
    assert "Context paging notice" in first["content"][0]["text"]


def test_openai_system_messages_stay_first_and_are_resident(tmp_path):
    svc = service(tmp_path, budget=4_000)
    conversation = [{"role": "system", "content": "be brief"}] + openai_turns(4) + [
        {"role": "user", "content": "go"}]
    reply = svc.select("S", conversation, fmt="openai")
    assert reply["messages"][0] == {"role": "system", "content": "be brief"}
    assert "Context paging notice" in reply["messages"][1]["content"]


def test_usage_calibrates_the_next_estimate(tmp_path):
    svc = service(tmp_path, budget=50_000)
    conversation = pi_turns(1)
    first = svc.select("C", conversation[:1], fmt="pi")
    assert first["estimated_tokens"] < 100
    # The provider counted far more than the characters/4 estimate for request + response.
    usage = {"input_tokens": 5_000, "output_tokens": 100, "cache_read_tokens": 0,
             "cache_write_tokens": 0}
    second = svc.select("C", conversation[:3] + [{"role": "user", "content": "more"}],
                        fmt="pi", usage=usage)
    assert second["estimated_tokens"] > 5_000
    assert svc.stats("C").input_measured


def test_a_model_switch_resets_the_cut(tmp_path):
    first = pi_turns(6) + [{"role": "user", "content": "next"}]
    grown = pi_turns(7) + [{"role": "user", "content": "and next"}]
    # Same model: the remembered cut holds while the window is between target and budget.
    same = service(tmp_path / "a")
    same.select("W", first, model="a")
    kept = same.select("W", grown, model="a")
    # Another model: the cut is forgotten, so FIFO runs from the start down to the target.
    switched = service(tmp_path / "b")
    switched.select("W", first, model="a")
    reset = switched.select("W", grown, model="b")
    assert kept["mode"] == reset["mode"] == "paged"
    assert len(reset["messages"]) < len(kept["messages"])
    assert Ledger(tmp_path / "b" / "home").load_state("W")["settings"] == ["b", None]


def test_disabled_paging_passes_messages_through_but_still_stores_them(tmp_path):
    svc = service(tmp_path, enabled=False)
    conversation = pi_turns(6)
    reply = svc.select("D", conversation)
    assert reply["mode"] == "disabled" and reply["messages"] == conversation
    assert len(Ledger(tmp_path / "home").session("D").records) == len(conversation)


def test_stats_report_history_latest_request_and_cache(tmp_path):
    svc = service(tmp_path)
    svc.select("Q", pi_turns(6) + [{"role": "user", "content": "x"}],
               usage={"input_tokens": 10, "cache_read_tokens": 120, "cache_write_tokens": 20})
    stats = svc.stats("Q")
    assert stats.history_tokens >= 6 * 2_000
    assert stats.budget_tokens == 6_000
    assert stats.cache_read_tokens == 120 and stats.cache_write_tokens == 20
    from context_paging.index.stats import render
    text = render(stats)
    assert "Paging budget        6,000   (" in text and "Tokens read          120" in text
