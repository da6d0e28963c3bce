"""Cases the round's shortcuts must answer as the full computation does, found in review
(each fix's test failed before it; the positions and two-server tests guard what held)."""

from __future__ import annotations

import json
import os
import shutil

from context_paging.index.ledger import Ledger
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_select_cost import full_computation, service, turn
from tests.test_window_cost import outcome
from tests.test_window_form import resident
from tests.test_window_form import service as form_service
from tests.test_window_form import turn as form_turn

ARGS = {"fmt": "pi", "system": "sys", "token_budget": 100_000}


def conversation(turns: int) -> list[dict]:
    return [m for n in range(turns) for m in turn(n, 40, "src/a.py", True, False)]


def stored(home) -> list[dict]:
    with open(home / "ledger" / "s.jsonl") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_a_deleted_ledger_file_is_written_again_whole(tmp_path):
    """The session's files are deleted between two calls (by hand, or by another server sharing
    the home), its name then used again: the next call stores the whole conversation again,
    as a server that never saw the session does, not only the messages this process had not
    stored before."""
    for reference in (False, True):
        home = tmp_path / str(reference)
        svc = service(home, reference=reference, budget=100_000)
        with full_computation() if reference else open(os.devnull):
            outcome(svc, messages=conversation(3), **ARGS)
            os.remove(home / "ledger" / "s.jsonl")
            os.remove(home / "state" / "s.json")  # the session's name is used afresh
            got = outcome(svc, messages=conversation(4), **ARGS)
        fresh = service(tmp_path / f"fresh{reference}", reference=True, budget=100_000)
        with full_computation():
            assert got == outcome(fresh, messages=conversation(4), **ARGS)
        records = [r for r in stored(home) if r["type"] == "message"]
        assert len(records) == len(conversation(4))
        session = Ledger(home).session("s")  # a new process reads the whole path back
        assert len(session.path_ids()) == len(conversation(4))
        # Deleted again: the head this process knew is no longer stored (UNKNOWN_AFTER_ID, as
        # in a process that never read the file), not expanded from memory.
        head = json.loads(got)[0]["last_message_id"]
        os.remove(home / "ledger" / "s.jsonl")
        with full_computation() if reference else open(os.devnull):
            gone = json.loads(outcome(svc, messages=[{"role": "user", "content": "more"}],
                                      after_id=head, **ARGS))[0]
        assert gone.get("error") == "UNKNOWN_AFTER_ID"


def test_a_message_the_host_changes_in_place_after_the_call_stays_as_stored(tmp_path):
    """A library host keeps its message dicts and edits one in place after a call. An
    ``after_id`` call stands for the messages the server stored: it answers with them as they
    were sent (as a server reading the ledger file does), not with the host's edited dict."""
    messages = conversation(4)
    fast = service(tmp_path / "fast", reference=False, budget=100_000)
    first = json.loads(outcome(fast, messages=messages, **ARGS))[0]
    shutil.copytree(tmp_path / "fast", tmp_path / "copy")  # what another server would read
    messages[2]["content"][0]["text"] = "edited in place"
    messages[1]["content"][0]["arguments"]["path"] = "elsewhere.py"
    new = [{"role": "user", "content": "go on"}]
    got = outcome(fast, messages=new, after_id=first["last_message_id"], **ARGS)
    other = service(tmp_path / "copy", reference=True, budget=100_000)
    with full_computation():
        assert got == outcome(other, messages=new, after_id=first["last_message_id"], **ARGS)
    assert "edited in place" not in got and "elsewhere.py" not in got


def test_positions_with_after_id_count_without_every_resident_message(tmp_path):
    """With ``after_id`` the positions count over the stored messages, then the new ones. The
    leading messages taken as resident input are never stored: OpenAI's system/developer
    messages, and in Responses its leading system/developer items (and Codex's set-up
    messages) too. A call that sends ``after_id`` and marks a new message ephemeral counts that
    message among the new ones (it is in this call's conversation, not stored for the next)."""
    from context_paging.paging.window_form import rebuild

    for fmt in ("openai", "responses", "anthropic", "pi"):
        lead = resident(fmt)
        conv = lead + [m for n in range(3) for m in form_turn(fmt, n, 1, 30, True, False)]
        note = {"role": "user", "content": "a note sent once"}
        new = [m for n in range(3, 5) for m in form_turn(fmt, n, 1, 30, True, False)]
        replies, firsts = {}, {}
        for form in ("positions", "messages"):
            svc = form_service(tmp_path / fmt / form, 3_000, True)
            first = svc.select("s", messages=[*conv, note], fmt=fmt, system="sys",
                               ephemeral=[len(conv)], reply_form=form)
            firsts[form] = first
            replies[form] = svc.select("s", messages=[*new, dict(note)], fmt=fmt, system="sys",
                                       after_id=first["last_message_id"], ephemeral=[len(new)],
                                       reply_form=form)
        held = conv[len(lead):]  # less the ephemeral note and the resident lead
        # ... which the positions reply names, so a host need not know the resident rules
        sent = [*conv, note]
        assert [m for i, m in enumerate(sent)
                if i not in firsts["positions"]["not_stored"]] == held, fmt
        assert replies["positions"]["not_stored"] == [len(held) + len(new)], fmt
        got = replies["positions"]
        window = rebuild(got["window"], got["messages"], [*held, *new, note])
        assert json.dumps(window) == json.dumps(replies["messages"]["messages"]), fmt
        if lead:  # counting the lead in would shift every position
            shifted = rebuild(got["window"], got["messages"], [*conv, *new, note])
            assert json.dumps(shifted) != json.dumps(replies["messages"]["messages"]), fmt


