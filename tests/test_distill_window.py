"""Old exchanges and old images leave the window through ``select_context`` (docs/distillation.md,
"What can be distilled"): in every host format the window stays
valid for the provider, the replacement bytes are the same on every later call, and ``recall``
returns the originals."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from tests.conftest import ledger_home
from tests.test_distill_e2e import select
from tests.test_protocol import call

pytestmark = pytest.mark.anyio

DOCKER_LOG = "\n".join(
    f"#{i} [payments-builder {i}/60] RUN apk add --no-cache libpq-{i} openssl-{i} && "
    f"layer sha256:{i:064x}" for i in range(60)
)
PARSER_ANSWER = "parse_tokens in src/parser.py returns a list of Token tuples."
FORMATS = ["anthropic", "openai", "pi"]


def png(width: int, height: int) -> str:
    size = struct.pack(">II", width, height)
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + size
    return base64.b64encode(head + bytes(200)).decode()


SHOT = png(1280, 960)


def _call(fmt: str, call_id: str, name: str, arguments: dict, text: str = "") -> dict:
    if fmt == "anthropic":
        content = ([{"type": "text", "text": text}] if text else []) + [
            {"type": "tool_use", "id": call_id, "name": name, "input": arguments}]
        return {"role": "assistant", "content": content}
    if fmt == "openai":
        return {"role": "assistant", "content": text or None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}]}
    content = ([{"type": "text", "text": text}] if text else []) + [
        {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}]
    return {"role": "assistant", "content": content, "stopReason": "toolUse"}


def _result(fmt: str, call_id: str, name: str, text: str, image: str | None = None) -> dict:
    if fmt == "anthropic":
        inner = [{"type": "text", "text": text}]
        if image:
            inner.append({"type": "image", "source": {"type": "base64",
                                                      "media_type": "image/png", "data": image}})
        return {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": inner}]}
    if fmt == "openai":
        content: object = text
        if image:
            url = f"data:image/png;base64,{image}"
            content = [{"type": "text", "text": text},
                       {"type": "image_url", "image_url": {"url": url}}]
        return {"role": "tool", "tool_call_id": call_id, "content": content}
    inner = [{"type": "text", "text": text}]
    if image:
        inner.append({"type": "image", "data": image, "mimeType": "image/png"})
    return {"role": "toolResult", "toolCallId": call_id, "toolName": name, "content": inner,
            "isError": False}


def _user(fmt: str, text: str) -> dict:
    return {"role": "user", "content": text}


def _answer(fmt: str, text: str) -> dict:
    if fmt == "anthropic":
        return {"role": "assistant", "content": [{"type": "text", "text": text}]}
    if fmt == "openai":
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": "stop"}


def docker_then_parser(fmt: str, parser_runs: int) -> list[dict]:
    """An unrelated Docker exchange, then work on the parser, then a parser request."""
    out = [_user(fmt, "Build the payments Docker image and show me the build log."),
           _call(fmt, "call_docker", "bash", {"command": "docker build -t payments ."}),
           _result(fmt, "call_docker", "bash", DOCKER_LOG),
           _answer(fmt, "The payments image built; 60 layers, all cached.")]
    for n in range(parser_runs):
        out += [_user(fmt, f"Step {n}: tidy parse_tokens in src/parser.py."),
                _answer(fmt, f"Step {n} done: parse_tokens is tidier.")]
    return out + [_user(fmt, "Now add type hints to parse_tokens in src/parser.py.")]


def screenshot_run(fmt: str) -> list[dict]:
    """A screenshot, three more turns of work, an answer, and the next request."""
    return [_user(fmt, "Check the login page renders."),
            _call(fmt, "call_shot", "screenshot", {"url": "http://localhost:3000/login"}),
            _result(fmt, "call_shot", "screenshot", "Saved login.png", SHOT),
            _call(fmt, "call_css", "read", {"path": "src/login.css"}),
            _result(fmt, "call_css", "read", ".login { display: grid; }"),
            _call(fmt, "call_test", "bash", {"command": "npm test -- login"}),
            _result(fmt, "call_test", "bash", "1 passed"),
            _answer(fmt, "The login page renders with its grid layout; the test passes."),
            _user(fmt, "Thanks. Next, the signup page.")]


@pytest.fixture
def home(tmp_path):
    # The run-end cost gate would defer an omission this small in a context this short;
    # the gate itself is tested in tests/test_distill_items.py.
    return ledger_home(tmp_path, exchange_break_even=False)


def _text(value: object) -> str:
    """Every string in a window (or message), one per line: what a provider would read."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_text(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    return ""


