"""Reading a request on the session's previous one (``paging.request.read`` with ``earlier``)
gives the very value reading it from scratch gives, in every format, for random conversations
that grow, change an earlier message, keep a trailing request last, or carry ephemeral
messages; for ``after_id`` requests (the stored start named by ids) and for the whole
conversation (the start found by fingerprints). And the start is really taken from the earlier
request (its view objects), so the property is about the shortcut, not about a fallback."""

from __future__ import annotations

import json

import pytest
from context_paging.index.ledger import fingerprint
from context_paging.paging.formats import FormatError
from context_paging.paging.limits import ContextSelectionError
from context_paging.paging.request import read
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FORMATS = ["pi", "anthropic", "openai", "responses"]
# user: a request; calls: an assistant message making n calls; results: the results of the
# calls still open (Anthropic: one user message, with ``text`` a mixed one); answer: a final
# assistant text; system: a system/developer message (a plain request where the format has
# none); context: Codex's set-up message; thinking: a private model item.
EVENTS = st.sampled_from(["user", "calls1", "calls2", "results", "results+text", "answer",
                          "aborted", "system", "context", "thinking"])


def conversation(events: list[str], fmt: str, salt: int = 0) -> list[dict]:
    out: list[dict] = []
    open_calls: list[str] = []
    for n, event in enumerate(events):
        text = f"m{n}-{salt}"
        if event.startswith("calls"):
            ids = [f"c{n}-{k}-{salt}" for k in range(int(event[-1]))]
            open_calls = ids
            out += _calls(fmt, ids, n)
        elif event.startswith("results"):
            out += _results(fmt, open_calls, text if event.endswith("text") else None)
            open_calls = []
        elif event in ("answer", "aborted"):
            out.append(_answer(fmt, text, event == "aborted"))
        elif event == "thinking" and fmt == "responses":
            out.append({"type": "reasoning", "summary": [], "encrypted_content": text})
        elif event == "system" and fmt in ("openai", "responses"):
            out.append({"role": "developer" if fmt == "responses" else "system",
                        "content": text})
        elif event == "context" and fmt == "responses":
            out.append({"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": f"<environment_context>{text}"}]})
        else:
            out.append({"role": "user", "content": text} if fmt != "responses" else
                       {"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": text}]})
    return out


def _calls(fmt: str, ids: list[str], n: int) -> list[dict]:
    if fmt == "pi":
        return [{"role": "assistant", "stopReason": "toolUse", "content": [
            {"type": "toolCall", "id": i, "name": f"t{n}", "arguments": {"n": n}} for i in ids]}]
    if fmt == "anthropic":
        return [{"role": "assistant", "content": [
            {"type": "tool_use", "id": i, "name": f"t{n}", "input": {"n": n}} for i in ids]}]
    if fmt == "openai":
        return [{"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": f"t{n}", "arguments": "{}"}}
            for i in ids]}]
    return [{"type": "function_call", "call_id": i, "name": f"t{n}", "arguments": '{"n": 1}'}
            for i in ids]


def _results(fmt: str, ids: list[str], text: str | None) -> list[dict]:
    if fmt == "anthropic":
        blocks: list[dict] = [{"type": "tool_result", "tool_use_id": i, "content": f"out {i}"}
                              for i in ids]
        if text is not None or not blocks:
            blocks.append({"type": "text", "text": text or "empty"})
        return [{"role": "user", "content": blocks}]
    if fmt == "pi":
        made = [{"role": "toolResult", "toolCallId": i, "toolName": "t", "isError": False,
                 "content": [{"type": "text", "text": f"out {i}"}]} for i in ids]
    elif fmt == "openai":
        made = [{"role": "tool", "tool_call_id": i, "content": f"out {i}"} for i in ids]
    else:
        made = [{"type": "function_call_output", "call_id": i, "output": f"out {i}"}
                for i in ids]
    return made + ([{"role": "user", "content": text}] if text and fmt != "responses" else [])


def _answer(fmt: str, text: str, aborted: bool) -> dict:
    if fmt == "pi":
        return {"role": "assistant", "content": [{"type": "text", "text": text}],
                "stopReason": "aborted" if aborted else "stop"}
    if fmt == "anthropic":
        return {"role": "assistant", "content": [{"type": "text", "text": text}],
                "stop_reason": "aborted" if aborted else "end_turn"}
    if fmt == "openai":
        return {"role": "assistant", "content": text,
                "finish_reason": "aborted" if aborted else "stop"}
    return {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}


def prints(messages: list[dict]):
    return lambda skip: [None if i in skip else fingerprint(m) for i, m in enumerate(messages)]