def test_the_ledger_keeps_a_bounded_number_of_sessions_read(tmp_path):
    """A long-running server that sees many sessions does not keep every one's messages: past
    OPEN_SESSIONS the least recently used are dropped (read from their files again when they
    come back, the same records and head), never one whose appends are not yet synced."""
    from context_paging.index import ledger as ledger_module
    from context_paging.paging.request import chain_ids

    ledger = Ledger(tmp_path)
    messages = conversation(2)
    ids = chain_ids([f"fp{i}" for i in range(len(messages))])
    ledger.session("s0").append(messages, ids, "pi", durable=False)  # not synced yet
    for n in range(1, 3 * ledger_module.OPEN_SESSIONS):
        ledger.session(f"s{n}").append(messages, ids, "pi")
        assert len(ledger._sessions) <= ledger_module.OPEN_SESSIONS + 1
    assert "s0" in ledger._sessions and "s1" not in ledger._sessions
    ledger.synced("s0")
    ledger.session("s1")  # another one opened: s0, synced now, can go
    assert "s0" not in ledger._sessions
    again = ledger.session("s0")
    assert again.head == ids[-1] and again.path_ids() == ids
    assert [again.records[i]["message"] for i in ids] == messages


def test_views_kept_for_later_calls_are_not_the_hosts_objects(tmp_path):
    """The request's views are kept for the next call to build on. A library host that edits
    its message dicts in place after a call (a nested block: Pi's views used to share the
    host's content lists) must not change what a later ``after_id`` call reads of the stored
    messages once the caches that happened to hide it were emptied (they are bounded: a
    long-running server clears them)."""
    from context_paging.index.window import distill as window_distill

    for budget in (1_500, 3_000):
        home = tmp_path / str(budget)
        messages = conversation(6)
        args = dict(ARGS, token_budget=budget)
        fast = service(home / "fast", reference=False, budget=budget)
        first = json.loads(outcome(fast, messages=messages, **args))[0]
        shutil.copytree(home / "fast", home / "copy")  # what another server would read
        for k in (18, 22):
            messages[k]["content"][0]["text"] = "grown " * 300
        fast.estimates.cache.clear()
        fast.distiller._reads.clear()
        window_distill._prints.clear()
        new = [{"role": "user", "content": "go on"}]
        got = outcome(fast, messages=new, after_id=first["last_message_id"], **args)
        other = service(home / "copy", reference=True, budget=budget)
        with full_computation():
            assert got == outcome(other, messages=new, after_id=first["last_message_id"], **args)


def test_dict_subclass_messages_edited_in_place_are_read_again(tmp_path):
    """A library host whose messages are dict subclasses (an OrderedDict, say) edits one in
    place between two whole-conversation calls: the edit is seen (new fingerprint, new id,
    the edited text in the window), as the full computation sees it."""
    from collections import OrderedDict

    def ordered(value):
        if isinstance(value, dict):
            return OrderedDict((k, ordered(v)) for k, v in value.items())
        if isinstance(value, list):
            return [ordered(v) for v in value]
        return value

    messages = [ordered(m) for m in conversation(3)]
    fast = service(tmp_path / "fast", reference=False, budget=100_000)
    full = service(tmp_path / "full", reference=True, budget=100_000)
    for step in range(2):
        if step:
            messages[2]["content"][0]["text"] = "edited in place"
            messages[4] = ordered(messages[4])  # a new object for one, the rest kept
            messages[0]["content"] = "request 0, edited in place"
        got = outcome(fast, messages=messages, **ARGS)
        with full_computation():
            assert got == outcome(full, messages=json.loads(json.dumps(messages)), **ARGS)
    assert "edited in place" in got


def _form_service(home, reference: bool, budget: int):
    from context_paging.index.window.pipeline import ContextService, ContextSettings

    from tests.test_select_cost import DISTILL, words

    svc = ContextService(Ledger(home), ContextSettings(token_budget=budget, distill=DISTILL),
                         words)
    svc.reference = reference
    svc.spare_seconds = 0.0
    return svc


