"""Distillation's edits reach the window with the re-writes the prompt cache pays anyway
(docs/distillation.md, "Under prompt caching"; index/window/landing.py, paging/cache_cost.py): on
generated conversations, an old output is not re-written where the cut holds and the savings do not
pay, pending edits land together at the next cut advance, and the window stays byte-stable in
between — also across a restart."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from context_paging.index.service import History
from context_paging.index.window.landing import held_targets, to_land
from context_paging.index.window.pipeline import ContextSettings
from context_paging.paging.cache_cost import PRICES, horizon, pays, prices_for
from context_paging.paging.distill import DistillConfig

from tests.test_distill_e2e import ANSWER, GREP

CLAUDE = "anthropic/claude-sonnet-4"
FILLER = "The project is a small web service. " * 230  # about 2k tokens at chars/4
OTHER = "\n".join(f"src/cache/part_{i % 30}/entry_{i}.py:{i + 3}:    slot_{i} = fetch_slot_{i}(k)"
                  for i in range(300)) + "\nsrc/cache/store.py:7:def load_cache(path):"
OTHER_ANSWER = "load_cache is defined in src/cache/store.py at line 7: `def load_cache(path):`."


def _run(call_id: str, question: str, output: str, answer: str) -> list[dict]:
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Searching."},
            {"type": "tool_use", "id": call_id, "name": "grep", "input": {"pattern": "def "}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                      "content": output}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


CONVERSATION = [
    {"role": "user", "content": "Describe the project."},
    {"role": "assistant", "content": [{"type": "text", "text": FILLER}]},
    *_run("call_a", "Where is parse_config defined?", GREP, ANSWER),
    *_run("call_b", "Where is load_cache defined?", OTHER, OTHER_ANSWER),
    {"role": "user", "content": "Add a docstring to load_cache."},
    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
]
# The requests, in order: each ends where the host would call the model.
REQUESTS = [5, 7, 9, 11, 12]  # mid-run a; a's run ended; mid-run b; b's ended; short run


def outputs(window: list[dict]) -> dict[str, str]:
    """Tool call id -> the output text the window sends."""
    found = {}
    for message in window:
        for block in message.get("content") if isinstance(message.get("content"), list) else ():
            if block.get("type") == "tool_result":
                content = block["content"]
                if isinstance(content, list):
                    content = "".join(b.get("text", "") for b in content)
                found[block["tool_use_id"]] = content
    return found


def history(home: Path, budget: int = 128_000, trim: int | None = None) -> History:
    return History({}, home, ContextSettings(token_budget=budget, trim_to_tokens=trim,
                                             estimator="chars4", distill=DistillConfig()))


def select(service: History, messages: list[dict], model: str = CLAUDE) -> dict:
    return service.select_context("landing", messages, fmt="anthropic", model=model)


def assert_extends(before: list[dict], after: list[dict]) -> None:
    """``after`` sends ``before``'s bytes as its prefix (the last message may gain blocks)."""
    assert json.dumps(after[:len(before) - 1]) == json.dumps(before[:-1])


def test_an_old_output_is_not_rewritten_where_the_cut_holds_and_the_savings_do_not_pay(tmp_path):
    service = history(tmp_path)
    windows = [select(service, CONVERSATION[:end])["messages"] for end in REQUESTS]
    decided = {d.target for d in service.ledger.session("landing").decisions if d.edits}
    assert decided == {"call_a", "call_b"}  # both decided at their run ends ...
    for window in windows:  # ... but the window keeps sending what the cache holds
        assert set(outputs(window).values()) <= {GREP, OTHER}
    assert outputs(windows[-1]) == {"call_a": GREP, "call_b": OTHER}
    for before, after in zip(windows, windows[1:], strict=False):
        assert_extends(before, after)
    # recall has the original, as for any decision
    assert service.recall("ledger:landing", tool_call_id="call_a").text == GREP
    service.close()


def test_without_a_prompt_cache_the_edit_lands_on_the_call_that_decides_it(tmp_path):
    service = history(tmp_path)
    replies = [select(service, CONVERSATION[:end], "none/any")["messages"] for end in REQUESTS]
    assert outputs(replies[1])["call_a"] != GREP  # decided at a's run end, sent at once
    assert len(outputs(replies[1])["call_a"]) < len(GREP) // 4
    service.close()


def test_pending_edits_land_together_at_the_next_cut_advance_and_survive_a_restart(tmp_path):
    # Budget 14k (chars/4): the conversation fits until a long request arrives; the trim target
    # 13.5k makes the cut evict only the opening exchange, so both greps stay in the window.
    home = tmp_path / "home"
    service = history(home, budget=14_000, trim=13_500)
    replies = [select(service, CONVERSATION[:end]) for end in REQUESTS[:-1]]
    service.close()
    assert all(r["frontier"] is None for r in replies)
    for reply in replies:
        assert set(outputs(reply["messages"]).values()) <= {GREP, OTHER}
    for before, after in zip(replies, replies[1:], strict=False):
        assert_extends(before["messages"], after["messages"])

    # A restarted server sends the same bytes: the pending state is the persisted window.
    service = history(home, budget=14_000, trim=13_500)
    again = select(service, CONVERSATION[:REQUESTS[-2]])
    assert json.dumps(again["messages"]) == json.dumps(replies[-1]["messages"])

    long_request = {"role": "user", "content": "Now write the design note: " + "x" * 48_000}
    cut = select(service, CONVERSATION + [long_request])
    assert cut["frontier"] is not None  # the cut advanced ...
    sent = outputs(cut["messages"])
    assert set(sent) == {"call_a", "call_b"}  # ... past the opening exchange only ...
    assert sent["call_a"] != GREP and sent["call_b"] != OTHER  # ... and both edits landed
    assert "src/config/loader.py:42:def parse_config(path):" in sent["call_a"]
    assert {d["tool_call_id"] for d in cut["distilled"]} == {"call_a", "call_b"}

    # After the re-write the edited bytes stay.
    follow = CONVERSATION + [long_request, {"role": "assistant", "content": "Written."},
                             {"role": "user", "content": "Thanks."}]
    later = select(service, follow)
    assert outputs(later["messages"]) == sent
    assert_extends(cut["messages"], later["messages"])
    assert service.recall("ledger:landing", tool_call_id="call_b").text == OTHER
    service.close()


