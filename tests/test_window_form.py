"""select_context's positions form (``reply_form="positions"``, paging/window_form.py).

The reply says the window as ranges of the host's own conversation plus the messages the server
made or changed. Whatever the format, mode, distillation or call form, the window a host rebuilds
from it must be the messages form's ``messages`` byte for byte, every other field and the saved
state the same.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from context_paging.index.ledger import Ledger
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging.formats import to_views
from context_paging.paging.limits import ContextSelectionError
from context_paging.paging.window_form import positions, rebuild
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_select_cost import DISTILL, words

FORMATS = ("pi", "anthropic", "openai", "responses")


def service(home: Path, budget: int, distill: bool, reference: bool = False) -> ContextService:
    config = DISTILL if distill else DISTILL.__class__(enabled=False)
    svc = ContextService(Ledger(home), ContextSettings(token_budget=budget, distill=config),
                         words)
    svc.reference = reference  # the full computation, from scratch (every view counted)
    svc.spare_seconds = 0.0
    return svc


def body(n: int, j: int, lines: int) -> str:
    return "\n".join(f"src/m{n}_{j}.py:{i}: value={i * n} needle{n % 5}" for i in range(lines))


def turn(fmt: str, n: int, calls: int, lines: int, answer: bool, mixed: bool) -> list[dict]:
    """One exchange in ``fmt``: a request, ``calls`` parallel reads with their outputs (Anthropic,
    ``mixed``: the results' message also carries text, so it has several views; Responses: a
    reasoning item leads the run), and an answer when asked (always when there are no calls)."""
    ids = [f"c{n}_{j}" for j in range(calls)]
    texts = [body(n, j, lines) for j in range(calls)]
    # the same files again every third exchange: a later read supersedes an earlier one
    paths = dict(zip(ids, [f"src/f{n % 3}_{j}.py" for j in range(calls)], strict=True))
    pairs = list(zip(ids, texts, strict=True))
    answer = answer or not calls
    if fmt == "pi":
        out = [{"role": "user", "content": f"request {n}", "timestamp": n}]
        if calls:
            out.append({"role": "assistant", "stopReason": "toolUse", "content": [
                {"type": "toolCall", "id": c, "name": "read", "arguments": {"path": paths[c]}}
                for c in ids]})
            out += [{"role": "toolResult", "toolCallId": c, "toolName": "read", "isError": False,
                     "content": [{"type": "text", "text": t}]} for c, t in pairs]
        if answer:
            out.append({"role": "assistant", "stopReason": "stop",
                        "content": [{"type": "text", "text": f"answer {n}"}]})
        return out
    if fmt == "anthropic":
        out = [{"role": "user", "content": f"request {n}"}]
        if calls:
            out.append({"role": "assistant", "content": [{"type": "text", "text": "reading"}] + [
                {"type": "tool_use", "id": c, "name": "read", "input": {"path": paths[c]}}
                for c in ids]})
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c, "content": t}
                for c, t in pairs] + ([{"type": "text", "text": f"also {n}"}]
                                               if mixed else [])})
        if answer:
            out.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {n}"}]})
        return out
    if fmt == "openai":
        out = [{"role": "user", "content": f"request {n}"}]
        if calls:
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c, "type": "function",
                 "function": {"name": "read", "arguments": json.dumps({"path": paths[c]})}}
                for c in ids]})
            out += [{"role": "tool", "tool_call_id": c, "content": t} for c, t in pairs]
        if answer:
            out.append({"role": "assistant", "content": f"answer {n}"})
        return out
    out = [{"role": "user", "content": f"request {n}"}]
    if calls:
        out.append({"type": "reasoning", "id": f"r{n}", "summary": []})
        out += [{"type": "function_call", "call_id": c, "name": "read",
                 "arguments": json.dumps({"path": paths[c]})} for c in ids]
        out += [{"type": "function_call_output", "call_id": c, "output": t}
                for c, t in pairs]
    if answer:
        out.append({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": f"answer {n}"}]})
    return out


def resident(fmt: str) -> list[dict]:
    """Leading messages the server keeps resident and never stores."""
    if fmt == "openai":
        return [{"role": "system", "content": "you are terse"},
                {"role": "developer", "content": "use tools"}]
    if fmt == "responses":
        return [{"role": "developer", "content": "use tools"}]
    return []


def reply_and_state(svc: ContextService, **kwargs) -> tuple[dict, dict]:
    try:
        reply = svc.select("s", **kwargs)
    except ContextSelectionError as exc:
        reply = {"error": exc.code, "text": str(exc)}
    return reply, svc.ledger.load_state("s")


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def check_call(full: ContextService, short: ContextService, conversation: list[dict],
               **kwargs) -> tuple[dict, dict]:
    """One call to both services, the same arguments; ``conversation`` is what the host holds
    (for ``after_id``: the stored messages, then the new ones). Returns both replies."""
    expected, state = reply_and_state(full, reply_form="messages", **kwargs)
    got, got_state = reply_and_state(short, reply_form="positions", **kwargs)
    assert dumps(got_state) == dumps(state)
    if "error" in expected:
        assert got == expected
        return expected, got
    window = rebuild(got["window"], got["messages"], conversation)
    assert dumps(window) == dumps(expected["messages"])
    # The other fields are the same, in the same order; messages only the server's own.
    rest = {k: v for k, v in got.items() if k not in ("messages", "window", "not_stored")}
    assert dumps(rest) == dumps({k: v for k, v in expected.items() if k != "messages"})
    assert len(got["messages"]) == sum("message" in p for p in got["window"])
    return expected, got


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(FORMATS),
    turns=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 200), st.booleans(),
                             st.booleans()), min_size=2, max_size=14),
    budget=st.one_of(st.integers(300, 8_000), st.just(1_000_000)),
    window=st.one_of(st.none(), st.integers(300, 6_000)),
    distill=st.booleans(),
    steps=st.lists(st.tuples(st.integers(1, 3), st.booleans(), st.booleans(), st.booleans()),
                   min_size=1, max_size=7),
)
def test_the_window_rebuilt_from_positions_is_the_messages_form(
        tmp_path_factory, fmt, turns, budget, window, distill, steps):
    """Random conversations in every format, paged or within budget, distillation on or off,
    whole-conversation and ``after_id`` calls, ephemeral messages: the window rebuilt from the
    positions form (window-proportional path) is the messages form's on the full computation
    (``reference``), byte for byte, and every other field and the saved state are the same."""
    exchanges = [turn(fmt, n, *spec) for n, spec in enumerate(turns)]
    # The messages form on the full computation, the positions form on the shortcuts.
    full = service(tmp_path_factory.mktemp("messages"), budget, distill, reference=True)
    short = service(tmp_path_factory.mktemp("positions"), budget, distill)
    host: list[dict] = resident(fmt)  # the whole conversation, as the host keeps it
    stored: list[dict] = []  # what the server holds of it (no resident, no ephemeral ones)
    done, last = 0, None
    for grow, after, ephemeral, request in steps:
        new = [m for t in exchanges[done:done + grow] for m in t]
        if request:  # a request after them, which stays in the conversation
            new.append({"role": "user", "content": f"go on after {done}"})
        done += grow
        extra = [{"role": "user", "content": "note: sent once"}] if ephemeral else []
        args = {"fmt": fmt, "system": "sys", "token_budget": budget, "model_window": window}
        if after and last is not None and last.get("last_message_id"):
            sent = new + extra
            conversation = stored + sent
            args |= {"messages": sent, "after_id": last["last_message_id"],
                     "ephemeral": [len(new)] if extra else []}
        else:
            conversation = host + new + extra
            args |= {"messages": conversation,
                     "ephemeral": [len(conversation) - 1] if extra else []}
        last, got = check_call(full, short, conversation, **args)
        host += new
        if "error" in last:
            return
        skip = set(to_views(conversation, fmt).resident) | set(
            [len(conversation) - 1] if extra else [])
        # The reply says what was not stored, so a host need not know the resident rules.
        assert got["not_stored"] == sorted(skip)
        stored = [m for k, m in enumerate(conversation) if k not in got["not_stored"]]
        if done >= len(exchanges):
            break


@pytest.mark.parametrize("fmt", FORMATS)
def test_paged_and_distilled_windows_are_mostly_ranges(tmp_path, fmt):
    """The shapes the property draws do reach what the form must handle: windows within budget
    and paged (the notice), distilled outputs (changed messages sent whole) and long ranges of
    unchanged host messages; with ``after_id`` positions count the stored messages, then the
    new ones, and the newest messages come back as a range that ends the conversation."""
    exchanges = [turn(fmt, n, 2, 140, n % 3 == 0, True) for n in range(14)]
    full, short = service(tmp_path / "a", 8_000, True), service(tmp_path / "b", 8_000, True)
    stored: list[dict] = []
    last, seen = None, set()
    for done in range(0, 14, 2):
        new = [m for t in exchanges[done:done + 2] for m in t] + [
            {"role": "user", "content": f"go on after {done}"}]
        if last is None:
            conversation = resident(fmt) + new
            last, got = check_call(full, short, conversation, messages=conversation, fmt=fmt)
        else:
            conversation = stored + new
            last, got = check_call(full, short, conversation, messages=new, fmt=fmt,
                                   after_id=last["last_message_id"])
        stored = conversation[len(resident(fmt)):] if done == 0 else conversation
        ranges = [p for p in got["window"] if "from" in p]
        assert got["window"][-1] == {"from": ranges[-1]["from"], "to": len(conversation)}
        assert sum(p["to"] - p["from"] for p in ranges) > len(got["messages"])
        assert bool(got["notice"]) == (got["window"][0] == {"message": 0})
        seen.add((got["mode"], bool(got["distilled"])))
    assert seen == {("within_budget", False), ("within_budget", True), ("paged", False),
                    ("paged", True)}


def test_a_changed_or_equal_but_new_message_is_sent_whole():
    """Only the very host object counts: a copy equal in value is sent whole too (render makes
    a new dict only for what it changes; an equal one is never taken for the host's)."""
    conversation = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"}]
    copy = dict(conversation[1])
    made, parts = positions([conversation[0], copy, conversation[2]], conversation)
    assert made == [copy] and made[0] is copy
    assert parts == [{"from": 0, "to": 1}, {"message": 0}, {"from": 2, "to": 3}]
    # out of order and repeated objects still name positions holding the same objects
    twice = [conversation[0], conversation[1], conversation[0]]
    made, parts = positions([twice[2], twice[1], twice[0], twice[1]], twice)
    assert made == [] and rebuild(parts, made, twice) == [twice[0], twice[1], twice[0],
                                                            twice[1]]
    assert all(a is b for a, b in zip(rebuild(parts, made, twice),
                                      [twice[0], twice[1], twice[0], twice[1]], strict=True))


@pytest.mark.parametrize("form", ["", "Positions", "full", None, 3])
def test_an_invalid_reply_form_is_a_coded_error_before_anything_is_stored(tmp_path, form):
    svc = service(tmp_path, 1_000, False)
    with pytest.raises(ContextSelectionError) as raised:
        svc.select("s", turn("pi", 0, 1, 3, True, False), fmt="pi", reply_form=form)
    assert raised.value.code == "INVALID_REPLY_FORM"
    assert not svc.ledger.session("s").records


def test_a_disabled_server_says_the_whole_conversation_as_one_range(tmp_path):
    conversation = turn("pi", 0, 2, 5, True, False)
    svc = ContextService(Ledger(tmp_path), ContextSettings(enabled=False), None)
    got = svc.select("s", conversation, fmt="pi", reply_form="positions")
    assert got["messages"] == [] and got["window"] == [{"from": 0, "to": len(conversation)}]


@pytest.mark.anyio
async def test_over_stdio_the_sdk_client_rebuilds_the_window_from_positions(tmp_path):
    """The installed server over real stdio, the SDK's client: two sessions get the same calls,
    one in each form; the host rebuilds the window from the positions reply (text copy and
    structured content alike) and gets the messages form's. A bad form is a coded error."""
    import anyio
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from tests.test_stdio import console_script

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{tmp_path}/none"\nclaude_code = "{tmp_path}/none"\n'
        f'codex = "{tmp_path}/none"\n[paging]\ntoken_budget = 8000\nestimator = "chars4"\n')
    params = StdioServerParameters(command=console_script(), args=["serve"],
                                   env={**os.environ, "CONTEXT_PAGING_HOME": str(home)})
    fmt = "anthropic"
    exchanges = [turn(fmt, n, 2, 140, n % 3 == 0, True) for n in range(10)]
    with open(tmp_path / "stderr.txt", "w") as errlog, anyio.fail_after(60):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            stored: list[dict] = []
            heads: dict[str, str] = {}
            shapes = set()
            for done in range(0, 10, 2):
                new = [m for t in exchanges[done:done + 2] for m in t] + [
                    {"role": "user", "content": f"go on after {done}"}]
                replies = {}
                for session, form in (("whole", "messages"), ("short", "positions")):
                    args = {"session": session, "format": fmt, "reply_form": form,
                            "messages": new}
                    if session in heads:
                        args["after_id"] = heads[session]
                    result = await client.call_tool("select_context", args)
                    assert not result.is_error, result.content[0].text
                    assert json.loads(result.content[0].text) == result.structured_content
                    replies[form] = result.structured_content
                    heads[session] = result.structured_content["last_message_id"]
                conversation = stored + new
                expected, got = replies["messages"], replies["positions"]
                assert "window" not in expected
                window = rebuild(got["window"], got["messages"], conversation)
                assert dumps(window) == dumps(expected["messages"])
                assert got["not_stored"] == []
                assert ({k: v for k, v in got.items()
                         if k not in ("messages", "window", "not_stored")}
                        == {k: v for k, v in expected.items() if k != "messages"})
                shapes.add((got["mode"], bool(got["distilled"])))
                stored = conversation
            assert ("paged", True) in shapes
            bad = await client.call_tool("select_context", {
                "session": "short", "messages": new, "reply_form": "everything"})
            assert bad.is_error and bad.content[0].text.startswith("INVALID_REPLY_FORM: ")
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("setting", ["json", "summary"])
async def test_the_positions_reply_keeps_its_messages_in_the_text_copy(tmp_path, setting):
    """The summary setting leaves the default form's whole window out of the text copy; the
    positions form's ``messages`` (what the server made, small) stay in it either way, so a
    client reading only the text can rebuild the window."""
    from context_paging.server.config import load_settings
    from context_paging.server.mcp.tools import create_server
    from mcp import Client

    from tests.conftest import ledger_home

    home = ledger_home(tmp_path)
    config = home / "config.toml"
    config.write_text(config.read_text() + f'[server]\nselect_context_text = "{setting}"\n')
    conversation = [m for n in range(8) for m in turn("pi", n, 1, 120, True, False)]
    async with Client(create_server(load_settings(home=home))) as client:
        reply = await client.call_tool("select_context", {
            "session": "t", "messages": conversation, "format": "pi", "token_budget": 3000,
            "reply_form": "positions"})
    text = json.loads(reply.content[0].text)
    assert text == reply.structured_content
    assert text["mode"] == "paged" and text["messages"] and text["window"][0] == {"message": 0}
    assert text["window"][-1]["to"] == len(conversation)