def _edited(message: dict) -> None:
    """An edit in place, wherever the message keeps its text."""
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = content + " (edited)"
    elif isinstance(content, list) and content and isinstance(content[0], dict) and (
            "text" in content[0]):
        content[0]["text"] += " (edited)"
    elif "output" in message:
        message["output"] += " (edited)"
    else:
        message["edited"] = True


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(["pi", "anthropic", "openai", "responses"]),
       budget=st.sampled_from([400, 1_500, 4_000, 20_000]),
       shape=st.lists(st.tuples(st.integers(0, 2), st.integers(5, 90), st.booleans()),
                      min_size=8, max_size=14),
       steps=st.lists(st.tuples(st.sampled_from(["whole", "after", "after", "older"]),
                                st.integers(0, 1), st.integers(1, 8), st.integers(0, 10**6),
                                st.booleans(), st.booleans()), min_size=3, max_size=7))
def test_two_servers_on_one_home_with_edits_in_place_answer_as_the_full_computation(
        tmp_path_factory, fmt, budget, shape, steps):
    """Two servers share one home (docs/reliability.md, "The rules") and take turns on one
    session, each call the whole conversation or ``after_id`` (the last head, or an older id:
    a new branch), sometimes with an ephemeral message; between calls the library host edits
    one of its message dicts in place. The pair of fast servers answers and saves as a pair of
    full-computation servers on a home of their own fed copies of the same calls."""
    base = resident(fmt) + [m for n, (calls, lines, answer) in enumerate(shape)
                            for m in form_turn(fmt, n, calls, lines, answer, n % 2 == 0)]
    lead = len(resident(fmt))
    homes = tmp_path_factory.mktemp("fast"), tmp_path_factory.mktemp("full")
    fast = [_form_service(homes[0], False, budget) for _ in range(2)]
    full = [_form_service(homes[1], True, budget) for _ in range(2)]
    sent, last, heads = 0, None, []
    args = {"fmt": fmt, "system": "sys", "token_budget": budget}
    for kind, who, grow, pick, ephemeral, edit in steps:
        if edit and sent > lead + 1:
            _edited(base[max(lead, sent - 1 - pick % 5)])  # near the end: in the window
        upto = min(len(base), sent + grow)
        if kind in ("after", "older") and last is not None and base[sent:upto]:
            new = base[sent:upto]
            after = last if kind == "after" else heads[pick % len(heads)]
            call = {"messages": new, "after_id": after,
                    "ephemeral": [pick % len(new)] if ephemeral else []}
        else:
            whole = base[:upto]
            call = {"messages": whole, "ephemeral": [lead + pick % (len(whole) - lead)]
                    if ephemeral and len(whole) > lead else []}
        got = outcome(fast[who], **call, **args)
        if os.environ.get("REVIEW_TRACE"):
            print(fmt, budget, kind, who, len(call["messages"]), got[:60])
        with full_computation():  # fed copies: the host's later edits never reach it
            assert got == outcome(full[who], **json.loads(json.dumps(call)), **args)
        reply = json.loads(got)[0]
        last = reply.get("last_message_id")
        if last is not None:
            heads.append(last)
        sent = upto


def test_an_output_left_unjudged_is_judged_when_landed_edits_could_bring_it_back(tmp_path):
    """Found by the positions-form property test (hypothesis seed 1): a first window keeps two
    large outputs (protected overflow); the next request ends the run, and the run-end pass
    removes both. Only one lies within the reach the call judges; the other is left unjudged.
    The removal that is judged lands with the cut, and the window is chosen again: with the
    unjudged output counted at full size it still pages, whereas the full computation, having
    removed both, fits everything within budget. The re-selection now keeps the unjudged output
    at its lower bound, sees the window would keep it, and judges everything."""
    fmt = "pi"
    first = form_turn(fmt, 0, 2, 75, False, False)
    second = form_turn(fmt, 1, 0, 0, False, False) + [{"role": "user", "content": "go on"}]
    replies = {}
    for reference in (True, False):
        svc = form_service(tmp_path / str(reference), 300, True, reference=reference)
        svc.select("s", messages=first, fmt=fmt, system="sys", token_budget=300)
        reply = svc.select("s", messages=first + second, fmt=fmt, system="sys",
                           token_budget=300)
        replies[reference] = (json.dumps(reply), json.dumps(svc.ledger.load_state("s")))
    assert json.loads(replies[True][0])["mode"] == "within_budget"
    assert [d["action"] for d in json.loads(replies[True][0])["distilled"]] == ["remove"] * 2
    assert replies[False] == replies[True]
