"""The ``sampling`` judge over MCP (server/mcp/sampling.py): a scripted client plays the host's
model.

Both protocol eras: the default ``Client`` (2026-07-28, resolver slots answered through
``input_required``) and ``mode="legacy"`` (the server sends ``sampling/createMessage`` itself).
The script answers like a model would, from the prompt's text alone: it keeps the chunk that
holds the line the agent's answer quotes. Ports upstream's cases 27 (the time
budget), 46 (batches, a failed batch keeps its items, the concurrency limit) and the part of 28
that applies here (never more than ``concurrency`` requests in flight; a parent abort is the
client cancelling the call, which the SDK handles)."""

from __future__ import annotations

import json
import re

import anyio
import pytest
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client
from mcp.types import CreateMessageResult, ErrorData, TextContent

from tests.conftest import ledger_home
from tests.test_distill_e2e import ANSWER, CALL_ID, NO_CACHE, select, tool_result_text
from tests.test_distill_e2e import anthropic_runs as e2e_runs

pytestmark = pytest.mark.anyio
NEEDED = "src/config/loader.py:42:def parse_config(path):"
ERAS = ["auto", "legacy"]
GREP = "\n".join([f"src/module_{i % 20}/file_{i}.py:{i + 10}:    value_{i} = compute_{i}(arg)"
                  for i in range(80)] + [NEEDED] + [
                  f"src/module_{i % 20}/file_{i}.py:{i + 10}:    value_{i} = compute_{i}(arg)"
                  for i in range(80, 160)])  # one segment: one prompt per output


def anthropic_runs(extra_runs: int) -> list[dict]:
    return e2e_runs(extra_runs, GREP)


def reply(text: str) -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text=text),
                               model="scripted", stop_reason="endTurn")


def chunk_with(prompt: str, needle: str) -> list[int]:
    """The numbers of the prompt's chunks that contain ``needle``."""
    parts = re.split(r"^\[chunk (\d+)\]\n", prompt, flags=re.MULTILINE)
    return [int(n) for n, body in zip(parts[1::2], parts[2::2], strict=True) if needle in body]


class Model:
    """A scripted host model: records prompts, answers with the chunk that holds NEEDED."""

    def __init__(self, answer=None, delay: float = 0.0):
        self.prompts: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.answer = answer or (lambda prompt: json.dumps({"keep": chunk_with(prompt, NEEDED)}))
        self.delay = delay

    async def __call__(self, context, params):
        prompt = params.messages[0].content.text
        self.prompts.append(prompt)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await anyio.sleep(self.delay)
            answer = self.answer(prompt)
            return answer if isinstance(answer, ErrorData) else reply(answer)
        finally:
            self.in_flight -= 1


@pytest.fixture
def home(tmp_path):
    return ledger_home(tmp_path, judge="sampling")


def ledger_decisions(ledger: str) -> list[dict]:
    """The decision lines of a ledger file, parsed (the ledger writes compact JSON where it
    can, so a substring such as '"type": "decision"' does not find every line)."""
    lines = (json.loads(line) for line in ledger.splitlines() if line.strip())
    return [line["decision"] for line in lines if line.get("type") == "decision"]


def configure(home, **values) -> None:
    config = home / "config.toml"
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
    config.write_text(config.read_text() + extra)


def client(server, model, era):
    kwargs = {"sampling_callback": model} if model is not None else {}
    return Client(server, mode=era, **kwargs) if era != "auto" else Client(server, **kwargs)


@pytest.mark.parametrize("era", ERAS)
async def test_the_hosts_model_picks_the_chunks_and_the_decision_sticks(home, era):
    model = Model()
    server = create_server(load_settings(home=home))
    async with client(server, model, era) as c:
        first = await select(c, "s", "anthropic", anthropic_runs(0))
        assert [(d["action"], d["judge"]) for d in first["distilled"]] == [("distill", "sampling")]
        assert len(model.prompts) == 1
        assert "Where is parse_config defined?" in model.prompts[0]
        assert "parse_config is defined in src/config/loader.py" in model.prompts[0]
        text = tool_result_text("anthropic", first["messages"])
        assert NEEDED in text and len(text) < len(GREP) // 2
        # Decided once: later calls ask nothing and send the same bytes.
        later = await select(c, "s", "anthropic", anthropic_runs(1))
        assert tool_result_text("anthropic", later["messages"]) == text
        assert len(model.prompts) == 1
    server.history.close()