# --- the pure rules ---------------------------------------------------------------------------


def test_an_edit_pays_when_its_savings_read_on_later_requests_exceed_the_rewrite():
    claude = PRICES["anthropic"]
    # re-writing 10k costs 10k x 1.15 = 11.5k; saving 2k read at 0.1 on 50 requests = 10k
    assert not pays(10_000, 2_000, 50, claude)
    assert pays(10_000, 2_000, 60, claude)  # 12k
    assert pays(10_000, 1, 1, PRICES["none"])  # no cache: any saving pays
    assert not pays(10_000, 0, 1000, claude)


def test_prices_follow_the_provider_and_the_usage_that_shows_no_cache():
    assert prices_for("anthropic") == PRICES["anthropic"]
    assert prices_for("openai-codex") == PRICES["openai"]
    assert prices_for(None) == PRICES["anthropic"]
    assert prices_for("anthropic", [[0, 0], [0, 0]]) == PRICES["none"]
    assert prices_for("anthropic", [[0, 0], [900, 10]]) == PRICES["anthropic"]


def test_the_horizon_ends_where_the_window_reaches_its_budget():
    assert horizon(100, room=5_000, growth=1_000) == 5.0
    assert horizon(3, room=5_000, growth=1_000) == 3.0  # no more than the session ran so far
    assert horizon(0, room=5_000, growth=0) == 1.0


def _d(target: str, saved: int) -> SimpleNamespace:
    return SimpleNamespace(decision=SimpleNamespace(target=target, saved_tokens=saved,
                                                    saved_chars=saved * 4))


def test_held_edits_after_the_first_changed_message_ride_on_that_rewrite():
    # views 1 and 3 carry pending edits (sent unedited last time); the request differs from
    # the previous one from position 2 on (say, an earlier edit landed there)
    distilled = {1: _d("a", 50), 3: _d("b", 50)}
    keys = ["m0#0", "m1#0~x", "m2#0", "m3#0~y"]
    previous = ["m0#0", "m1#0", "m2#0", "m3#0"]
    assert held_targets(distilled, keys, previous) == {"a", "b"}
    current = ["m0#0", "m1#0", "m2#0~z", "m3#0"]
    tokens = [100.0, 1000.0, 1000.0, 1000.0]
    # b (position 3) is free; a (position 1) would re-write 1k+1k for 50 saved: it waits
    assert to_land({"a", "b"}, distilled, keys, current, previous, tokens,
                   PRICES["anthropic"], 10) == {"b"}
    # the same savings over 1,000 later requests pay: both land in one re-write
    assert to_land({"a", "b"}, distilled, keys, current, previous, tokens,
                   PRICES["anthropic"], 1000) == {"a", "b"}
    # a cut that re-writes from the start carries every pending edit
    assert to_land({"a", "b"}, distilled, keys, ["m2#0", "m3#0"], previous, tokens,
                   PRICES["anthropic"], 1) == {"a", "b"}


# --- an omitted exchange's stub and the next request (paging/stubs.py) -------------------------


def test_a_stub_folds_into_the_next_plain_user_message_in_each_shape():
    from context_paging.paging.stubs import merge_stubs

    stub = "[distilled] An earlier exchange … recall({\"history_id\":\"m1\"})"
    answer = {"role": "assistant", "content": "Done."}
    # Pi / Anthropic: one text block; the next request a string
    pi = [{"role": "user", "content": [{"type": "text", "text": stub}]},
          {"role": "user", "content": "Next task."}, answer]
    assert merge_stubs(pi, {stub}) == [
        {"role": "user", "content": [{"type": "text", "text": stub},
                                     {"type": "text", "text": "Next task."}]}, answer]
    # OpenAI: the stub is a string; two stubs in a row fold into the same request
    openai = [{"role": "user", "content": stub}, {"role": "user", "content": stub + "2"},
              {"role": "user", "content": [{"type": "text", "text": "Next."}]}]
    assert merge_stubs(openai, {stub, stub + "2"}) == [
        {"role": "user", "content": [{"type": "text", "text": stub},
                                     {"type": "text", "text": stub + "2"},
                                     {"type": "text", "text": "Next."}]}]
    # Anthropic tool results must come first in their message: the stub stays separate
    results = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c",
                                            "content": "ok"}]}
    window = [{"role": "user", "content": [{"type": "text", "text": stub}]}, results]
    assert merge_stubs(window, {stub}) == window
    # an assistant message next (or nothing): unchanged
    assert merge_stubs(pi[:1] + [answer], {stub}) == pi[:1] + [answer]
    assert merge_stubs(pi[:1], {stub}) == pi[:1]