def outcome(messages, fmt, ephemeral, stored=(), validate=False, earlier=None):
    try:
        return read(messages, fmt, ephemeral, prints(messages), stored, validate, earlier)
    except (ContextSelectionError, FormatError) as exc:
        return f"{type(exc).__name__}: {exc}"


def taken(request, earlier) -> int:
    """How many leading views ``request`` took from ``earlier`` (the very objects)."""
    count = 0
    for view, before in zip(request.views.views, earlier.views.views):  # noqa: B905
        if view is not before:
            break
        count += 1
    return count


REUSED: dict[str, int] = {}


@settings(max_examples=300, deadline=None, derandomize=True,  # the coverage check below
          suppress_health_check=[HealthCheck.too_slow])  # sees the same examples every run
@given(fmt=st.sampled_from(FORMATS), events=st.lists(EVENTS, min_size=1, max_size=14),
       more=st.lists(EVENTS, max_size=5), upto=st.integers(1, 40), cut=st.integers(0, 40),
       how=st.sampled_from(["grow", "tail", "edit", "after_id"]),
       ephemeral=st.lists(st.integers(0, 60), max_size=2), validate=st.booleans())
def test_a_request_read_on_the_previous_one_is_the_one_read_from_scratch(
        fmt, events, more, upto, cut, how, ephemeral, validate):
    messages = conversation(events, fmt)
    if not messages:
        return
    upto = min(upto, len(messages))
    first = [e % upto for e in ephemeral[:1]]
    earlier = outcome(messages[:upto], fmt, first, validate=validate)
    if isinstance(earlier, str):
        return  # refused: nothing to build on
    extra = conversation(more, fmt, salt=1)
    stored: list[str] = []
    if how == "after_id":
        # The stored messages up to a stored id (as the ledger gives them back), then new ones.
        at = max(1, cut % (upto + 1))
        kept = [i for i in range(at) if earlier.ids[i] is not None]
        if not kept:
            return
        stored = [earlier.ids[i] for i in kept]  # type: ignore[misc]
        current = [earlier.messages[i] for i in kept] + messages[at:] + extra
    elif how == "tail":
        current = [*messages[:upto - 1], *extra, messages[upto - 1]]
    elif how == "edit":
        at = cut % upto
        changed = json.loads(json.dumps(messages[at]))
        changed["edited"] = True
        current = [*messages[:at], changed, *messages[at + 1:], *extra]
    else:
        current = messages + extra
    now = sorted({e % len(current) for e in ephemeral[1:]} - set(range(len(stored))))
    built = outcome(current, fmt, now, stored, validate, earlier)
    assert built == outcome(current, fmt, now, stored, validate)
    if not isinstance(built, str):
        REUSED[fmt] = REUSED.get(fmt, 0) + bool(taken(built, earlier))


def test_the_property_takes_views_from_the_earlier_request_in_every_format():
    """The property above does exercise the shortcut: in every format, many of its requests
    took their leading views from the earlier request."""
    REUSED.clear()
    test_a_request_read_on_the_previous_one_is_the_one_read_from_scratch()
    assert all(REUSED.get(fmt, 0) >= 5 for fmt in FORMATS), REUSED


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_run_of_model_items_that_goes_on_is_read_again(fmt):
    """Responses: the earlier request ends inside a run of model items that the next one
    continues: that run's view changes, the views before it are taken as they were."""
    events = ["user", "calls1", "results", "user", "calls1"]
    messages = conversation(events + ["answer", "user"], fmt)
    upto = len(conversation(events, fmt))
    earlier = read(messages[:upto], fmt, [], prints(messages[:upto]))
    whole = read(messages, fmt, [], prints(messages), (), False, earlier)
    assert whole == read(messages, fmt, [], prints(messages))
    last_run = len(earlier.views.views) - 1  # the earlier request's last view: the call
    if fmt == "responses":  # the call and the answer are one run: one view, made again
        assert taken(whole, earlier) == last_run
        assert whole.views.views[last_run] != earlier.views.views[last_run]
    else:
        assert taken(whole, earlier) == len(earlier.views.views)


def test_a_host_editing_its_message_in_place_gets_a_new_view():
    """Views are the request's own values: a Pi message edited in place by a library host
    changes its fingerprint, so its view is made again (the earlier view is not the host's dict
    and did not change)."""
    messages = conversation(["user", "calls1", "results", "answer"], "pi")
    earlier = read(messages, "pi", [], prints(messages))
    view = earlier.views.views[3].message
    messages[3]["stopReason"] = "error"
    assert view["stopReason"] == "stop"
    again = read(messages, "pi", [], prints(messages), (), False, earlier)
    assert again == read(messages, "pi", [], prints(messages))
    assert again.interrupted[3] and taken(again, earlier) == 3
    assert again.views.views[3].message is not messages[3]