async def test_a_client_without_sampling_gets_the_local_judge(home):
    server = create_server(load_settings(home=home))
    async with Client(server) as c:
        first = await select(c, "s", "anthropic", anthropic_runs(0))
        assert [d["judge"] for d in first["distilled"]] == ["local"]
    server.history.close()


@pytest.mark.parametrize("era", ERAS)
async def test_an_unreadable_answer_keeps_the_output_and_a_later_call_asks_again(home, era):
    answers = iter(["I think chunk three matters most.", None])
    model = Model(answer=lambda p: next(answers) or json.dumps({"keep": chunk_with(p, NEEDED)}))
    server = create_server(load_settings(home=home))
    async with client(server, model, era) as c:
        # No prompt cache: the decision the second call makes lands in that call (with a
        # cache, the output the first call sent whole would stay whole until a re-write).
        first = await select(c, "s", "anthropic", anthropic_runs(0), NO_CACHE)
        assert first["distilled"] == []
        assert tool_result_text("anthropic", first["messages"]) == GREP
        again = await select(c, "s", "anthropic", anthropic_runs(0), NO_CACHE)
        assert [d["judge"] for d in again["distilled"]] == ["sampling"]
        assert len(model.prompts) == 2
    server.history.close()


async def test_an_error_reply_on_a_2025_connection_keeps_the_output(home):
    model = Model(answer=lambda p: ErrorData(code=-1, message="the user declined"))
    server = create_server(load_settings(home=home))
    async with client(server, model, "legacy") as c:
        first = await select(c, "s", "anthropic", anthropic_runs(0))
        assert first["distilled"] == []
        assert tool_result_text("anthropic", first["messages"]) == GREP
    server.history.close()


@pytest.mark.parametrize("era", ERAS)
async def test_an_answer_after_the_time_budget_is_ignored(home, era):
    configure(home, timeout_ms=500)
    model = Model(delay=1.5)
    server = create_server(load_settings(home=home))
    async with client(server, model, era) as c:
        first = await select(c, "s", "anthropic", anthropic_runs(0))
        assert first["distilled"] == []
        assert tool_result_text("anthropic", first["messages"]) == GREP
        assert len(model.prompts) == 1
    server.history.close()
    ledger = (home / "ledger" / "s.jsonl").read_text()
    decisions = ledger_decisions(ledger)
    assert [(d["action"], d["judged"], d["reason"]) for d in decisions] == [
        ("keep", False, "timeout")]


def many_greps(count: int) -> list[dict]:
    """One run with ``count`` large grep outputs, an answer quoting NEEDED, a new request."""
    calls = [{"type": "tool_use", "id": f"call_{n}", "name": "grep", "input": {"pattern": f"p{n}"}}
             for n in range(count)]
    results = [{"type": "tool_result", "tool_use_id": f"call_{n}", "content": GREP}
               for n in range(count)]
    return [{"role": "user", "content": "Where is parse_config defined?"},
            {"role": "assistant", "content": calls},
            {"role": "user", "content": results},
            {"role": "assistant", "content": [{"type": "text", "text": f"`{NEEDED}`"}]},
            {"role": "user", "content": "Thanks."}]


async def test_a_2025_connection_has_at_most_concurrency_requests_in_flight(home):
    configure(home, concurrency=2)
    model = Model(delay=0.05)
    server = create_server(load_settings(home=home))
    async with client(server, model, "legacy") as c:
        reply = await select(c, "s", "anthropic", many_greps(5))
        assert len(model.prompts) == 5 and model.most_in_flight == 2
        assert [d["judge"] for d in reply["distilled"]] == ["sampling"] * 5
    server.history.close()


async def test_a_2026_connection_asks_concurrency_prompts_and_judges_the_rest_locally(home):
    configure(home, concurrency=2)
    model = Model()
    server = create_server(load_settings(home=home))
    async with client(server, model, "auto") as c:
        reply = await select(c, "s", "anthropic", many_greps(5))
        assert len(model.prompts) == 2
        assert sorted(d["judge"] for d in reply["distilled"]) == ["local"] * 3 + ["sampling"] * 2
        again = await select(c, "s", "anthropic", many_greps(5))
        assert len(model.prompts) == 2 and again["distilled"] == reply["distilled"]
    server.history.close()


