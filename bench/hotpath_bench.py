"""The per-request cost of select_context, this checkout against another, interleaved in one run.

Three hot paths, each measured in a fresh worker process per round, the two checkouts taking
turns (A B A B …) so machine load falls on both alike:

* **library, after_id** — upstream's workload (bench/select_bench.py: 901 messages, 15 MiB of
  tool output, budget 128,000), one cold call, then ``--turns`` calls that each send one new
  turn after the previous reply's ``last_message_id``; p50 of those calls;
* **stdio, after_id** — the same through ``context-paging serve`` over stdio (the checkout's
  own server, started with ``PYTHONPATH`` set to it);
* **proxy path** — every recorded Claude Code and Codex fixture replayed request by request
  through the proxy's paging step (``Proxy._paged`` and its stats note: read the body, key the
  conversation, select_context, splice), without the HTTP hop; p50 / p95 per request, next to
  ``json.loads`` + ``json.dumps`` of the same body.

Each figure is printed with its ratio to the JSON floor timed in the same worker (the selection
speed goals' ``json.loads(json.dumps(messages))`` for the first two, the body's round trip for the
proxy), then the medians over rounds and this checkout's time as a share of the other's. The
in-process paths also report the process's CPU time per call (p50), which other load on a shared
machine disturbs far less than wall time (it leaves out waiting for the disk, which wall time has).

    python bench/hotpath_bench.py --against <other checkout> [--rounds 3] [--turns 15]
                                  [--no-stdio] [--no-proxy]

``<other checkout>`` is a source tree of this project (e.g. ``git archive <commit> | tar -x -C
/tmp/base``); it is imported through ``PYTHONPATH``, this bench's own workload code is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def library_after_id(turns: int) -> dict:
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService, ContextSettings
    from context_paging.server.tokens import text_counter
    from select_bench import _call_args, issue_floor, turn, workload

    messages = workload()
    floor = issue_floor(messages, 3)
    with tempfile.TemporaryDirectory() as home:
        svc = ContextService(Ledger(Path(home)), ContextSettings(token_budget=128_000),
                             text_counter())
        last = svc.select(**_call_args(messages))
        times, cpu = [], []
        for n in range(1, turns + 1):
            call = _call_args(turn(300 + n, 52_428) + [messages[-1]])
            if hasattr(svc, "idle"):  # spare time between requests, untimed (as serve does it)
                svc.idle()
            start, start_cpu = time.perf_counter(), time.process_time()
            last = svc.select(**call, after_id=last["last_message_id"])
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    return {"p50": statistics.median(times), "cpu": statistics.median(cpu), "floor": floor}


def stdio_after_id(turns: int) -> dict:
    import anyio
    from mcp import Client, StdioServerParameters
    from select_bench import arguments, issue_floor, turn, workload

    messages = workload()
    floor = issue_floor(messages, 3)
    code = "import sys; from context_paging.server.cli import main; sys.exit(main())"
    out: dict = {}

    async def run() -> None:
        with tempfile.TemporaryDirectory() as home:
            params = StdioServerParameters(command=sys.executable,
                                           args=["-c", code, "--home", home, "serve"],
                                           env=dict(os.environ))
            async with Client(params) as client:
                result = await client.call_tool("select_context", arguments(messages))
                last = result.structured_content
                times = []
                for n in range(1, turns + 1):
                    args = arguments(turn(300 + n, 52_428) + [messages[-1]])
                    args["after_id"] = last["last_message_id"]
                    start = time.perf_counter()
                    result = await client.call_tool("select_context", args)
                    times.append(time.perf_counter() - start)
                    assert not result.is_error, result.content[0].text
                    last = result.structured_content
        out.update(p50=statistics.median(times), floor=floor)

    anyio.run(run)
    return out


def proxy_path() -> dict:
    sys.path.append(str(ROOT))  # tests.fake_provider, imported by proxy_bench (after PYTHONPATH)
    from context_paging.index.home.proxied import ProxyLog
    from context_paging.server.config import load_settings
    from context_paging.server.histories import make_history
    from context_paging.server.proxy import wire
    from context_paging.server.proxy.app import Proxy, Upstreams
    from proxy_bench import FIXTURES, claude_requests, codex_requests, json_floor

    work = Path(tempfile.mkdtemp(prefix="hotpath-bench-"))
    home, empty = work / "home", work / "none"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
        '[paging]\ntoken_budget = 16000\nestimator = "chars4"\n[distill]\nenabled = true\n')
    history = make_history(load_settings(home=str(home)))
    nowhere = "http://127.0.0.1:9"  # never contacted: only the paging step runs
    proxy = Proxy(history.select_context, Upstreams(anthropic=nowhere, openai=nowhere),
                  ProxyLog(home))
    headers = {"x-api-key": "bench", "anthropic-version": "2023-06-01",
               "content-type": "application/json"}
    cases = [(wire.ANTHROPIC, claude_requests(p))
             for p in sorted((FIXTURES / "claude-code").glob("*.jsonl"))]
    cases += [(wire.RESPONSES, codex_requests(p))
              for p in sorted((FIXTURES / "codex").glob("*.jsonl"))]
    times, cpu, floors = [], [], []
    for api, requests in cases:
        for body in requests:
            raw = json.dumps(body).encode()
            start, start_cpu = time.perf_counter(), time.process_time()
            _, note, _ = proxy._paged(api, raw, headers)
            if note is not None:
                note()
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            floors.append(json_floor(raw))
    history.close()
    return {"p50": _p(times, .5), "p95": _p(times, .95), "cpu": _p(cpu, .5),
            "floor": _p(floors, .5),
            "floor95": _p(floors, .95), "requests": len(times)}


def worker(kind: str, turns: int) -> None:
    sys.path.insert(0, str(HERE))
    result = {"library": lambda: library_after_id(turns), "stdio": lambda: stdio_after_id(turns),
              "proxy": proxy_path}[kind]()
    import context_paging.index as index  # in every checkout, whatever its modules

    result["source"] = str(Path(index.__file__).resolve().parent.parent)
    print(json.dumps(result))


def measure(checkout: Path, kind: str, turns: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run([sys.executable, __file__, "--worker", kind, "--turns", str(turns)],
                          env=env, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["source"]) != checkout.resolve():
        raise SystemExit(f"the worker imported {result['source']}, not {checkout}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--no-stdio", action="store_true")
    parser.add_argument("--no-proxy", action="store_true")
    parser.add_argument("--worker", choices=("library", "stdio", "proxy"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.turns)
        return
    checkouts = {"this": ROOT}
    if args.against:
        checkouts = {"other": args.against.resolve(), "this": ROOT}
    kinds = ["library"] + ["stdio"] * (not args.no_stdio) + ["proxy"] * (not args.no_proxy)
    results: dict[tuple[str, str], list[dict]] = {}
    for round_ in range(1, args.rounds + 1):
        for kind in kinds:
            for name, checkout in checkouts.items():
                r = measure(checkout, kind, args.turns)
                results.setdefault((kind, name), []).append(r)
                extra = f", p95 {r['p95'] * 1000:.1f} ms" if "p95" in r else ""
                extra += f", CPU p50 {r['cpu'] * 1000:.1f} ms" if "cpu" in r else ""
                print(f"round {round_} {kind:<8} {name:<6} p50 {r['p50'] * 1000:7.1f} ms"
                      f"{extra}  (x{r['p50'] / r['floor']:.2f} its JSON floor, "
                      f"{r['floor'] * 1000:.1f} ms)", flush=True)
    names = ", ".join(f"{n} = {c}" for n, c in checkouts.items())
    print(f"\nmedians over {args.rounds} rounds ({names}):")
    for kind in kinds:
        row = {}
        for name in checkouts:
            rs = results[(kind, name)]
            row[name] = (statistics.median(r["p50"] for r in rs),
                         statistics.median(r["p50"] / r["floor"] for r in rs),
                         statistics.median(r.get("p95", 0) for r in rs),
                         statistics.median(r.get("cpu", 0) for r in rs))
        cells = "   ".join(f"{n}: p50 {v[0] * 1000:.1f} ms (x{v[1]:.2f} floor"
                           + (f", p95 {v[2] * 1000:.1f} ms" if v[2] else "")
                           + (f", CPU {v[3] * 1000:.1f} ms)" if v[3] else ")")
                           for n, v in row.items())
        share = (f"   this/other {row['this'][0] / row['other'][0]:.2f}"
                 + (f" (CPU {row['this'][3] / row['other'][3]:.2f})" if row["this"][3] else "")
                 if "other" in row else "")
        print(f"{kind:<8} {cells}{share}")


if __name__ == "__main__":
    main()