@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_unrelated_old_exchange_leaves_the_window_as_one_stub(home, fmt):
    session = f"exchange-{fmt}"
    server = create_server(load_settings(home=home))
    async with Client(server) as client:
        first = await select(client, session, fmt, docker_then_parser(fmt, 3))
        omitted = [d for d in first["distilled"] if d["action"] == "omit_exchange"]
        assert len(omitted) == 1, first["distilled"]
        report = omitted[0]
        assert report["recall"] == f'recall({{"history_id":"{report["history_id"]}"}})'
        window = _text(first["messages"])
        # The prompt became the stub; the call, its result and the answer are gone together.
        assert "call_docker" not in window and "payments-builder" not in window
        assert "60 layers" not in window
        # The stub is the first text block of the next request (docs/distillation.md, "Two user
        # messages in a row"), so the window is 4 messages shorter.
        stubs = [m for m in first["messages"] if report["recall"] in _text(m)]
        assert len(stubs) == 1 and stubs[0]["role"] == "user"
        assert "Build the payments Docker image" in _text(stubs[0]["content"][0])
        assert "Step 0" in _text(stubs[0]["content"][1:])
        assert len(first["messages"]) == len(docker_then_parser(fmt, 3)) - 4
        roles = [m["role"] for m in first["messages"] if m["role"] != "system"]
        assert all(a != "user" or b != "user" for a, b in zip(roles, roles[1:], strict=False))
        assert report["saved_characters"] > len(DOCKER_LOG) - 400

        # Later calls send the same bytes, as the prefix of a longer window.
        for runs in (4, 5):
            reply = await select(client, session, fmt, docker_then_parser(fmt, runs))
            assert reply["messages"][: len(first["messages"]) - 1] == first["messages"][:-1]
            assert report in reply["distilled"]

        # recall gives the whole exchange back, the build log exactly.
        error, text, value = await call(client, "recall", {
            "history_id": report["history_id"], "session": f"ledger:{session}"})
        assert not error, text
        assert DOCKER_LOG in value["text"]
        assert "The payments image built" in value["text"]
        assert "Step 0" not in value["text"]  # the next request is not part of it

        _, text, stats = await call(client, "paging_stats", {"session": f"ledger:{session}"})
        assert stats["omitted_exchanges"] == 1
        assert stats["distilled_saved_tokens"] > 0
        assert stats["distill_judges"] == {"local": 1}
        assert "Exchanges omitted    1" in text
    server.history.close()


@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_exchange_about_the_current_work_stays_whole(home, fmt):
    conversation = docker_then_parser(fmt, 3)
    conversation[-1] = _user(fmt, "Rebuild the payments Docker image with openssl pinned.")
    server = create_server(load_settings(home=home))
    async with Client(server) as client:
        reply = await select(client, f"related-{fmt}", fmt, conversation)
        assert [d for d in reply["distilled"] if d["action"] == "omit_exchange"] == []
        assert "payments-builder" in _text(reply["messages"])
    server.history.close()


@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_old_screenshot_leaves_but_its_text_and_the_call_stay(home, fmt):
    session = f"image-{fmt}"
    server = create_server(load_settings(home=home))
    async with Client(server) as client:
        reply = await select(client, session, fmt, screenshot_run(fmt))
        dropped = [d for d in reply["distilled"] if d["action"] == "drop_image"]
        assert [d["tool_call_id"] for d in dropped] == ["call_shot"]
        window = _text(reply["messages"])
        assert SHOT not in window
        assert "Saved login.png" in window and "call_shot" in window
        assert "1280×960" in window and dropped[0]["recall"] in window
        again = await select(client, session, fmt, screenshot_run(fmt) + [
            _answer(fmt, "Looking at signup."), _user(fmt, "Go on.")])
        assert again["messages"][: len(reply["messages"]) - 1] == reply["messages"][:-1]

        result = await client.call_tool("recall", {"tool_call_id": "call_shot",
                                                   "session": f"ledger:{session}"})
        assert not result.is_error
        images = [c for c in result.content if c.type == "image"]
        assert [i.data for i in images] == [SHOT]
    server.history.close()


async def test_a_recent_screenshot_is_kept(home):
    conversation = screenshot_run("pi")
    conversation = conversation[:3] + [_answer("pi", "It renders."),
                                       _user("pi", "And the signup page?")]
    server = create_server(load_settings(home=home))
    async with Client(server) as client:
        reply = await select(client, "recent-image", "pi", conversation)
        assert reply["distilled"] == []
        assert SHOT in _text(reply["messages"])
    server.history.close()


def _build_log_run(turns: int) -> list[dict]:
    log = "\n".join([f"copied static/img/asset_{i:04d}.png to dist/img (ok, {i * 7} bytes)"
                     for i in range(1_200)] + ["ERROR: tokenizer fixture missing"])
    conversation = [_user("pi", "Speed up the tokenizer in src/tokenize.py."),
                    _call("pi", "call_log", "bash", {"command": "make dist"}),
                    _result("pi", "call_log", "bash", log)]
    for turn in range(turns):
        conversation += [_call("pi", f"call_{turn}", "read", {"path": f"src/part_{turn}.py"},
                               text=f"Looking at part {turn}."),
                         _result("pi", f"call_{turn}", "read", f"def part_{turn}(): pass")]
    return conversation


@pytest.mark.parametrize(("model", "fires"), [("anthropic/claude", True),
                                              ("openai-codex/gpt-5", False)])
