"""select_context on upstream's benchmark workload, next to plain JSON work, in one run.

Workload (specs/paging.md §10): 300 turns, 15 MiB of tool output (52,428 characters per result,
the last 52,668), budget 128,000 = the model window, default target; each turn is a user request,
an assistant ``read`` call and its result; then the active request → 901 messages.

Measured, each the best of ``--repeat`` runs, and each printed as a ratio to the time it takes
just to ``json.loads`` the request and ``json.dumps`` the reply (what any server must pay):

* cold: a fresh home, first call (ledger append of 15 MiB, estimates, selection);
* repeated: the same request again (the ledger and estimate caches are warm);
* incremental: the request grown by one turn;
* the same three end to end over stdio, against the installed ``context-paging serve``.

    python bench/select_bench.py [--repeat 3] [--estimator tiktoken|chars4] [--no-stdio]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

TOPICS = ["cache", "parser", "history", "navigator", "paging", "needle"]
TOTAL = 15 * 1024 * 1024
TURNS = 300


def turn(n: int, size: int) -> list[dict]:
    lines = []
    i = 0
    while sum(len(x) + 1 for x in lines) < size:
        topic = TOPICS[i % len(TOPICS)]
        head = f"src/benchmark/turn-{n:03d}.ts:{i:04d} {topic} event=read status=ok tokens=128"
        lines.append(head.ljust(127, "."))
        i += 1
    text = "\n".join(lines)[:size]
    return [
        {"role": "user", "content": f"Benchmark request {n}", "timestamp": n * 3},
        {"role": "assistant", "stopReason": "toolUse", "timestamp": n * 3 + 1, "content": [
            {"type": "toolCall", "id": f"call-{n}", "name": "read",
             "arguments": {"path": f"src/{n}.ts"}}]},
        {"role": "toolResult", "toolCallId": f"call-{n}", "toolName": "read", "isError": False,
         "timestamp": n * 3 + 2, "content": [{"type": "text", "text": text}]},
    ]


def workload(turns: int = TURNS) -> list[dict]:
    per = TOTAL // TURNS
    messages: list[dict] = []
    for n in range(turns):
        messages += turn(n, per + (TOTAL - per * TURNS if n == TURNS - 1 else 0))
    return messages + [{"role": "user", "content": "Summarize the benchmark results."}]


def arguments(messages: list[dict]) -> dict:
    return {"session": "bench", "messages": messages, "format": "pi",
            "system": "You are a benchmark assistant.",
            "tools": [{"name": "read", "description": "Read a file",
                       "parameters": {"type": "object"}}],
            "model_window": 128_000, "token_budget": 128_000}


def best(repeat: int, fn) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def json_floor(request: dict, reply: dict, repeat: int) -> float:
    raw = json.dumps(request)
    return best(repeat, lambda: (json.loads(raw), json.dumps(reply)))[0]


def library(repeat: int, estimator: str) -> None:
    from context_paging.index.context import ContextService, ContextSettings
    from context_paging.index.ledger import Ledger
    from context_paging.server.tokens import text_counter

    messages = workload()
    grown = messages[:-1] + turn(300, 52_428) + [messages[-1]]
    settings = ContextSettings(token_budget=128_000, estimator=estimator)
    counter = text_counter()
    cold_time, reply = best(repeat, lambda: _fresh(settings, counter, messages))
    floor = json_floor(arguments(messages), reply, repeat)
    with tempfile.TemporaryDirectory() as home:
        svc = ContextService(Ledger(Path(home)), settings, counter)
        svc.select(**_call_args(messages))
        warm_time, _ = best(repeat, lambda: svc.select(**_call_args(messages)))
        grow_time, _ = best(1, lambda: svc.select(**_call_args(grown)))
    print(f"workload: turns=300 messages={len(messages)} toolOutputBytes={TOTAL:,} "
          f"estimator={estimator}")
    print(f"selection: mode={reply['mode']} estimated={reply['estimated_tokens']:,.0f} "
          f"budget={reply['budget_tokens']:,.0f} kept={len(reply['messages'])} "
          f"evicted={reply['evicted_messages']}")
    print(f"{'json.loads(request) + json.dumps(reply)':<40} {floor * 1000:8.1f} ms   (x1.00)")
    for label, seconds in (("library, cold (fresh ledger)", cold_time),
                           ("library, repeated request", warm_time),
                           ("library, one more turn", grow_time)):
        print(f"{label:<40} {seconds * 1000:8.1f} ms   (x{seconds / floor:.2f})")


def _call_args(messages: list[dict]) -> dict:
    args = arguments(messages)
    return {"session": args["session"], "messages": messages, "fmt": "pi",
            "system": args["system"], "tools": args["tools"],
            "model_window": args["model_window"], "token_budget": args["token_budget"]}


def _fresh(settings, counter, messages):
    from context_paging.index.context import ContextService
    from context_paging.index.ledger import Ledger

    home = Path(tempfile.mkdtemp())
    try:
        return ContextService(Ledger(home), settings, counter).select(**_call_args(messages))
    finally:
        shutil.rmtree(home)


def stdio(repeat: int) -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    messages = workload()
    grown = messages[:-1] + turn(300, 52_428) + [messages[-1]]
    command = shutil.which("context-paging") or str(Path(sys.executable).parent / "context-paging")

    async def run() -> None:
        with tempfile.TemporaryDirectory() as home:
            params = StdioServerParameters(command=command, args=["--home", home, "serve"])
            async with Client(params) as client:
                async def once(msgs):
                    result = await client.call_tool("select_context", arguments(msgs))
                    assert not result.is_error, result.content[0].text
                    return result.structured_content

                times = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    reply = await once(messages)
                    times.append(time.perf_counter() - start)
                start = time.perf_counter()
                await once(grown)
                grow = time.perf_counter() - start
        floor = json_floor(arguments(messages), reply, repeat)
        print(f"stdio, first call (cold)                 {times[0] * 1000:8.1f} ms   "
              f"(x{times[0] / floor:.2f})")
        print(f"stdio, repeated request                  {min(times[1:] or times) * 1000:8.1f} ms"
              f"   (x{min(times[1:] or times) / floor:.2f})")
        print(f"stdio, one more turn                     {grow * 1000:8.1f} ms   "
              f"(x{grow / floor:.2f})")

    anyio.run(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--estimator", choices=("tiktoken", "chars4"), default="tiktoken")
    parser.add_argument("--no-stdio", action="store_true")
    args = parser.parse_args()
    library(args.repeat, args.estimator)
    if not args.no_stdio:
        stdio(args.repeat)


if __name__ == "__main__":
    main()
