"""What recovery in band costs: the tokens the offered tools add to every request, per API, and
the added latency of a reply with one in-band round trip next to the same reply without it,
measured side by side in one run.

Tokens: the bytes the proxy appends to ``tools`` (server/proxy/inband.py ``offered_bytes``),
counted with the project's tokenizer (cl100k_base; providers' own tokenizers differ by some
percent) and as characters/4. Claude Code and Pi on Anthropic use the Anthropic entries, Codex
and Pi on OpenAI the Responses entries.

Latency: the fake provider (tests/fake_provider.py, real HTTP on loopback, no think time) and a
proxy with in-band recovery in front of it, on a conversation paged under a 4,000-token budget.
Each iteration sends the same agent request twice, in alternating order: once answered with
text at once, once answered with a ``search_history`` call first (the proxy runs the search
against the ledger and sends the follow-up, whose answer is the same text). Printed: p50 and
p95 of each, and of their difference. A real provider adds its own time to first token for the
follow-up on top of the difference measured here.

    python bench/inband_bench.py [--iterations 40] [--stream]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402
from context_paging.index.home.proxied import ProxyLog  # noqa: E402
from context_paging.server.config import load_settings  # noqa: E402
from context_paging.server.histories import make_history  # noqa: E402
from context_paging.server.proxy import inband  # noqa: E402
from context_paging.server.proxy.app import Proxy, Upstreams  # noqa: E402
from context_paging.server.tokens import text_counter  # noqa: E402

from tests.fake_provider import (  # noqa: E402
    FakeProvider,
    Served,
    anthropic_message,
    anthropic_stream,
)

AGENTS = (("Claude Code", "anthropic"), ("Pi (Anthropic)", "anthropic"),
          ("Codex", "responses"), ("Pi (OpenAI Responses)", "responses"),
          ("a Chat Completions agent", "chat"))


def token_costs() -> list[tuple[str, str, int, int]]:
    count = text_counter()
    assert count is not None, "the shipped cl100k_base encoding is missing"
    out = []
    for agent, api in AGENTS:
        text = inband.offered_bytes(api).decode()
        out.append((agent, api, count(text), len(text) // 4))
    return out


def conversation(turns: int = 14) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "Refactor the modules."}]
    for i in range(turns):
        call = f"toolu_{i:03d}"
        output = "\n".join(f"marker-turn-{i} line {n}: value = {i * 100 + n}" for n in range(40))
        messages += [{"role": "assistant", "content": [
            {"type": "tool_use", "id": call, "name": "Bash", "input": {"command": f"cat {i}"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call, "content": output}]}]
    return messages


def latency(iterations: int, stream: bool) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        empty = home / "none"
        (home / "config.toml").write_text(
            f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
            '[paging]\nestimator = "chars4"\ntoken_budget = 4000\n[distill]\nenabled = false\n')
        history = make_history(load_settings(home=str(home)))
        provider = FakeProvider()
        upstream = Served(provider)
        app = Proxy(history.select_context,
                    Upstreams(anthropic=upstream.url, openai=upstream.url), ProxyLog(home),
                    recovery=inband.InBand(history, home))
        proxy = Served(app, lifespan="on")
        client = httpx.Client(base_url=proxy.url, timeout=60)
        tools = [{"name": "Bash", "description": "Run a command",
                  "input_schema": {"type": "object"}}]
        body = {"model": "claude-fake", "max_tokens": 100, "tools": tools,
                "messages": conversation(), "metadata": {"user_id": "bench"}}
        if stream:
            body["stream"] = True
        raw = json.dumps(body).encode()
        shape = anthropic_stream if stream else anthropic_message
        text = [{"type": "text", "text": "The value was 0."}]
        call = {"type": "tool_use", "id": "toolu_inband", "name": "search_history",
                "input": {"query": "marker-turn-0"}}

        def timed(replies: list) -> float:
            provider.queue.extend(replies)
            start = time.perf_counter()
            reply = client.post("/v1/messages", content=raw,
                                headers={"x-api-key": "k", "content-type": "application/json"})
            reply.read()
            assert reply.status_code == 200, reply.text
            return time.perf_counter() - start

        plain, answered = [], []
        try:
            for _ in range(3):  # warm up: paging state, the search index
                timed([shape(text, "end_turn")])
                timed([shape([call], "tool_use"), shape(text, "end_turn")])
            for i in range(iterations):
                pair = [("plain", [shape(text, "end_turn")]),
                        ("inband", [shape([call], "tool_use"), shape(text, "end_turn")])]
                for name, replies in (pair if i % 2 == 0 else pair[::-1]):
                    (plain if name == "plain" else answered).append(timed(replies))
        finally:
            client.close()
            proxy.close()
            upstream.close()
            history.close()
    return plain, answered


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--stream", action="store_true", help="streamed replies")
    args = parser.parse_args()
    print("tokens the offered tools add to each request")
    print(f"  {'agent':<26} {'API':<10} {'cl100k':>7} {'chars/4':>8}")
    for agent, api, tokens, quarter in token_costs():
        print(f"  {agent:<26} {api:<10} {tokens:>7,} {quarter:>8,}")
    plain, answered = latency(args.iterations, args.stream)
    extra = [b - a for a, b in zip(plain, answered, strict=True)]
    print(f"latency through the proxy, {args.iterations} pairs, "
          f"{'streamed' if args.stream else 'JSON'} replies (ms)")
    print(f"  {'':<34} {'p50':>7} {'p95':>7}")
    for name, values in (("reply without a recovery call", plain),
                         ("same reply, one in-band round trip", answered),
                         ("difference (paired)", extra)):
        print(f"  {name:<34} {_ms(values, 0.5):>7.1f} {_ms(values, 0.95):>7.1f}")
    print(f"  median ratio {statistics.median(answered) / statistics.median(plain):.2f}x")


if __name__ == "__main__":
    main()