def small_outputs(count: int) -> list[dict]:
    """One run with ``count`` small outputs (400–4,000 chars): only the first holds NEEDED."""
    texts = [("\n".join(f"config line {n}.{k}: option_{n}_{k} = {k * n}" for k in range(30))
              + ("\n" + NEEDED if n == 0 else "")) for n in range(count)]
    calls = [{"type": "tool_use", "id": f"small_{n}", "name": "bash",
              "input": {"command": f"cat conf/part_{n}.ini"}} for n in range(count)]
    results = [{"type": "tool_result", "tool_use_id": f"small_{n}", "content": text}
               for n, text in enumerate(texts)]
    return [{"role": "user", "content": "Which option sets the parser?"},
            {"role": "assistant", "content": calls},
            {"role": "user", "content": results},
            {"role": "assistant", "content": [{"type": "text", "text": f"`{NEEDED}`"}]},
            {"role": "user", "content": "Thanks."}]


def item_answer(prompt: str) -> str:
    """Keep the items holding NEEDED; an unreadable reply for the batch holding part_2."""
    if "conf/part_2.ini" in prompt:
        return "Sorry, I cannot tell."
    parts = re.split(r"^\[item (\d+)\][^\n]*\n", prompt, flags=re.MULTILINE)
    return json.dumps({"keep": [int(n) for n, body in zip(parts[1::2], parts[2::2], strict=True)
                                if NEEDED in body]})


async def test_small_outputs_are_batched_and_a_failed_batch_keeps_only_its_items(home):
    """Upstream's case 46: 5 items, 2 per batch, concurrency 2, one batch fails."""
    configure(home, concurrency=2, max_chunks_per_segment=2)
    model = Model(answer=item_answer, delay=0.05)
    server = create_server(load_settings(home=home))
    async with client(server, model, "legacy") as c:
        reply = await select(c, "s", "anthropic", small_outputs(5))
        assert len(model.prompts) == 3 and model.most_in_flight == 2
        removed = sorted(d["tool_call_id"] for d in reply["distilled"])
        assert removed == ["small_1", "small_4"]  # small_2, small_3 failed; small_0 is needed
    server.history.close()
    ledger = (home / "ledger" / "s.jsonl").read_text()
    decisions = {d["target"]: (d["action"], d["judged"], d["reason"])
                 for d in ledger_decisions(ledger)}
    assert decisions["small_0"] == ("keep", True, "needed")
    assert decisions["small_2"][:2] == decisions["small_3"][:2] == ("keep", False)


async def test_thinking_parts_of_openai_style_messages_reach_no_prompt_and_no_tool(home):
    """Some hosts (Mistral) put ``{"type": "thinking"}`` parts into OpenAI-style assistant
    content: the sampling prompts and the recovery tools must treat them as private."""
    secret = "PRIVATE-REASONING-7f3a"
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": secret}]}
    conversation = [
        {"role": "user", "content": "Where is parse_config defined?"},
        {"role": "assistant", "content": [thinking], "tool_calls": [
            {"id": CALL_ID, "type": "function",
             "function": {"name": "grep", "arguments": json.dumps({"pattern": "def "})}}]},
        {"role": "tool", "tool_call_id": CALL_ID, "content": GREP},
        {"role": "assistant", "content": [thinking, {"type": "text", "text": ANSWER}]},
        {"role": "user", "content": "And now?"},
    ]
    model = Model()
    server = create_server(load_settings(home=home))
    async with client(server, model, "auto") as c:
        reply = await select(c, "private", "openai", conversation)
        assert [d["judge"] for d in reply["distilled"]] == ["sampling"]
        assert model.prompts and all(secret not in p for p in model.prompts)
        texts = []
        found = await c.call_tool("search_history", {"query": "", "session": "ledger:private",
                                                     "limit": 10, "load": True})
        texts.append(json.dumps(found.structured_content))
        ids = [r["history_id"] for r in found.structured_content["references"]]
        for history_id in ids:
            recalled = await c.call_tool("recall", {"history_id": history_id,
                                                    "session": "ledger:private"})
            texts.append(recalled.content[0].text)
        hits = await c.call_tool("search_history", {"query": secret,
                                                    "session": "ledger:private"})
        assert hits.structured_content["references"] == []
        assert all(secret not in t for t in texts)
    server.history.close()