def test_the_model_names_the_provider_whose_checkpoint_batch_size_applies(tmp_path, model,
                                                                           fires):
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService, ContextSettings
    from context_paging.paging.distill import DistillConfig

    config = DistillConfig(mid_run_batch_chars_openai=10_000_000)
    service = ContextService(Ledger(tmp_path / "home"), ContextSettings(
        token_budget=400_000, estimator="chars4", distill=config), None)
    reply = service.select("provider", _build_log_run(24), fmt="pi", model=model)
    assert bool(reply["distilled"]) is fires


def test_a_mid_run_checkpoint_distills_an_old_log_while_the_run_goes_on(tmp_path):
    """A mid-run checkpoint (docs/distillation.md) through select_context: a 70 KB build log from
    the run's first turn is judged once it is 4 turns old and the batch (60k chars) pays off against
    re-reading the context after it; the run has not ended, so there is no final answer yet."""
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService, ContextSettings
    from context_paging.paging.distill import DistillConfig

    log = "\n".join([f"copied static/img/asset_{i:04d}.png to dist/img (ok, {i * 7} bytes)"
                     for i in range(1_200)] + ["ERROR: tokenizer fixture missing"])
    service = ContextService(Ledger(tmp_path / "home"), ContextSettings(
        token_budget=400_000, estimator="chars4", distill=DistillConfig()), None)
    conversation = [_user("pi", "Speed up the tokenizer in src/tokenize.py."),
                    _call("pi", "call_log", "bash", {"command": "make dist"}),
                    _result("pi", "call_log", "bash", log)]
    replies = []
    for turn in range(24):
        conversation += [_call("pi", f"call_{turn}", "read", {"path": f"src/part_{turn}.py"},
                               text=f"Looking at part {turn}."),
                         _result("pi", f"call_{turn}", "read", f"def part_{turn}(): pass")]
        replies.append(service.select("midrun", conversation, fmt="pi"))
    decided = [(n, d["tool_call_id"], d["action"]) for n, r in enumerate(replies)
               for d in r["distilled"]]
    assert decided, "no checkpoint fired"
    first_turn = decided[0][0]
    assert first_turn >= 3  # never before the log is 4 turns old
    assert {call for _, call, _ in decided} == {"call_log"}
    window = replies[-1]["messages"]
    text = next(m["content"][0]["text"] for m in window if m.get("toolCallId") == "call_log")
    assert "ERROR: tokenizer fixture missing" in text  # the failure line stays
    assert len(text) < len(log) // 2
    # The same bytes on every call after the checkpoint.
    texts = {next(m["content"][0]["text"] for m in r["messages"]
                  if m.get("toolCallId") == "call_log") for r in replies[first_turn:]}
    assert texts == {text}


def test_an_omitted_exchange_holding_a_distilled_output_saves_each_character_once(tmp_path):
    """The log is distilled at its own run end; the exchange around it is omitted later. The
    omission is costed on what the window still showed, so the savings add up to no more than
    the exchange's original size."""
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService, ContextSettings
    from context_paging.paging.distill import DistillConfig

    dockerfile = "\n".join(f"RUN install_step_{i} --flag-{i}  # payments layer {i}"
                           for i in range(90))
    pulls = "\n".join(f"fetched package_{i}.apk from the mirror, checksum ok" for i in range(200))
    docker_run = [
        _user("pi", "Build the payments Docker image and show me the build log."),
        _call("pi", "call_docker", "bash", {"command": "docker build -t payments ."}),
        _result("pi", "call_docker", "bash", pulls),
        _call("pi", "call_file", "read", {"path": "Dockerfile"}),
        _result("pi", "call_file", "read", dockerfile),
        _answer("pi", "Built; it pulled `package_7.apk` and ran " + ", ".join(
            f"`install_step_{i}`" for i in range(90)) + "."),
    ]
    service = ContextService(Ledger(tmp_path / "home"), ContextSettings(
        token_budget=400_000, estimator="chars4",
        distill=DistillConfig(exchange_break_even=False)), None)
    # No prompt cache ("none"): the omission lands on the call that decides it (with a cache
    # it would wait for a re-write that pays, index/window/landing.py).
    first = service.select("twice", docker_run + [_user("pi", "Step 0: tidy src/parser.py.")],
                           fmt="pi", model="none/any")
    assert [d["tool_call_id"] for d in first["distilled"]] == ["call_docker"]
    conversation = docker_run
    for n in range(4):
        conversation += [_user("pi", f"Step {n}: tidy parse_tokens in src/parser.py."),
                         _answer("pi", f"Step {n} done.")]
    last = service.select("twice", conversation + [_user("pi", "Add type hints to parse_tokens.")],
                          fmt="pi", model="none/any")
    assert [d["action"] for d in last["distilled"]] == ["omit_exchange"]
    original = sum(len(m["content"]) if isinstance(m["content"], str) else
                   sum(len(b.get("text", "")) for b in m["content"]) for m in docker_run)
    stats = service.stats("twice")
    assert stats.omitted_exchanges == 1 and stats.distilled_outputs == 1
    assert stats.distilled_saved_characters < original
