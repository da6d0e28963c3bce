"""select_context on upstream's benchmark workload, next to plain JSON work, in one run.

Workload (pi-context-paging's own benchmark; docs/selection.md, "The benchmark workload"): 300
turns, 15 MiB of tool output (52,428 characters per result, the last 52,668), budget 128,000 =
the model window, default target; each turn is a user request, an assistant ``read`` call and its
result; then the active request → 901 messages.

Measured, each the best of ``--repeat`` runs, and each printed as a ratio to two floors timed
in the same run: the JSON floor, ``json.loads(json.dumps(messages))`` of the request's
901 messages (timed after the cold calls and again after the rest, the lower figure kept), and
the older, smaller one, ``json.loads`` of the request plus ``json.dumps`` of the reply:

* cold: a fresh home, first call (ledger append of 15 MiB, estimates, distillation, selection),
  the process's first such call (module-level caches empty) and the best of ``--repeat``;
* repeated: the same request again (the ledger and estimate caches are warm);
* one more turn: the request grown by one turn, whole conversation (once, then the median of
  ``--turns`` more turns, each the whole conversation again);
* one more turn, after_id: only the new turn's messages and the previous reply's
  ``last_message_id`` (median of ``--turns`` successive turns);

between library calls the bench gives the service its spare time (``ContextService.idle()``,
``spare_seconds`` = 5 ms of counting ahead, untimed), as the MCP server does after each reply;
* the same end to end over stdio, against the installed ``context-paging serve``; the after_id
  turns alternate between the two reply forms (``reply_form`` "messages", the whole window, and
  "positions", ranges of the host's own messages: paging/window_form.py), ``--turns`` of each;
* over stdio, the first long call of a server that has loaded (a small call first, on another
  session: a server already running when a long conversation comes), through the SDK's client
  and through a raw client (bench/stdio_calls.py: the request's bytes written as they are, the
  reply read as a line), whose figure is the server's share: the SDK's client adds its own
  serialization of the 16 MB request and, on its first call, importing and compiling the
  reply's JSON schema checker.

``--reference`` runs the library figures a second time with ``ContextService.reference`` (every
message counted and every output judged before selecting, the full computation), side by side.

``--no-distill`` turns distillation off (library and stdio alike); ``--estimator`` applies to
both as well. The stdio figures include the server's start: "connect" is launch to the end of
the ``initialize`` handshake, and the first call follows at once, as a host's would (the server
loads its History and tokenizer in the background meanwhile: server/warmup.py).

    python bench/select_bench.py [--repeat 3] [--estimator tiktoken|chars4] [--no-distill]
                                 [--no-stdio] [--no-library] [--reference] [--turns 9]
                                 [--clock wall|cpu]

``--clock cpu`` times the library figures (floors included) in this process's CPU time instead
of the wall clock, and leaves the stdio figures out: on a machine other work loads, the CPU
time moves far less between runs than the wall (a call that waits for its fsync or for a core
shows less than it took).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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
        start = CLOCK[0]()
        result = fn()
        times.append(CLOCK[0]() - start)
    return min(times), result


def json_floor(request: dict, reply: dict, repeat: int) -> float:
    raw = json.dumps(request)
    return best(repeat, lambda: (json.loads(raw), json.dumps(reply)))[0]


def issue_floor(messages: list[dict], repeat: int) -> float:
    """The JSON floor: one round trip of the conversation through the json module."""
    return best(repeat, lambda: json.loads(json.dumps(messages)))[0]


FLOORS: dict[str, float] = {}
# The library figures' clock: wall time, or with ``--clock cpu`` this process's CPU time (all
# its threads, kernel time included), which a loaded machine moves far less than the wall.
CLOCK = [time.perf_counter]


def show(label: str, seconds: float) -> None:
    print(f"{label:<44} {seconds * 1000:8.1f} ms   (x{seconds / FLOORS['issue']:.2f} floor, "
          f"x{seconds / FLOORS['small']:.2f} small floor)")


def grown_by(messages: list[dict], extra: int) -> list[dict]:
    """The workload with ``extra`` more turns before the active request."""
    more = [m for n in range(extra) for m in turn(300 + n, 52_428)]
    return messages[:-1] + more + [messages[-1]]


def library(repeat: int, estimator: str, reference: bool, turns: int, distill: bool) -> None:
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService, ContextSettings
    from context_paging.paging.distill import DistillConfig
    from context_paging.server.tokens import text_counter

    messages = workload()
    settings = ContextSettings(token_budget=128_000, estimator=estimator,
                               distill=DistillConfig(enabled=distill))
    counter = text_counter()
    label = "reference" if reference else "library"
    colds = [_fresh(settings, counter, messages, reference) for _ in range(repeat)]
    cold_time, reply = min(c[0] for c in colds), colds[-1][1]
    first = not FLOORS
    if first:
        FLOORS["issue"] = issue_floor(messages, repeat)
        FLOORS["small"] = json_floor(arguments(messages), reply, repeat)
    with tempfile.TemporaryDirectory() as home:
        svc = ContextService(Ledger(Path(home)), settings, counter)
        svc.reference = reference
        svc.select(**_call_args(messages))
        warm_time, _ = best(repeat, lambda: svc.select(**_call_args(messages)))
        grown = _call_args(grown_by(messages, 1))  # built outside the timed call
        _idle(svc)
        grow_time, last = best(1, lambda: svc.select(**grown))
        wholes = []  # more single turns, whole conversation: one call is too noisy a figure
        for n in range(2, turns + 2):
            grown = _call_args(grown_by(messages, n))
            _idle(svc)
            start = CLOCK[0]()
            last = svc.select(**grown)
            wholes.append(CLOCK[0]() - start)
        deltas = []
        for n in range(turns + 2, 2 * turns + 2):  # one new turn at a time, after the last id
            if "last_message_id" not in last:
                break  # a version without after_id (the bench also runs on older commits)
            new = turn(300 + n - 1, 52_428) + [messages[-1]]
            call = _call_args(new) | {"after_id": last["last_message_id"]}
            _idle(svc)
            start = CLOCK[0]()
            last = svc.select(**call)
            deltas.append(CLOCK[0]() - start)
    if first:
        # Measured again now: the floor's allocations run faster in a heap that freed more
        # memory before them, so its figure moves with what the calls before it left (by 10-20%
        # between versions of the code); the lower of the two is the floor.
        FLOORS["issue"] = min(FLOORS["issue"], issue_floor(messages, repeat))
        print(f"workload: turns=300 messages={len(messages)} toolOutputBytes={TOTAL:,} "
              f"estimator={estimator} distill={'on' if distill else 'off'}")
        print(f"selection: mode={reply['mode']} estimated={reply['estimated_tokens']:,.0f} "
              f"budget={reply['budget_tokens']:,.0f} kept={len(reply['messages'])} "
              f"evicted={reply['evicted_messages']}")
        show("json.loads(json.dumps(messages)) [floor]", FLOORS["issue"])
        show("json.loads(request)+json.dumps(reply)", FLOORS["small"])
    show(f"{label}, cold (fresh ledger, first in the process)", colds[0][0])
    show(f"{label}, cold (fresh ledger, best of {repeat})", cold_time)
    show(f"{label}, repeated request", warm_time)
    show(f"{label}, one more turn", grow_time)
    show(f"{label}, one more turn (p50 of {len(wholes)})", statistics.median(wholes))
    if deltas:
        show(f"{label}, one more turn, after_id (p50)", statistics.median(deltas))


def _idle(svc) -> None:
    """The spare time between two requests (counting ahead; older versions did it in the call)."""
    if hasattr(svc, "idle"):
        svc.idle()


def _call_args(messages: list[dict]) -> dict:
    args = arguments(messages)
    return {"session": args["session"], "messages": messages, "fmt": "pi",
            "system": args["system"], "tools": args["tools"],
            "model_window": args["model_window"], "token_budget": args["token_budget"]}


def _fresh(settings, counter, messages, reference=False) -> tuple[float, dict]:
    """(seconds, reply) of the first call on a fresh home (making and removing the home, and
    the service's construction, are not timed)."""
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService

    home = Path(tempfile.mkdtemp())
    try:
        svc = ContextService(Ledger(home), settings, counter)
        svc.reference = reference
        call = _call_args(messages)
        start = CLOCK[0]()
        reply = svc.select(**call)
        return CLOCK[0]() - start, reply
    finally:
        shutil.rmtree(home)


def floors(repeat: int) -> None:
    """The floors alone (for a run without the library figures)."""
    messages = workload()
    FLOORS["issue"] = issue_floor(messages, repeat)
    FLOORS["small"] = json_floor(arguments(messages), {"messages": messages[-20:]}, repeat)
    show("json.loads(json.dumps(messages)) [floor]", FLOORS["issue"])


def stdio(repeat: int, turns: int, estimator: str, distill: bool) -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    messages = workload()
    grown = grown_by(messages, 1)
    command = shutil.which("context-paging") or str(Path(sys.executable).parent / "context-paging")

    async def run() -> None:
        with tempfile.TemporaryDirectory() as home:
            # The whole environment, so PYTHONPATH=<older checkout> benchmarks that version.
            settings = ["--set", f"paging.estimator={estimator}",
                        "--set", f"distill.enabled={'true' if distill else 'false'}"]
            params = StdioServerParameters(command=command,
                                           args=["--home", home, *settings, "serve"],
                                           env=dict(os.environ))
            launched = time.perf_counter()
            async with Client(params) as client:
                connected = time.perf_counter() - launched
                async def once(msgs):
                    result = await client.call_tool("select_context", arguments(msgs))
                    assert not result.is_error, result.content[0].text
                    return result.structured_content

                times = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    await once(messages)
                    times.append(time.perf_counter() - start)
                start = time.perf_counter()
                last = await once(grown)
                grow = time.perf_counter() - start
                # One more turn after_id, the two reply forms alternating turn by turn on the
                # same session (the form changes only the reply): side by side, same load.
                deltas: dict[str, list[float]] = {"messages": [], "positions": []}
                for n in range(2, 2 * turns + 2):
                    if "last_message_id" not in last:
                        break
                    form = "positions" if n % 2 else "messages"
                    new = turn(300 + n - 1, 52_428) + [messages[-1]]
                    args = arguments(new) | {"after_id": last["last_message_id"]}
                    if form == "positions":  # an older server may not know the argument
                        args["reply_form"] = form
                    start = time.perf_counter()
                    result = await client.call_tool("select_context", args)
                    elapsed = time.perf_counter() - start
                    if result.is_error and form == "positions":
                        continue  # a server without the positions form
                    assert not result.is_error, result.content[0].text
                    deltas[form].append(elapsed)
                    last = result.structured_content
        loaded = await first_long_call_once_loaded(command, settings, messages)
        raw = raw_first_long_call_once_loaded(messages, settings)
        show("stdio, connect (launch to initialized)", connected)
        show("stdio, first call (cold)", times[0])
        show("stdio, first long call once loaded", loaded)
        show("stdio, same, raw client (the server's share)", raw)
        show("stdio, repeated request", min(times[1:] or times))
        show("stdio, one more turn", grow)
        if deltas["messages"]:
            show("stdio, one more turn, after_id (p50)", statistics.median(deltas["messages"]))
        if deltas["positions"]:
            show("stdio, same, reply_form=positions (p50)",
                 statistics.median(deltas["positions"]))

    anyio.run(run)


TINY = {"session": "warm", "format": "pi", "messages": [{"role": "user", "content": "hello"}]}


async def first_long_call_once_loaded(command: str, settings: list[str],
                                      messages: list[dict]) -> float:
    """Seconds of the first long select_context through the SDK's client, after a small one
    on another session has made the server load its History and tokenizer."""
    from mcp import Client, StdioServerParameters

    with tempfile.TemporaryDirectory() as home:
        params = StdioServerParameters(command=command,
                                       args=["--home", home, *settings, "serve"],
                                       env=dict(os.environ))
        async with Client(params) as client:
            assert not (await client.call_tool("select_context", TINY)).is_error
            start = time.perf_counter()
            result = await client.call_tool("select_context", arguments(messages))
            elapsed = time.perf_counter() - start
            assert not result.is_error, result.content[0].text
    return elapsed


def raw_first_long_call_once_loaded(messages: list[dict], settings: list[str]) -> float:
    """The same through a raw client: the request line's bytes made before the clock starts."""
    from stdio_calls import Server, request

    server = Server("loaded", None, tuple(settings))
    try:
        server.call(1, request(1, json.dumps({"name": "select_context",
                                              "arguments": TINY}).encode()))
        line = request(2, json.dumps({"name": "select_context",
                                      "arguments": arguments(messages)}).encode())
        elapsed, _ = server.call(2, line)
    finally:
        server.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--estimator", choices=("tiktoken", "chars4"), default="tiktoken")
    parser.add_argument("--no-stdio", action="store_true")
    parser.add_argument("--no-library", action="store_true")
    parser.add_argument("--no-distill", action="store_true", help="distillation off")
    parser.add_argument("--reference", action="store_true",
                        help="also run the library figures on the full computation")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="the library figures' clock (cpu: no stdio figures)")
    parser.add_argument("--turns", type=int, default=9,
                        help="successive after_id turns for the p50 figures")
    args = parser.parse_args()
    distill = not args.no_distill
    if args.clock == "cpu":  # the server's CPU is another process's: no stdio figures
        CLOCK[0], args.no_stdio = time.process_time, True
    if args.no_library:
        floors(args.repeat)
    else:
        library(args.repeat, args.estimator, False, args.turns, distill)
    if args.reference and not args.no_library:
        library(args.repeat, args.estimator, True, args.turns, distill)
    if not args.no_stdio:
        stdio(args.repeat, args.turns, args.estimator, distill)


if __name__ == "__main__":
    main()
